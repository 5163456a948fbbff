#include "app/node.hpp"

#include "protocol/subjects.hpp"
#include "providers/replay_provider.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <malloc.h>

#include <algorithm>
#include <map>
#include <random>

namespace wuhu::app {

node::node(storage::session_store& store, ownership::lease_store& leases, nats::connection& nats,
           provider_factory providers, node_options options, std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)),
      nats_(nats),
      log_(std::move(log)),
      metrics_(store.backend()),
      work_(io_.get_executor()),
      store_pool_(options_.store_threads),
      store_(store,
             [log = log_](bool available, const boost::system::error_code& why) {
                 if (available) {
                     log->info("the session store is back");
                 } else {
                     log->error(
                         "the session store is unavailable ({}): requests get "
                         "'unavailable' until it is back",
                         why.message());
                 }
             },
             options_.metrics_addr.empty()
                 ? storage::watched_store::commit_observer()
                 : [this](std::chrono::steady_clock::duration took) {
                       metrics_.commit(std::chrono::duration<double>(took).count());
                   }),
      keeper_(leases, options_.worker_id, options_.lease),
      leases_(keeper_, asio::make_strand(store_pool_.get_executor())) {
    tools::add_builtin_tools(tools_);
    tools::add_tool_services(tools_, nats, options_.tool_services,
                              protocol::subject_layout(options_.server.prefix,
                                                       options_.server.tenancy));
    auto loop = options_.loop;
    // Commits that block (a file, a database) run on the pool; the memory store's do not
    // block, and a hop to the pool and back would cost more than the commit.
    if (store.backend() != "memory") {
        loop.store_executor = store_pool_.get_executor();
    }
    if (options_.inferences.total > 0 || options_.inferences.per_tenant > 0) {
        loop.inferences = &inferences_;
    }
    for (const auto& e : options_.endpoints) {
        options_.server.model_endpoints[e.name] = !e.default_model.empty();
    }
    if (measuring()) {
        options_.server.on_answered = [this](std::string_view verb, std::string_view result,
                                             std::chrono::steady_clock::duration took) {
            metrics_.command(verb, result, std::chrono::duration<double>(took).count());
        };
        options_.server.on_fenced = [this] { metrics_.lease_event("fenced"); };
        options_.server.on_refused = [this](std::string_view reason) { metrics_.refused(reason); };
    }
    for (auto v : {protocol::verb::enqueue, protocol::verb::cancel, protocol::verb::system,
                   protocol::verb::subscribe, protocol::verb::configure, protocol::verb::abort,
                   protocol::verb::pause, protocol::verb::resume, protocol::verb::remove}) {
        metrics_.declare_verb(protocol::verb_name(v));
    }
    for (const auto& t : tools_.specs({})) {
        metrics_.declare_tool(t.name);
    }
    server_ = std::make_unique<broker::server>(io_.get_executor(), nats, leases_, tools_,
                                               options_.server, log_);
    for (const auto& e : options_.endpoints) {
        std::unique_ptr<providers::provider> p;
        if (e.api == providers::api_kind::replay) {
            p = providers::replay_provider::playing(e.replay_file, clock_);
        } else {
            p = std::make_unique<providers::http_provider>(io_.get_executor(), e, clock_);
        }
        if (!e.record_to.empty()) {
            p = providers::replay_provider::recording(std::move(p), e.record_to, clock_);
        }
        endpoints_[e.name] = p.get();
        endpoint_owners_[e.name] = std::move(p);
    }
    registry_ = std::make_unique<worker::session_registry>(
        io_.get_executor(), store_,
        [this, providers = std::move(providers)]() -> std::unique_ptr<providers::provider> {
            return std::make_unique<providers::routing_provider>(providers(clock_), endpoints_);
        },
        tools_, clock_, loop,
        measuring() ? measured(served_only(server_->publisher()))
                  : served_only(server_->publisher()),
        &busy_);
    // Loads leave half the store threads to the commits of loaded sessions.
    registry_->limit_loads(std::max<std::size_t>(1, options_.store_threads / 2));
    // Lease events come from the thread that caused them (the lease strand, or this
    // executor); the registry is this executor's.
    keeper_.on_event([this](ownership::lease_event e, const ownership::lease& l) {
        switch (e) {
            case ownership::lease_event::acquired:
                metrics_.lease_event("acquired");
                log_->info("lease of session {} acquired (epoch {})", l.id.str(), l.epoch.value);
                break;
            case ownership::lease_event::taken_over:
                metrics_.lease_event("acquired");
                log_->warn("lease of session {} taken over from {}, whose lease expired (epoch {})",
                           l.id.str(), l.taken_from, l.epoch.value);
                break;
            case ownership::lease_event::lost:
                metrics_.lease_event("lost");
                log_->warn("lease of session {} lost (epoch {}): unloading it", l.id.str(),
                           l.epoch.value);
                asio::post(io_, [this, id = l.id, epoch = l.epoch] {
                    registry_->unload(id, epoch);
                });
                break;
            case ownership::lease_event::released:
                metrics_.lease_event("released");
                if (!passivating_) {
                    log_->info("lease of session {} released (epoch {})", l.id.str(),
                               l.epoch.value);
                }
                break;
        }
    });
    // Before the server starts: an address that cannot be had stops the worker before it
    // takes any request.
    if (!options_.metrics_addr.empty()) {
        const metrics::endpoint_handlers handlers{
            [this] { return scrape(); },
            [this](std::chrono::milliseconds within) { return turning(within); },
            [this] { return unready(); }};
        try {
            http_ = std::make_unique<metrics::http_endpoint>(options_.metrics_addr, handlers,
                                                            options_.metrics_max_connections);
        } catch (const std::runtime_error& e) {
            if (!options_.metrics_addr_is_default) {
                throw;
            }
            // Several workers on one host: the first has the default port, the others a free
            // one each (in a container each has the default).
            const auto host = options_.metrics_addr.substr(0, options_.metrics_addr.rfind(':'));
            http_ = std::make_unique<metrics::http_endpoint>(host + ":0", handlers,
                                                            options_.metrics_max_connections);
            log_->warn("{}; metrics on {} instead", e.what(), http_->address());
        }
    }
    server_->start(*registry_, busy_);
    if (options_.sweep_interval.count() == 0) {
        options_.sweep_interval = options_.lease.ttl / 2;
    }
    // Each background coroutine holds its gate's pass until it returns (the stop awaits them).
    auto owned = [](runtime::work_gate& g) {
        return [pass = std::make_shared<runtime::work_gate::pass>(g.enter())](
                   const std::exception_ptr&) { auto left = std::move(*pass); };
    };
    asio::co_spawn(io_, keep_leases(this),
                   asio::bind_cancellation_slot(stop_renewal_.slot(), owned(renewing_)));
    asio::co_spawn(io_, sweep(this),
                   asio::bind_cancellation_slot(stop_sweep_.slot(), owned(busy_)));
    if (options_.passivate_after.count() > 0 || options_.max_loaded_sessions > 0) {
        asio::co_spawn(io_, passivate(this),
                       asio::bind_cancellation_slot(stop_passivation_.slot(), owned(busy_)));
    }
    asio::co_spawn(io_, watch(this),
                   asio::bind_cancellation_slot(stop_watch_.slot(), owned(busy_)));
}

