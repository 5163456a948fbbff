// The sessions a worker owns: loads a session on first use (opening its log at the epoch the
// lease gives), runs its loop as a tracked child, forwards its events, and stops them.
//
// Executor: every member runs on `ex` (the worker's single-threaded io_context for now).
// Lifetime: stop() cancels every loop; the registry must outlive the io_context's run.
#pragma once

#include "worker/agent_loop.hpp"

#include <boost/asio/cancellation_signal.hpp>

#include <functional>
#include <map>

namespace wuhu::worker {

class session_registry {
  public:
    using provider_factory = std::function<std::unique_ptr<provider>()>;
    // The fencing epoch to open a session at (the lease this worker holds), or why it has none.
    using epoch_source =
        std::function<boost::system::result<session::lease_epoch>(const session::session_id&)>;
    using event_forwarder = std::function<void(const session::session_id&, const loop_event&)>;

    session_registry(asio::any_io_executor ex, storage::session_store& store,
                     provider_factory providers, const tool_registry& tools, clock& clk,
                     loop_options opts, epoch_source epochs, event_forwarder events);
    ~session_registry();

    // The session's loop, loaded and started if it was not; an error if the store refuses.
    // After stop(): the loop of a session still loaded (its commands commit and are answered;
    // its loop does not run again), and storage::errc::unavailable for any other.
    boost::system::result<agent_loop*> get(const session::session_id& id);
    // Stops the session's loop and removes its data (idempotent).
    boost::system::result<void> remove(const session::session_id& id);
    // Stops the session's loop and forgets it; its data stays (the lease was lost, or the
    // session is handed over).
    void unload(const session::session_id& id);
    bool contains(const session::session_id& id) const { return sessions_.contains(id.str()); }
    // Cancels every loop; nothing is loaded or started afterwards.
    void stop();
    std::size_t size() const { return sessions_.size(); }
    // Visits the loaded sessions whose loops run.
    void each(const std::function<void(const agent_loop&)>& f) const;
    storage::session_store& store() { return store_; }
    // Loops that have not returned yet.
    std::size_t running() const;

  private:
    struct entry {
        std::unique_ptr<provider> prov;
        std::unique_ptr<agent_loop> loop;
        asio::cancellation_signal stop;
        subscription sub;
        bool running = false;
    };
    void drop_failed();
    void retire(const session::session_id& id);

    asio::any_io_executor ex_;
    storage::session_store& store_;
    provider_factory providers_;
    const tool_registry& tools_;
    clock& clock_;
    loop_options opts_;
    epoch_source epochs_;
    event_forwarder events_;
    std::map<std::string, std::unique_ptr<entry>> sessions_;
    std::vector<std::unique_ptr<entry>> retired_;  // stopped, their loops still returning
    bool stopped_ = false;
};

}  // namespace wuhu::worker
