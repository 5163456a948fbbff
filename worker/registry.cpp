#include "worker/registry.hpp"

#include "session/approval.hpp"

#include "runtime/offload.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>

namespace wuhu::worker {

struct session_registry::entry {
    std::unique_ptr<providers::provider> prov;
    std::unique_ptr<agent_loop> loop;
    asio::cancellation_signal stop;
    subscription sub;
    bool running = false;
    // When a request last reached it or its loop last did something (passivation picks the
    // least recently used first).
    std::chrono::steady_clock::time_point used = std::chrono::steady_clock::now();
    std::size_t users = 0;  // handles out (requests using it)
    runtime::work_gate::pass pass;  // while its loop runs (the node's busy gate)
    bool listed = false;    // in sessions_ and by_use_, at by_use
    std::list<entry*>::iterator by_use;
};

struct session_registry::gate {
    runtime::async_mutex mu;
};

session_registry::session_registry(asio::any_io_executor ex, storage::session_store& store,
                                   provider_factory providers, const tools::tool_registry& tools,
                                   runtime::clock& clk, loop_options opts, event_forwarder events,
                                   runtime::work_gate* work)
    : ex_(std::move(ex)),
      store_(store),
      providers_(std::move(providers)),
      tools_(tools),
      clock_(clk),
      opts_(std::make_shared<const loop_options>(std::move(opts))),
      events_(std::move(events)),
      work_(work) {}

session_registry::~session_registry() {
    stop();
}

// A handle on the entry's loop: keeps the whole entry alive, and counts as a request using it
// (passivation leaves such a session alone).
session_registry::handle session_registry::share(const std::shared_ptr<entry>& e) {
    ++e->users;
    return handle(e->loop.get(), [keep = e](agent_loop*) { --keep->users; });
}

std::shared_ptr<session_registry::gate> session_registry::gate_of(const session::session_id& id) {
    auto& g = gates_[id.str()];
    if (!g) {
        g = std::make_shared<gate>();
    }
    return g;
}

void session_registry::release_gate(const session::session_id& id, std::shared_ptr<gate>& g) {
    g.reset();
    if (auto it = gates_.find(id.str()); it != gates_.end() && it->second.use_count() == 1) {
        gates_.erase(it);  // nobody holds it or waits for it
    }
}

void session_registry::touch(entry& e) {
    e.used = std::chrono::steady_clock::now();
    if (e.listed) {
        by_use_.splice(by_use_.end(), by_use_, e.by_use);
    }
}

void session_registry::forget(std::map<std::string, std::shared_ptr<entry>>::iterator it) {
    auto& e = *it->second;
    if (e.listed) {
        by_use_.erase(e.by_use);
        e.listed = false;
    }
    sessions_.erase(it);
}

void session_registry::retire(const session::session_id& id, const boost::system::error_code& why) {
    auto it = sessions_.find(id.str());
    if (it == sessions_.end()) {
        return;
    }
    auto e = it->second;
    forget(it);
    // Requests still waiting on it get `why`; it publishes nothing more. It stays alive until
    // they are answered and its loop has returned (they and the loop's completion share it).
    e->loop->close(why);
    e->sub.reset();
    if (e->running) {
        e->stop.emit(asio::cancellation_type::terminal);
    }
}

asio::awaitable<boost::system::result<session_registry::handle>> session_registry::get(
    session::session_id id, session::lease_epoch epoch, storage::open_mode mode) {
    // The loaded loop, if the caller may use it; lease_lost if the caller's lease is older
    // than the loop's (a newer owner, this worker included, loaded it since).
    auto usable = [&]() -> boost::system::result<handle> {
        auto it = sessions_.find(id.str());
        if (it == sessions_.end() || it->second->loop->failed()) {
            return handle{};
        }
        if (stopped_) {
            // Draining: a loaded session still takes commands (persisted, then answered; the
            // next owner runs them), but no loop is loaded or restarted.
            return share(it->second);
        }
        if (it->second->loop->epoch() > epoch) {
            return storage::errc::lease_lost;
        }
        if (!it->second->running || it->second->loop->epoch() != epoch) {
            return handle{};
        }
        touch(*it->second);
        return share(it->second);
    };
    if (!gates_.contains(id.str())) {  // nobody loads or deletes it now
        auto fast = usable();
        if (!fast || *fast) {
            co_return fast;
        }
    }
    auto g = gate_of(id);
    boost::system::result<handle> out = storage::errc::unavailable;
    {
        auto guard = co_await g->mu.lock();
        out = usable();
        if (out && !*out) {
            out = storage::errc::unavailable;
            if (!stopped_) {
                // A failed loop, one of an older epoch (this worker lost the lease and took
                // it again), or one that returned: the store has the truth.
                retire(id, storage::errc::closed);
                auto loaded = load(id, epoch, mode);
                out = co_await std::move(loaded);
            }
        }
    }
    release_gate(id, g);
    co_return out;
}

void session_registry::limit_loads(std::size_t n) {
    loads_ = n > 0 ? std::make_unique<runtime::async_semaphore>(n) : nullptr;
}

asio::awaitable<boost::system::result<session_registry::handle>> session_registry::load(
    session::session_id id, session::lease_epoch epoch, storage::open_mode mode) {
    struct opened {
        boost::system::error_code ec;
        std::unique_ptr<storage::session_log> log;
        session::session_state state;
    };
    auto open = [&store = store_, id, epoch, mode]() -> opened {
        opened out;
        auto log = store.open(id, epoch, mode);
        if (!log) {
            out.ec = log.error();
            return out;
        }
        auto st = (*log)->load();
        if (!st) {
            out.ec = st.error();
            return out;
        }
        out.log = std::move(*log);
        out.state = std::move(*st);
        return out;
    };
    std::optional<runtime::async_semaphore::guard> loading;
    if (loads_) {
        loading.emplace(co_await loads_->acquire());
    }
    auto task = runtime::run_on<opened>(opts_->store_executor, std::move(open));
    opened o = co_await std::move(task);
    loading.reset();
    if (o.ec) {
        co_return o.ec;
    }
    if (stopped_) {
        co_return storage::errc::unavailable;  // the worker began to stop meanwhile
    }
    auto e = std::make_shared<entry>();
    e->prov = providers_();
    e->loop = std::make_unique<agent_loop>(ex_, std::move(o.log), *e->prov, tools_, clock_, opts_);
    // Loaded before anyone reads it (a subscribe right after the load sees the stored state).
    e->loop->preload(std::move(o.state));
    e->sub = e->loop
                 ->observe([this, id, e = e.get()](const loop_event& ev) {
                     touch(*e);
                     events_(id, ev);
                 })
                 .sub;  // the subscription ends before the entry does
    e->running = true;
    ++running_;
    // The loop is a tracked child: stop() and retire() cancel it through its slot. Its
    // completion frees the registry's part of it (a failed session is reloaded from the store
    // on its next use) once the handler has returned.
    // Its handler is small (its frame holds it and a copy while it completes).
    e->pass = work_ != nullptr ? work_->enter() : runtime::work_gate::pass();
    auto done = [this, keep = e](std::exception_ptr) mutable {
        keep->running = false;
        --running_;
        auto left = std::move(keep->pass);
        asio::post(ex_, [this, keep = std::move(keep)]() mutable {
            const auto& id = keep->loop->id();
            if (auto it = sessions_.find(id.str());
                !stopped_ && it != sessions_.end() && it->second == keep) {
                forget(it);
            }
            // Unless a request still holds it, the entry goes now: its log closes its file
            // (SQLite checkpoints and syncs it), which is store IO, so not on this executor.
            if (opts_->store_executor && !stopped_) {
                auto free = [freed = freed_, keep = std::move(keep)]() mutable {
                    keep.reset();
                    freed->fetch_add(1, std::memory_order_relaxed);
                };
                asio::post(*opts_->store_executor, std::move(free));
            }
        });
    };
    asio::co_spawn(ex_, e->loop->start(),
                   asio::bind_cancellation_slot(e->stop.slot(), std::move(done)));
    if (auto it = sessions_.find(id.str()); it != sessions_.end()) {
        forget(it);
    }
    sessions_.emplace(id.str(), e);
    e->by_use = by_use_.insert(by_use_.end(), e.get());
    e->listed = true;
    co_return share(e);
}

asio::awaitable<boost::system::result<void>> session_registry::remove(session::session_id id,
                                                                      session::lease_epoch epoch) {
    auto g = gate_of(id);
    boost::system::result<void> out;
    {
        auto guard = co_await g->mu.lock();
        if (auto it = sessions_.find(id.str()); it != sessions_.end()) {
            // The commands already waiting on the loop go first (they are answered, and the
            // removal deletes what they wrote); the ones after find the loop closed and are
            // routed again, to a new session.
            auto loop = share(it->second);
            auto closing = loop->close_after_pending(storage::errc::closed);
            co_await std::move(closing);
            retire(id, storage::errc::closed);
        }
        auto rm = [&store = store_, id, epoch]() { return store.remove(id, epoch); };
        auto task =
            runtime::run_on<boost::system::result<void>>(opts_->store_executor, std::move(rm));
        out = co_await std::move(task);
    }
    release_gate(id, g);
    co_return out;
}

void session_registry::unload(const session::session_id& id,
                              std::optional<session::lease_epoch> epoch) {
    if (auto it = sessions_.find(id.str());
        it != sessions_.end() && (!epoch || it->second->loop->epoch() == *epoch)) {
        retire(id, storage::errc::closed);
    }
}

asio::awaitable<boost::system::result<std::vector<storage::catalog_entry>>>
session_registry::catalog(storage::catalog_query q) {
    using listing = boost::system::result<std::vector<storage::catalog_entry>>;
    auto list = [&store = store_, q = std::move(q)]() { return store.sessions(q); };
    auto task = runtime::run_on<listing>(opts_->store_executor, std::move(list));
    auto out = co_await std::move(task);
    co_return out;
}

asio::awaitable<boost::system::result<bool>> session_registry::exists(session::session_id id) {
    auto check = [&store = store_, id]() { return store.exists(id); };
    auto task =
        runtime::run_on<boost::system::result<bool>>(opts_->store_executor, std::move(check));
    auto out = co_await std::move(task);
    co_return out;
}

asio::awaitable<boost::system::result<std::optional<session::session_state>>>
session_registry::read(session::session_id id) {
    using out_t = boost::system::result<std::optional<session::session_state>>;
    auto reading = [&store = store_, id]() { return store.read(id); };
    auto task = runtime::run_on<out_t>(opts_->store_executor, std::move(reading));
    auto out = co_await std::move(task);
    co_return out;
}

void session_registry::each(const std::function<bool(const agent_loop&)>& f,
                            std::string_view after) const {
    auto it = after.empty() ? sessions_.begin() : sessions_.upper_bound(std::string(after));
    for (; it != sessions_.end(); ++it) {
        if (it->second->running && !it->second->loop->failed() && !f(*it->second->loop)) {
            return;
        }
    }
}

const agent_loop* session_registry::find_running(const session::session_id& id) const {
    auto it = sessions_.find(id.str());
    if (it == sessions_.end() || !it->second->running || it->second->loop->failed()) {
        return nullptr;
    }
    return it->second->loop.get();
}

std::vector<session_registry::idle_session> session_registry::passivable(
    std::chrono::steady_clock::time_point unused_since, session::unix_ms keep_timers_until,
    std::size_t limit) const {
    std::vector<idle_session> out;
    for (auto it = by_use_.begin();
         it != by_use_.end() && (*it)->used <= unused_since && out.size() < limit; ++it) {
        const auto& e = **it;
        const auto& loop = *e.loop;
        // Not one with work (even paused), or a timer due soon: the recovery sweep would load
        // it again at once.
        const auto* next = session::next_timer(loop.state());
        const auto* deadline = session::next_deadline(loop.state());
        if (e.running && e.users == 0 && !loop.failed() && loop.quiescent() &&
            !loop.state().has_work && (next == nullptr || next->due > keep_timers_until) &&
            (deadline == nullptr || deadline->deadline > keep_timers_until)) {
            out.push_back(idle_session{loop.id(), e.used});
        }
    }
    return out;
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
