// The leases one worker holds, and where each session's requests go.
//
// place(sid) answers "here, at this epoch" (a lease this worker holds, or one it just took
// because nobody live held it) or "at worker X" (another worker's live lease: forward);
// locate(sid) answers the same without taking anything ("nobody": no live lease). renew()
// extends every held lease in one transaction. release_all() on shutdown lets other workers
// take the sessions at once.
//
// A held lease is served only until `stop_margin` before it would expire, counted on this
// host's steady clock from the moment its last acquisition or renewal began (the store's
// expiry is later than that). Past that deadline (the worker was frozen, or could not renew),
// place() and locate() renew that lease first and serve it only if the store still has it: a
// fenced owner never answers from its old state. A lease found lost is forgotten and reported
// to the listener, which unloads the session. serving() tells, without any store IO, whether
// a session's lease is within its deadline (the worker streams and publishes only then), and
// expire_overdue() gives up every lease past it, so that an owner that could not renew stops
// before another may take over.
//
// Thread-safe. What it holds is read and changed under a mutex that is never held across store
// IO, so serving(), here() and the other calls without store IO answer at once while an
// acquisition or a renewal runs on another thread. The calls that do store IO (place, locate,
// renew, release, lost, remove) must not run concurrently for one session (two acquisitions
// would hand out two epochs): the worker runs them one at a time, off its serving executor
// (ownership/lease_desk.hpp).
#pragma once

#include "ownership/errc.hpp"
#include "ownership/lease.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

namespace wuhu::ownership {

enum class lease_event {
    acquired,    // nobody held it
    taken_over,  // another worker's lease had expired (lease::taken_from)
    lost,        // a newer owner holds it, or it could not be renewed in time
    released,    // given up (unloaded, or the worker stops)
};
std::string_view lease_event_name(lease_event e);

class keeper {
  public:
    struct here {
        lease_epoch epoch;
    };
    struct elsewhere {
        std::string owner;
        lease_epoch epoch;  // of the owner's live lease
        unix_ms expires;    // its expiry then (the lease store's clock)
    };
    using placement = std::variant<here, elsewhere>;
    using steady_clock = std::function<std::chrono::steady_clock::time_point()>;
    // Told of every lease acquired, taken over, lost or released (on the caller's thread,
    // outside the keeper's mutex).
    using listener = std::function<void(lease_event, const lease&)>;

    // Throws std::invalid_argument for an invalid worker id.
    keeper(lease_store& store, std::string worker_id, lease_settings settings,
           steady_clock clock = std::chrono::steady_clock::now);
    keeper(lease_store& store, std::string worker_id, std::chrono::milliseconds ttl)
        : keeper(store, std::move(worker_id), lease_settings::for_ttl(ttl)) {}

    void on_event(listener l) { listener_ = std::move(l); }

    result<placement> place(const session_id& id);
    // place() of each of `ids` (distinct), answered in order; the leases it must take are
    // taken together (lease_store::acquire_all: one commit for a burst of new sessions).
    std::vector<result<placement>> place_all(const std::vector<session_id>& ids);
    // The placement of a lease this worker holds within its deadline, without store IO;
    // nullopt otherwise (place() or locate() must ask the store).
    std::optional<placement> here_now(const session_id& id) const;
    // Like place(), but takes nothing: nullopt when no live lease exists.
    result<std::optional<placement>> locate(const session_id& id);
    // The recovery sweep's acquisition: claims up to `limit` of `candidates` that this worker
    // does not hold already (lease_store::claim) and holds them; reports each acquired or
    // taken over.
    result<std::vector<lease>> claim(const std::vector<session_id>& candidates, std::size_t limit);
    // The epoch of a lease this worker holds; not_held otherwise.
    result<lease_epoch> epoch_of(const session_id& id) const;
    // Renews every held lease; returns the lost ones (already forgotten here and reported).
    // When the store fails, the leases past their deadline are forgotten and reported lost,
    // and the error is returned.
    result<std::vector<session_id>> renew();
    // Whether the session's lease is held and within its deadline (no store IO).
    bool serving(const session_id& id) const;
    // No held lease's deadline is earlier (nullopt: none held); it may be earlier than every
    // one, after a lease went: the renewal loop then wakes for an expire_overdue() that finds
    // none past its deadline.
    std::optional<std::chrono::steady_clock::time_point> next_deadline() const;
    // Forgets the leases past their deadline and reports them lost (no store IO: the store
    // may not answer, and by the time it would, another worker may own them).
    void expire_overdue();
    // Gives one lease up (its session was unloaded), or all of them (shutdown).
    void release(const session_id& id);
    void release_all();
    // The in-memory half of release(), also for a lease the store fenced out (`why` lost):
    // forgets the lease (only if it is still the one at `epoch`, when given) and reports
    // `why`; the caller gives the returned lease back to the store (store().release()) when
    // it can.
    std::optional<lease> forget(const session_id& id, lease_event why,
                                std::optional<lease_epoch> epoch = std::nullopt);
    // Forgets every lease (reported released) and returns them, for the store's release.
    std::vector<lease> forget_all();
    // The session was deleted under this worker's lease at `epoch`: forget that lease (and
    // whoever's lease is not newer), but not one taken after the deletion.
    result<void> remove(const session_id& id, lease_epoch epoch);

