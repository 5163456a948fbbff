// The sessions a worker owns: loads a session on first use (opening its log at the epoch of
// the lease the caller holds), runs its loop as a tracked child, forwards its events, and
// stops them.
//
// A loop is shared: get() hands out a `handle` that keeps the loop (and its provider) alive
// while a request uses it, so a loop that is unloaded, deleted or failed is freed only after
// the last request that reached it has been answered. Such a loop is closed: the requests
// still waiting on it get storage::errc::closed ("nothing changed; route again"), or the
// store's error if it failed.
//
// Loading and removing a session take its gate, so they never interleave; and while anyone
// holds or waits for a session's gate, get() waits for it too, so requests keep their arrival
// order around a load or a delete (one sent after a delete never overtakes it). Store IO
// (open, load, remove) runs on the store executor, never on `ex`.
//
// Executor: every member runs on `ex` (the worker's single-threaded io_context).
// Lifetime: stop() cancels every loop; the registry must outlive the io_context's run.
#pragma once

#include "runtime/work_gate.hpp"
#include "worker/agent_loop.hpp"

#include <boost/asio/cancellation_signal.hpp>

#include <atomic>
#include <functional>
#include <list>
#include <map>

namespace wuhu::worker {

namespace asio = boost::asio;

class session_registry {
  public:
    using provider_factory = std::function<std::unique_ptr<providers::provider>()>;
    using event_forwarder = std::function<void(const session::session_id&, const loop_event&)>;
    using handle = std::shared_ptr<agent_loop>;

    session_registry(asio::any_io_executor ex, storage::session_store& store,
                     provider_factory providers, const tools::tool_registry& tools, runtime::clock& clk,
                     loop_options opts, event_forwarder events, runtime::work_gate* work = nullptr);
    ~session_registry();

    // The session's loop at `epoch` (the caller holds that lease), loaded and started if it
    // was not (a loop of an older epoch, or a failed one, is replaced; a loop of a newer epoch
    // means the caller's lease is stale: lease_lost); the store's error if it cannot be opened
    // or loaded (not_found: `mode` is existing and there is no such session). After stop():
    // the loop of a session still loaded (its commands commit and are answered; its loop does
    // not run again), and storage::errc::unavailable for any other.
    asio::awaitable<boost::system::result<handle>> get(
        session::session_id id, session::lease_epoch epoch,
        storage::open_mode mode = storage::open_mode::create);
    // Removes the session's data, fenced at `epoch`: after the commands already waiting on
    // its loop have been answered, the loop is closed and the store removes the session. The
    // store's error (lease_lost: a newer owner has it) if it refuses.
    asio::awaitable<boost::system::result<void>> remove(session::session_id id,
                                                        session::lease_epoch epoch);
    // Closes the session's loop at once and forgets it (only if it runs at `epoch`, when
    // given); its data stays (the lease was lost, or the session is handed over).
    void unload(const session::session_id& id,
                std::optional<session::lease_epoch> epoch = std::nullopt);
    // Whether the store has the session (store IO on the store executor).
    asio::awaitable<boost::system::result<bool>> exists(session::session_id id);
    // The stored state of a session nobody owns, read without a lease (nullopt: none), on the
    // store executor.
    asio::awaitable<boost::system::result<std::optional<session::session_state>>> read(
        session::session_id id);
    // The store's index (store IO on the store executor).
    asio::awaitable<boost::system::result<std::vector<storage::catalog_entry>>> catalog(
        storage::catalog_query q);
    bool contains(const session::session_id& id) const { return sessions_.contains(id.str()); }
    // The loaded sessions that may be passivated (unloaded, their data staying in the store):
    // no request holds them, their loop is idle with no work (even paused) and no timer due
    // by `keep_timers_until`, and neither a request nor their loop has used them since
    // `unused_since`; least recently used first, at most `limit`. Walks the sessions in order of
    // use, from the least recently used to the first one used since `unused_since`: not every
    // loaded session.
    struct idle_session {
        session::session_id id;
        std::chrono::steady_clock::time_point used;  // last used
    };
    std::vector<idle_session> passivable(std::chrono::steady_clock::time_point unused_since,
                                         session::unix_ms keep_timers_until,
                                         std::size_t limit) const;
    // Cancels every loop; nothing is loaded or started afterwards.
    void stop();
    std::size_t size() const { return sessions_.size(); }
    // Visits the loaded sessions whose loops run, in id order, from the first id after
    // `after` (all when empty), until `f` returns false.
    void each(const std::function<bool(const agent_loop&)>& f, std::string_view after = {}) const;
    // The session's loop if it is loaded and runs, else nullptr.
    const agent_loop* find_running(const session::session_id& id) const;
    storage::session_store& store() { return store_; }
    // At most `n` sessions are loaded (opened and read from the store) at once, the others
    // wait their turn (FIFO): a burst of new or cold sessions leaves the store threads to the
    // commits of the sessions already loaded. 0: no limit. Before the first get().
    void limit_loads(std::size_t n);
    // Loops that have not returned yet.
    std::size_t running() const { return running_; }
    // How many loops that returned have been freed with their logs (their files closed, on
    // the store executor) since the start: what they held is back with the allocator.
    std::size_t freed() const { return freed_->load(std::memory_order_relaxed); }

  private:
    struct entry;
    struct gate;
    // The session's gate (made on first use, dropped when nobody holds or waits for it).
    std::shared_ptr<gate> gate_of(const session::session_id& id);
    static handle share(const std::shared_ptr<entry>& e);
    void release_gate(const session::session_id& id, std::shared_ptr<gate>& g);
    void retire(const session::session_id& id, const boost::system::error_code& why);
    // The entry was used now: last in by_use_ (if it is still in sessions_).
    void touch(entry& e);
    // Out of sessions_ (and so of by_use_).
    void forget(std::map<std::string, std::shared_ptr<entry>>::iterator it);
    asio::awaitable<boost::system::result<handle>> load(session::session_id id,
                                                        session::lease_epoch epoch,
                                                        storage::open_mode mode);

    asio::any_io_executor ex_;
    storage::session_store& store_;
    provider_factory providers_;
    const tools::tool_registry& tools_;
    runtime::clock& clock_;
    std::shared_ptr<const loop_options> opts_;  // shared by the loops
    event_forwarder events_;
    runtime::work_gate* work_;  // each running loop holds a pass
    std::map<std::string, std::shared_ptr<entry>> sessions_;
    std::list<entry*> by_use_;  // sessions_'s entries, the least recently used first
    std::map<std::string, std::shared_ptr<gate>> gates_;
    std::size_t running_ = 0;
    // Counted on the store executor, which may run after the registry is gone.
    std::shared_ptr<std::atomic<std::size_t>> freed_ =
        std::make_shared<std::atomic<std::size_t>>(0);
    bool stopped_ = false;
    std::unique_ptr<runtime::async_semaphore> loads_;  // none: no limit
};

}  // namespace wuhu::worker
