// Identifiers and counters of a session, as distinct types.
//
// String identifiers can only be made through `parse`, which validates them, so a value of
// these types is always valid: a session_id can go into a NATS subject or a file name as is.
// Counters are plain value types with a named field.
#pragma once

#include "session/errc.hpp"

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace wuhu::session {

// Per-session transcript entry id: 1, 2, 3, ... (0 means "none"). It is also the transcript
// cursor of the version vector.
struct entry_seq {
    std::uint64_t value = 0;
    auto operator<=>(const entry_seq&) const = default;
};

// Per-lane journal cursor: the count of journal facts recorded in that lane.
struct journal_seq {
    std::uint64_t value = 0;
    auto operator<=>(const journal_seq&) const = default;
};

// Fencing epoch of a lease. Epochs only grow.
struct lease_epoch {
    std::uint64_t value = 0;
    auto operator<=>(const lease_epoch&) const = default;
};

// Wall-clock time in milliseconds since the Unix epoch. The domain never reads a clock: every
// timestamp is an input.
struct unix_ms {
    std::int64_t value = 0;
    auto operator<=>(const unix_ms&) const = default;
};

// 1-64 characters of [A-Za-z0-9_-]: safe as a NATS subject token and as a file name. The one
// rule for the tokens Wuhu puts in subjects: session ids, worker ids, the tokens of a prefix.
bool is_id_token(std::string_view s);

// A session's identity: its id (an id token, as clients name it) and, where tenancy is on, the
// tenant it belongs to (an id token too). Two tenants' sessions of equal ids are different
// sessions. Its key, str(), is what stores, leases, logs and the fleet's own messages keep:
// the id alone for a session of no tenant, `<tenant>.<id>` for a tenant's. The key is safe as
// a file name (its tokens are each safe as a subject token), and keys of one tenant sort
// together (a range: from `<tenant>.` up to `<tenant>/`).
class session_id {
  public:
    // A session id as a client names it: an id token.
    static result<session_id> parse(std::string_view s);
    // A session's key as str() gives it: an id, or `<tenant>.<id>`.
    static result<session_id> parse_key(std::string_view key);
    // The session `local` of tenant `tenant` (an id token).
    static result<session_id> of_tenant(std::string_view tenant, std::string_view local);
    // The key.
    const std::string& str() const { return value_; }
    // The tenant ("" for a session of no tenant) and the id within it.
    std::string_view tenant() const;
    std::string_view local() const;
    auto operator<=>(const session_id&) const = default;

  private:
    explicit session_id(std::string v) : value_(std::move(v)) {}
    std::string value_;
};

// A string id of 1-128 printable ASCII characters (0x20-0x7E). `Tag` keeps the kinds apart.
template <class Tag>
class printable_id {
  public:
    static result<printable_id> parse(std::string_view s) {
        if (!valid(s)) {
            return Tag::error;
        }
        return printable_id(std::string(s));
    }
    const std::string& str() const { return value_; }
    auto operator<=>(const printable_id&) const = default;

    static bool valid(std::string_view s) {
        if (s.empty() || s.size() > 128) {
            return false;
        }
        for (unsigned char c : s) {
            if (c < 0x20 || c > 0x7E) {
                return false;
            }
        }
        return true;
    }

  private:
    explicit printable_id(std::string v) : value_(std::move(v)) {}
    std::string value_;
};

struct queue_item_tag {
    static constexpr errc error = errc::invalid_item_id;
};
struct participant_tag {
    static constexpr errc error = errc::invalid_participant_id;
};
struct tool_call_tag {
    static constexpr errc error = errc::invalid_tool_call_id;
};

// Client-chosen idempotency key of a queue item, or a server-generated UUIDv7.
using queue_item_id = printable_id<queue_item_tag>;
using participant_id = printable_id<participant_tag>;
// Provider-assigned id of a tool call inside an assistant message.
using tool_call_id = printable_id<tool_call_tag>;

// Formats a UUIDv7 (RFC 9562) from a timestamp and 10 random bytes. Pure: the caller supplies
// both, so the worker owns the clock and the randomness.
queue_item_id make_uuid_v7(unix_ms at, const std::array<std::uint8_t, 10>& random);

}  // namespace wuhu::session

template <>
struct std::hash<wuhu::session::session_id> {
    std::size_t operator()(const wuhu::session::session_id& s) const noexcept {
        return std::hash<std::string>{}(s.str());
    }
};
template <class Tag>
struct std::hash<wuhu::session::printable_id<Tag>> {
    std::size_t operator()(const wuhu::session::printable_id<Tag>& s) const noexcept {
        return std::hash<std::string>{}(s.str());
    }
};
