// The replies of the NATS contract: {"ok":true,...} or {"ok":false,"error":{code,message}},
// written by the server and read by the client, and the chunks a large reply travels in.
#pragma once

#include "protocol/subjects.hpp"
#include "session/codec.hpp"
#include "session/patch.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wuhu::protocol {

// {"ok":false,"error":{"code":"...","message":"..."}}
std::string error_reply(std::string_view code, std::string_view message);
std::string error_reply(const boost::system::error_code& ec);
// A refusal to retry later: {"ok":false,"error":{code, message, retry_after_ms}} (no hint:
// nullopt).
std::string error_reply(const boost::system::error_code& ec,
                        std::optional<std::chrono::milliseconds> retry_after);
std::string error_reply(const session::decode_error& e);

// What a command's ok reply carries: the item id (enqueue, system), whether it was canceled
// (cancel), the settings after the change (configure).
struct command_result {
    std::optional<session::queue_item_id> id;
    std::optional<bool> canceled;
    std::optional<session::settings> settings;
    // abort: what it stopped (none: nothing), the interruption entry, and whether a request
    // with its id was answered before.
    session::abort_stage stopped = session::abort_stage::none;
    session::entry_seq entry;
    bool duplicate = false;
    // approve, reject, respond: the decision on record (duplicate: it was made before).
    std::optional<session::approval_decided> decided = std::nullopt;
};
// {"ok":true, ...}: id for enqueue/system, canceled for cancel, settings for configure,
// stopped (and entry, duplicate) for abort, decision (and duplicate) for approve, reject and
// respond.
std::string ok_reply(verb v, const command_result& r);

// The message being streamed when a subscribe reply is made: its step, its text so far, and
// the seq of the last delta in that text.
// The message being streamed: its text and tool-call deltas so far, up to delta `seq`.
struct inflight {
    struct call_delta {
        std::string id;
        std::string name;
        std::string arguments;
    };
    std::uint64_t step = 0;
    std::uint64_t epoch = 0;  // of the owner streaming it
    std::string text;
    std::uint64_t seq = 0;
    std::vector<call_delta> tool_calls;
};
// The subscribe reply: {ok, patch, status, settings, step, inflight?}. `step` is the number of
// assistant messages up to the patch's `to`: the step of the next streamed message (a client
// drops stream events of lower steps, whose messages the patch already holds).
// A page of a longer backfill (`more`: true) holds the patch to a version short of the current
// one and no inflight: the client asks again since its `to`.
std::string subscribe_reply(const session::patch& p, const session::status& st, std::uint64_t step,
                            const std::optional<inflight>& streaming, bool more = false);
// The client's side: `next`, the page that follows `reply` (its patch from `reply`'s `to`),
// appended to it: one reply with the patch from the first page's `from` to the last page's
// `to`, and the last page's registers, step and inflight.
void append_page(boost::json::object& reply, boost::json::object next);

// A reply no larger than `max_bytes` as is; a larger one as ordered chunks, each within
// `max_bytes`: {"ok":true,"chunk":i,"chunks":n,"part":"..."} where the parts, concatenated in
// order, are the reply's JSON text (cut between UTF-8 characters).
std::vector<std::string> chunked(std::string reply, std::size_t max_bytes);

// The client's side.

// An error reply, or what the client itself reports ("no_reply", "bad_reply", ...).
struct reply_error {
    std::string code;
    std::string message;
    // The wait a refusal suggests before a retry (retry_after_ms), if it does.
    std::optional<std::chrono::milliseconds> retry_after = std::nullopt;
};
// For result<T, reply_error>::value(): throws std::runtime_error("code: message").
[[noreturn]] void throw_exception_from_error(const reply_error& e, const boost::source_location&);
// The reply object when it is {"ok":true,...}; its error otherwise ("bad_reply" when the text
// is not a Wuhu reply).
boost::system::result<boost::json::object, reply_error> read_reply(std::string_view text);

// Reassembles a reply from its messages: a whole reply, or its chunks in order.
class reply_assembler {
  public:
    enum class progress { more, done, bad };
    // Takes the next message; `done` once the reply is whole (then text()), `bad` for a chunk
    // out of order or malformed.
    progress take(std::string message);
    const std::string& text() const { return text_; }

  private:
    std::string text_;
    std::uint64_t next_ = 0;
};

}  // namespace wuhu::protocol