    std::size_t held() const;
    // The sessions whose lease this worker holds, in id order.
    std::vector<session_id> held_ids() const;
    const std::string& worker_id() const { return worker_id_; }
    std::chrono::milliseconds ttl() const { return settings_.ttl; }
    const lease_settings& settings() const { return settings_; }
    lease_store& store() { return store_; }

  private:
    using time_point = std::chrono::steady_clock::time_point;
    struct held_lease {
        lease l;
        time_point serve_until;   // from its acquisition, or its renewal alone
        std::uint64_t round = 0;  // renewal rounds begun before it was kept
    };
    // Until when a held lease may be served: its own deadline, or a later one of the last
    // renewal of the whole generation that covered it (begun after the lease was kept).
    // REQUIRES: mu_ held.
    time_point until(const held_lease& h) const {
        return h.round < covered_.round ? std::max(h.serve_until, covered_.until) : h.serve_until;
    }
    // Forgets a held lease. REQUIRES: mu_ held.
    std::map<std::string, held_lease>::iterator drop(
        std::map<std::string, held_lease>::iterator it);
    // Whether the held lease may be served now, renewing it first if its deadline passed; a
    // lost one is forgotten (and reported).
    result<bool> still_held(const session_id& id);
    // Records an acquisition. REQUIRES: mu_ held.
    void keep(const lease& l, std::chrono::steady_clock::time_point began);
    // Until when a lease whose acquisition or renewal began at `began` may be served.
    std::chrono::steady_clock::time_point deadline(
        std::chrono::steady_clock::time_point began) const {
        return began + settings_.ttl - settings_.stop_margin;
    }
    void tell(lease_event e, const lease& l) const;

    lease_store& store_;
    std::string worker_id_;
    lease_settings settings_;
    steady_clock clock_;
    listener listener_;
    mutable std::mutex mu_;  // guards held_ and earliest_
    std::map<std::string, held_lease> held_;
    // No held lease's serve_until is earlier (next_deadline() without a walk of 100,000
    // leases): lowered by keep(), made exact again by the walks of renew() and
    // expire_overdue(); a lease that goes leaves it early, which wakes the renewal loop for an
    // expire_overdue() that finds nothing and sets it right.
    std::chrono::steady_clock::time_point earliest_ = std::chrono::steady_clock::time_point::max();
    // A renewal round that finds the held leases exactly what the store stamped with this
    // worker's current generation renews them without naming them (lease_store::
    // renew_generation) and without a walk: the keeper keeps their count and digest
    // (generations::key) as it keeps and forgets leases, and records the round's deadline
    // once for every lease kept before the round began (until()). 100,000 held leases cost a
    // round no more than one.
    std::uint64_t digest_ = 0;
    std::uint64_t rounds_ = 0;  // renewal rounds begun
    struct {
        std::uint64_t round = 0;  // the leases kept before this round began...
        time_point until{};       // ...may be served until then
    } covered_;
    time_point kept_in_round_ = time_point::max();  // the earliest deadline kept since it began
};

}  // namespace wuhu::ownership