node::~node() {
    // run() has returned, or never ran: nothing runs on the executor any more.
    if (!stopping_) {
        server_->cancel();  // no libnats callback may reach the server once it is gone
    }
    store_.stopping();  // the sessions are unloaded with the registry
    store_pool_.join();
}

void node::run() {
    // What the executor publishes is sent once it has run what is ready, in one send().
    asio::post(io_, [this] {
        nats_.batch_sends_here([this](std::function<void()> send) { asio::post(io_, std::move(send)); });
    });
    struct unbatch {
        nats::connection& nats;
        ~unbatch() { nats.batch_sends_here(nullptr); }  // and what it queued last is sent now
    } unbatched{nats_};  // also when run() throws: the poster refers to io_
    io_.run();
    store_pool_.join();  // no store operation outlives the sessions
}

void node::stop() {
    stop_asked_ = true;
    asio::post(io_, [this] {
        if (stopping_) {
            return;
        }
        stopping_ = true;
        store_.stopping();
        log_->info("stopping: {} sessions loaded, {} requests in flight", registry_->size(),
                   server_->in_flight());
        server_->stop_taking();  // new requests go to the other workers
        stop_sweep_.emit(asio::cancellation_type::terminal);
        stop_passivation_.emit(asio::cancellation_type::terminal);
        stop_watch_.emit(asio::cancellation_type::terminal);
        registry_->stop();  // every session loop is cancelled
        asio::co_spawn(io_, drain(this), asio::detached);
    });
}

