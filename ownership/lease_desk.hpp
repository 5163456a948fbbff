// The keeper's face on the serving executor.
//
// A lease this worker holds within its deadline is answered from memory, at once. Everything
// that asks the lease store (acquiring, locating, renewing, releasing, removing) runs on
// `lease_ex`, a strand of the store pool: one operation at a time (two acquisitions of one
// session would hand out two epochs), and never on the executor that serves the sessions, so
// a cold lease, a slow catalog or a database round trip stalls no other session. Releases are
// fire and forget: the keeper forgets the lease at once, and the store hears of it in order
// with whatever comes next on the strand (an acquisition after a release gets a newer epoch).
//
// A renewal goes ahead of what waits on the strand: the next operation to start runs it first.
// Behind a burst of acquisitions (hundreds of new sessions at once, on a slow disk) it would
// otherwise wait until the leases it renews had run out, and the worker would give up
// sessions nobody else wanted.
//
// Requests for one session are placed in the order they came: while one waits on the strand,
// the next ones wait behind it there too (answered from memory, they would overtake it: a
// delete would run before the enqueues sent ahead of it).
//
// Placements of sessions with nothing else waiting on the strand are placed together: the
// first of them to get its turn places all that have come by then (keeper::place_all), so a
// burst of new sessions takes its leases in one commit. None of them overtakes an operation of
// its own session (it had none waiting when it joined, and one that comes later waits behind
// the turn that places it).
//
// Lease events are reported on the thread that caused them (the strand, or the caller's).
// Not thread-safe: call it from the serving executor.
#pragma once

#include "ownership/keeper.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>
#include <mutex>
#include <string>

namespace wuhu::ownership {

namespace asio = boost::asio;

class lease_desk {
  public:
    using placement = ownership::keeper::placement;

    lease_desk(ownership::keeper& keeper, asio::any_io_executor lease_ex)
        : keeper_(keeper), lease_ex_(std::move(lease_ex)) {}

    asio::awaitable<ownership::result<placement>> place(session::session_id id);
    asio::awaitable<ownership::result<std::optional<placement>>> locate(session::session_id id);
    asio::awaitable<ownership::result<std::vector<session::session_id>>> renew();
    asio::awaitable<ownership::result<std::vector<ownership::lease>>> claim(
        std::vector<session::session_id> candidates, std::size_t limit);
    asio::awaitable<ownership::result<void>> remove(session::session_id id,
                                                    session::lease_epoch epoch);
    // Forgets the lease now (reported released, or lost) and gives it back to the store next,
    // if it is still the one at `epoch` (a request waiting on the strand may have taken the
    // session again meanwhile). Without an epoch (passivation), a lease that a request of the
    // session is waiting for on the strand is kept: that request is about to use it.
    void release(const session::session_id& id,
                 std::optional<session::lease_epoch> epoch = std::nullopt);
    void lost(const session::session_id& id, session::lease_epoch epoch);
    // Forgets every lease now and returns once the store has them back.
    asio::awaitable<std::size_t> release_all();

    ownership::keeper& keeper() { return keeper_; }
    const ownership::keeper& keeper() const { return keeper_; }

  private:
    // `op` on the strand, after the renewal waiting there, if any.
    template <class R>
    asio::awaitable<R> in_turn(std::function<R()> op);
    void run_urgent();  // on the strand
    // A placement waiting to be placed with the others that came before its turn.
    struct batched {
        session::session_id id;
        std::optional<ownership::result<placement>> out;
    };
    void place_batch();  // on the strand
    void give_back(ownership::lease l);
    // Counts an operation of the session waiting on the strand while it lives.
    struct waiting {
        lease_desk* desk;
        std::string id;
        waiting(lease_desk* d, std::string i) : desk(d), id(std::move(i)) {
            ++desk->waiting_[id];
        }
        waiting(const waiting&) = delete;
        waiting& operator=(const waiting&) = delete;
        ~waiting() {
            if (auto it = desk->waiting_.find(id); --it->second == 0) {
                desk->waiting_.erase(it);
            }
        }
    };
    // The placement from memory, unless an operation of the session waits on the strand.
    std::optional<placement> at_once(const session::session_id& id) const;

    ownership::keeper& keeper_;
    asio::any_io_executor lease_ex_;
    std::map<std::string, int> waiting_;  // by session id
    std::mutex urgent_mu_;
    std::deque<std::function<void()>> urgent_;  // renewals, run by the next turn on the strand
    std::mutex batch_mu_;
    std::vector<std::shared_ptr<batched>> batch_;  // placements, placed by the next turn
};

}  // namespace wuhu::ownership
