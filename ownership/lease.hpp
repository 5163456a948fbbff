// Leases: which worker owns a session, and the fencing epoch it writes with.
//
// A lease is (session, owner worker id, epoch, expiry). Exactly one live lease per session; an
// acquisition hands out an epoch higher than every epoch handed out before, for any session, so
// an epoch is never given twice and a deleted-then-recreated session still fences out its old
// owners. The owner opens the session's store log at that epoch (storage/store.hpp), so a stale
// owner's writes fail with lease_lost even if it missed that its lease expired.
//
// Time is the backend's own: the SQLite catalog uses the host's clock (its workers share it),
// the PostgreSQL backend the database's clock. Every operation is one transaction.
//
// Thread-safe.
#pragma once

#include "session/ids.hpp"
#include "session/state.hpp"
#include "storage/errc.hpp"
#include "storage/store.hpp"

#include <chrono>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace wuhu::ownership {

using session::lease_epoch;
using session::session_id;
using session::unix_ms;
template <class T>
using result = boost::system::result<T>;

struct lease {
    session_id id;
    std::string owner;
    lease_epoch epoch;
    unix_ms expires;
    // Set by acquire() only: the other worker whose expired lease this one replaced (a
    // take-over), or empty.
    std::string taken_from;
    bool operator==(const lease&) const = default;
};

// How leases are kept: renewed every `renew_interval`; an owner that could not renew stops
// serving a session `stop_margin` before its lease would expire (STYLE.md 9).
struct lease_settings {
    std::chrono::milliseconds ttl{15000};
    std::chrono::milliseconds renew_interval{5000};
    std::chrono::milliseconds stop_margin{3000};

    // ttl, renewed every ttl/3, served until ttl - ttl/5 after the last renewal began.
    static lease_settings for_ttl(std::chrono::milliseconds ttl) {
        return lease_settings{ttl, ttl / 3, ttl / 5};
    }
};

// acquire() when another worker holds a live lease.
struct held_elsewhere {
    std::string owner;
    unix_ms expires;
    lease_epoch epoch;  // of that live lease
};

using acquisition = std::variant<lease, held_elsewhere>;

// Which live leases live() lists, by session id (byte order).
struct lease_query {
    std::optional<std::vector<session_id>> ids;  // only these sessions
    std::optional<std::string> owner;            // only this owner's
    std::optional<session_id> after;             // only ids after this one
    std::size_t limit = std::numeric_limits<std::size_t>::max();
    // Only the sessions of this tenant; "": those of no tenant (storage::in_scope).
    std::optional<std::string> tenant;
};

// Whether the query's filters (not `limit`) let a live lease through.
bool matches(const lease_query& q, const lease& l);

class lease_store {
  public:
    virtual ~lease_store() = default;
    lease_store() = default;
    lease_store(const lease_store&) = delete;
    lease_store& operator=(const lease_store&) = delete;

    // Takes the session for `owner` unless another owner's lease is live: a new epoch, expiry
    // now + ttl. Taking a lease `owner` already holds also gives a new epoch (the caller did not
    // know it held it: an earlier run with the same worker id must be fenced out).
    virtual result<acquisition> acquire(const session_id& id, std::string_view owner,
                                        std::chrono::milliseconds ttl) = 0;
    // acquire() of each of `ids` (distinct), answered in order, in one transaction where the
    // backend can: a burst of new sessions shares one commit. By default, one acquire() each.
    virtual std::vector<result<acquisition>> acquire_all(const std::vector<session_id>& ids,
                                                         std::string_view owner,
                                                         std::chrono::milliseconds ttl);
    // Extends each of `held` (all of one owner) to now + ttl in one transaction, if it is still
    // that owner's at that epoch and has not expired. Returns the ids that are not (lost: the
    // caller must drop them). An expired lease is lost even if nobody took it: any worker may
    // have claimed it since, and its owner has stopped serving it (the stop margin).
    // The real backends renew per worker (ownership/generations.hpp): when `held` is exactly
    // what this store stamped with the owner's current generation, one row is written whatever
    // the number of leases; a lease left out of `held` expires within a ttl all the same.
    virtual result<std::vector<session_id>> renew(const std::vector<lease>& held,
                                                  std::chrono::milliseconds ttl) = 0;
    // renew() of every lease `owner` holds, without naming them: true when this store stamped
    // exactly `count` leases with the owner's current generation, their keys
    // (generations::key) xored to `digest`, and its row, still live, was extended (one write);
    // false when they are not, or the generation is no longer live: the caller then names them
    // to renew(). By default false.
    virtual result<bool> renew_generation(std::string_view owner, std::size_t count,
                                          std::uint64_t digest, std::chrono::milliseconds ttl);
    // The recovery sweep's acquire: in one transaction, takes up to `limit` of `candidates`
    // whose lease is missing, expired or `owner`'s own (an earlier run's), each at a new epoch
    // (lease::taken_from set as by acquire()). Sessions another owner holds live, or another
    // worker is claiming at this moment, are skipped: workers sweeping the same candidates at
    // once share them out instead of queueing on the same rows.
    virtual result<std::vector<lease>> claim(const std::vector<session_id>& candidates,
                                             std::string_view owner,
                                             std::chrono::milliseconds ttl,
                                             std::size_t limit) = 0;
    // Gives the lease up (if still held at that epoch): another worker may take it at once.
    virtual result<void> release(const lease& held) = 0;
    // The live lease of the session, if any.
    virtual result<std::optional<lease>> owner_of(const session_id& id) = 0;
    // The live leases `q` asks for, by session id.
    virtual result<std::vector<lease>> live(const lease_query& q) = 0;
    // The workers that hold a live lease, by id.
    virtual result<std::vector<std::string>> owners() = 0;
    // The session was deleted under the lease at `epoch`: forgets its lease, whoever holds it,
    // unless it is newer than `epoch` (taken after the deletion). Idempotent.
    virtual result<void> remove(const session_id& id, lease_epoch epoch) = 0;

    // "memory", "sqlite".
    virtual std::string_view backend() const = 0;
};

// The clock a backend reads when it has none of its own (milliseconds since the epoch).
using wall_clock = std::function<unix_ms()>;
unix_ms system_now();

}  // namespace wuhu::ownership