// Commits are published as they are (the store took them under a live lease). The rest (stream
// deltas, status) only while the session's lease is within its deadline: a worker that was
// frozen, or could not renew, stops streaming at once, before its sessions are unloaded (the
// lease keeper does that on its next turn, which this one hastens).
worker::session_registry::event_forwarder node::served_only(
    worker::session_registry::event_forwarder publish) {
    return [this, publish = std::move(publish)](const session::session_id& sid,
                                                const worker::loop_event& e) {
        if (!std::holds_alternative<worker::committed_event>(e) && !keeper_.serving(sid)) {
            if (!overdue_) {
                overdue_ = true;
                asio::post(io_, [this] {
                    overdue_ = false;
                    lease_timer_.cancel();  // the lease keeper's turn now
                });
            }
            return;
        }
        if (measuring()) {
            metrics_.published(std::holds_alternative<worker::committed_event>(e) ? "patch"
                               : std::holds_alternative<worker::state_event>(e) ? "status"
                                                                                 : "delta");
        }
        publish(sid, e);
    };
}

// Renews this worker's leases every renew interval, and gives up those past their deadline
// (when a renewal failed, or the worker was frozen) at that deadline, not at the next renewal:
// the keeper's listener unloads each lost session at once.
asio::awaitable<void> node::keep_leases(node* self) {
    auto& timer = self->lease_timer_;
    bool failing = false;
    auto next_renewal = std::chrono::steady_clock::now() + self->keeper_.settings().renew_interval;
    for (;;) {
        auto wake = next_renewal;
        if (auto deadline = self->keeper_.next_deadline(); deadline && *deadline < wake) {
            wake = *deadline;
        }
        timer.expires_at(wake);
        boost::system::error_code ec;
        co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if ((co_await asio::this_coro::cancellation_state).cancelled() !=
            asio::cancellation_type::none) {
            co_return;
        }
        if (std::chrono::steady_clock::now() < next_renewal) {
            self->keeper_.expire_overdue();
            continue;
        }
        next_renewal = std::chrono::steady_clock::now() + self->keeper_.settings().renew_interval;
        auto renewing = self->leases_.renew();
        auto renewed = co_await std::move(renewing);
        if (!renewed && !failing) {
            self->log_->error(
                "lease renewal failed: {}; sessions are unloaded as their leases "
                "run out",
                renewed.error().message());
        } else if (renewed && failing) {
            self->log_->info("lease renewal works again");
        }
        if (renewed) {
            self->metrics_.lease_event("renewed", self->keeper_.held());
        }
        failing = !renewed;
    }
}

