#include "worker/registry.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>

namespace wuhu::worker {

session_registry::session_registry(asio::any_io_executor ex, storage::session_store& store,
                                   provider_factory providers, const tool_registry& tools,
                                   clock& clk, loop_options opts, epoch_source epochs,
                                   event_forwarder events)
    : ex_(std::move(ex)),
      store_(store),
      providers_(std::move(providers)),
      tools_(tools),
      clock_(clk),
      opts_(opts),
      epochs_(std::move(epochs)),
      events_(std::move(events)) {}

session_registry::~session_registry() {
    stop();
}

void session_registry::drop_failed() {
    std::erase_if(sessions_, [](const auto& kv) { return !kv.second->running; });
    std::erase_if(retired_, [](const auto& e) { return !e->running; });
}

void session_registry::retire(const session::session_id& id) {
    if (auto it = sessions_.find(id.str()); it != sessions_.end()) {
        if (it->second->running) {
            it->second->stop.emit(asio::cancellation_type::terminal);
            // Kept until its loop has returned (it holds the loop the coroutine uses), but no
            // longer handed out: the next get() loads the session afresh.
            retired_.push_back(std::move(it->second));
        }
        sessions_.erase(it);
    }
}

boost::system::result<agent_loop*> session_registry::get(const session::session_id& id) {
    if (stopped_) {
        // Draining: a loaded session still takes commands (persisted, then answered; the next
        // owner runs them), but no loop is loaded or restarted.
        if (auto it = sessions_.find(id.str()); it != sessions_.end()) {
            return it->second->loop.get();
        }
        return storage::errc::unavailable;
    }
    drop_failed();  // a failed session is reloaded from the store on its next use
    if (auto it = sessions_.find(id.str()); it != sessions_.end()) {
        return it->second->loop.get();
    }
    auto epoch = epochs_(id);
    if (!epoch) {
        return epoch.error();
    }
    auto log = store_.open(id, *epoch);
    if (!log) {
        return log.error();
    }
    auto e = std::make_unique<entry>();
    e->prov = providers_();
    e->loop = std::make_unique<agent_loop>(ex_, std::move(*log), *e->prov, tools_, clock_, opts_);
    // Loaded before anyone reads it (a subscribe right after the load sees the stored state).
    if (auto ec = e->loop->load()) {
        return ec;
    }
    e->sub = e->loop->observe([this, id](const loop_event& ev) { events_(id, ev); }).sub;
    e->running = true;
    entry* raw = e.get();
    // The loop is a tracked child: stop() cancels it through its slot, and its completion
    // marks the entry so the next get() reloads the session.
    asio::co_spawn(ex_, raw->loop->start(),
                   asio::bind_cancellation_slot(
                       raw->stop.slot(), [raw](std::exception_ptr) { raw->running = false; }));
    sessions_.emplace(id.str(), std::move(e));
    return raw->loop.get();
}

boost::system::result<void> session_registry::remove(const session::session_id& id) {
    retire(id);
    return store_.remove(id);
}

void session_registry::unload(const session::session_id& id) {
    retire(id);
}

std::size_t session_registry::running() const {
    std::size_t n = 0;
    for (const auto& [id, e] : sessions_) {
        n += e->running ? 1 : 0;
    }
    for (const auto& e : retired_) {
        n += e->running ? 1 : 0;
    }
    return n;
}

void session_registry::each(const std::function<void(const agent_loop&)>& f) const {
    for (const auto& [id, e] : sessions_) {
        if (e->running) {
            f(*e->loop);
        }
    }
}

void session_registry::stop() {
    stopped_ = true;
    for (auto& [id, e] : sessions_) {
        if (e->running) {
            e->stop.emit(asio::cancellation_type::terminal);
        }
    }
}

}  // namespace wuhu::worker