// One round at a time; the stop cancels it and waits for it (it may be loading a session).
// Each round claims at most sweep_batch sessions in one lease-store transaction, from the
// candidates in an order of this worker's own: workers sweeping at once share the orphans out
// (on PostgreSQL, rows another worker is claiming are skipped), and 10,000 orphans after a
// crash are taken up at a bounded rate, not all at once.
asio::awaitable<void> node::sweep(node* self) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    std::mt19937_64 rng{std::random_device{}()};
    for (;;) {
        timer.expires_after(self->options_.sweep_interval);
        co_await timer.async_wait(asio::use_awaitable);
        if (self->stopping_) {
            co_return;
        }
        // A timer due within two rounds is loaded now (rounds are a little more than an
        // interval apart), so that it fires on time; passivation keeps the same horizon.
        storage::catalog_query due;
        due.needing_owner_by = session::unix_ms{self->clock_.now().value +
                                                2 * self->options_.sweep_interval.count()};
        auto listing = self->registry_->catalog(std::move(due));
        auto candidates = co_await std::move(listing);
        if (!candidates) {
            continue;  // the store is away (its watcher logs it)
        }
        // This worker's but not loaded (its loop failed, or a request that took the lease
        // could not load it): this sweep's to load. The others: claimed if no live lease
        // holds them (the claim skips those another worker owns).
        std::vector<std::pair<storage::catalog_entry, session::lease_epoch>> recovering;
        std::vector<session::session_id> orphans;
        std::map<std::string, storage::catalog_entry> why;
        std::size_t needing = 0;  // not loaded here
        for (const auto& c : *candidates) {
            if (self->registry_->contains(c.id)) {
                continue;
            }
            ++needing;
            if (auto held = self->keeper_.epoch_of(c.id)) {
                if (recovering.size() < self->options_.sweep_batch) {
                    recovering.emplace_back(c, *held);
                }
            } else {
                orphans.push_back(c.id);
                why.emplace(c.id.str(), c);
            }
        }
        std::shuffle(orphans.begin(), orphans.end(), rng);
        // Timers first: they have a time to keep, work can wait a round.
        std::stable_partition(orphans.begin(), orphans.end(), [&](const session::session_id& id) {
            return !why.at(id.str()).summary.has_work;
        });
        if (recovering.size() < self->options_.sweep_batch && !orphans.empty()) {
            const std::size_t room = self->options_.sweep_batch - recovering.size();
            auto claiming = self->leases_.claim(std::move(orphans), room);
            auto claimed = co_await std::move(claiming);
            if (claimed) {
                for (const auto& l : *claimed) {
                    recovering.emplace_back(why.at(l.id.str()), l.epoch);
                }
                self->metrics_.without_owner(claimed->size());
            }  // else the lease store is away: the leases' own callers log it
        } else if (orphans.empty()) {
            self->metrics_.without_owner(0);
        }
        if (!recovering.empty()) {
            self->log_->info(
                "sweep: recovering {} sessions (at most {} a round) of {} that need an owner or "
                "a load",
                recovering.size(), self->options_.sweep_batch, needing);
        }
        for (const auto& [c, epoch] : recovering) {
            if (self->stopping_) {
                co_return;  // the stop releases what this round took
            }
            auto getting = self->registry_->get(c.id, epoch, storage::open_mode::existing);
            auto loop = co_await std::move(getting);
            if (!loop) {
                if (loop.error() != storage::errc::not_found) {
                    self->log_->warn("could not recover session {}: {}", c.id.str(),
                                     loop.error().message());
                }
                self->leases_.release(c.id, epoch);  // another worker may do better
                continue;
            }
            self->metrics_.recovery();
            if (c.summary.has_work) {
                self->log_->info("recovered session {} (epoch {}): it has work to do", c.id.str(),
                                 epoch.value);
            } else {
                self->log_->info("recovered session {} (epoch {}): its timer is due in {} ms",
                                 c.id.str(), epoch.value,
                                 c.summary.next_timer.value_or(session::unix_ms{0}).value -
                                     self->clock_.now().value);
            }
        }
    }
}

// Unloads idle sessions unused for passivate_after, and the least recently used idle ones past
// max_loaded_sessions, releasing their leases (the next request loads them again, here or
// elsewhere). One log line per round.
asio::awaitable<void> node::passivate(node* self) {
    using std::chrono::milliseconds;
    const auto& o = self->options_;
    const auto tick = o.passivate_after.count() > 0
                          ? std::clamp(o.passivate_after / 4, milliseconds(50), milliseconds(1000))
                          : milliseconds(1000);
    asio::steady_timer timer(co_await asio::this_coro::executor);
    std::size_t trimmed_at = 0;  // registry_->freed() at the last trim
    for (;;) {
        timer.expires_after(tick);
        co_await timer.async_wait(asio::use_awaitable);
        if (self->stopping_) {
            co_return;
        }
        const auto now = std::chrono::steady_clock::now();
        const std::size_t loaded = self->registry_->size();
        std::size_t over = o.max_loaded_sessions > 0 && loaded > o.max_loaded_sessions
                               ? loaded - o.max_loaded_sessions
                               : 0;
        // Least recently used first: those idle long enough, then more of the idle ones while
        // the worker holds too many.
        // A session whose timer is due within two sweep rounds stays; a later one is loaded
        // again by the sweep one round before it is due.
        const session::unix_ms keep_timers_until{self->clock_.now().value +
                                                 2 * o.sweep_interval.count()};
        auto idle = self->registry_->passivable(now, keep_timers_until);
        std::size_t n = 0;
        self->passivating_ = true;
        for (const auto& [id, used] : idle) {
            if (n == o.passivate_batch) {
                break;
            }
            const bool stale = o.passivate_after.count() > 0 && used <= now - o.passivate_after;
            if (!stale && over == 0) {
                break;  // the rest were used more recently still
            }
            self->registry_->unload(id);
            self->leases_.release(id);
            over -= over > 0 ? 1 : 0;
            ++n;
        }
        self->passivating_ = false;
        if (n > 0) {
            self->log_->info("passivated {} idle sessions; {} loaded", n, self->registry_->size());
        }
        // glibc keeps the memory of freed sessions for later allocations, mostly in the store
        // threads' heaps where their files were opened and closed. Once sessions have been
        // freed since the last round, the free pages go back to the system, so that resident
        // memory follows the sessions loaded rather than the most ever loaded.
        if (const auto freed = self->registry_->freed(); freed != trimmed_at) {
            malloc_trim(0);
            trimmed_at = freed;
        }
    }
}

// Waits until the session loops have returned and every request taken has been answered,
// then releases the leases and lets run() return. Lease renewal goes on while it waits. After
// drain_timeout the leases are released anyway, so other workers take the sessions over (the
// new epochs fence out whatever still runs here), and the wait goes on: the executor never
// stops with a coroutine still suspended on it, whose frame would outlive what it refers to.
asio::awaitable<void> node::drain(node* self) {
    using clock = std::chrono::steady_clock;
    auto settling = self->busy_.emptied(clock::now() + self->options_.drain_timeout);
    const bool late = !co_await std::move(settling);
    if (late) {
        self->log_->warn(
            "{} loops and {} requests still running after {} ms: releasing the "
            "leases now, and waiting for them",
            self->registry_->running(), self->server_->in_flight(),
            self->options_.drain_timeout.count());
    }
    self->stop_renewal_.emit(asio::cancellation_type::terminal);
    auto renewal_ended = self->renewing_.emptied(clock::time_point::max());
    co_await std::move(renewal_ended);
    auto releasing = self->leases_.release_all();
    const auto released = co_await std::move(releasing);
    self->log_->info("released {} leases; {} requests were forwarded to other owners", released,
                     self->server_->forwarded());
    // Another worker may have read a lease just before its release and forwarded a request
    // here: keep answering (worker_stopping, which clients retry) for a little while.
    asio::steady_timer timer(co_await asio::this_coro::executor);
    timer.expires_after(self->options_.forward_grace);
    co_await timer.async_wait(asio::use_awaitable);
    self->server_->finish();
    auto finished = self->busy_.emptied(clock::time_point::max());
    co_await std::move(finished);
    if (late) {
        self->log_->info("the last loops and requests have returned");
    }
    self->work_.reset();
    self->server_->flush_patches();  // the last loops' patches, before the executor stops
    self->io_.stop();
}

}  // namespace wuhu::app
