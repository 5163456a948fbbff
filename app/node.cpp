#include "app/node.hpp"

#include "console/console.hpp"

#include "protocol/subjects.hpp"
#include "providers/replay_provider.hpp"
#include "runtime/offload.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <malloc.h>

#include <algorithm>

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
    tools_.set_default_tenant(options_.server.tenancy.default_tenant);
    for (const auto& [name, terms] : options_.tool_approvals) {
        tools_.set_approval(name, terms);
    }
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
                   protocol::verb::pause, protocol::verb::resume, protocol::verb::remove,
                   protocol::verb::approve, protocol::verb::reject, protocol::verb::respond}) {
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
            return std::make_unique<providers::routing_provider>(providers(clock_), endpoints_,
                                                                 &options_.prices);
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
                if (!passivation_ || !passivation_->releasing()) {
                    log_->info("lease of session {} released (epoch {})", l.id.str(),
                               l.epoch.value);
                }
                break;
        }
    });
    // Before the server starts: an address that cannot be had stops the worker before it
    // takes any request.
    if (!options_.metrics_addr.empty()) {
        metrics::endpoint_handlers handlers{
            [this] { return scrape(); },
            [this](std::chrono::milliseconds within) { return turning(within); },
            [this] { return unready(); }};
        if (options_.console) {
            handlers.files = [](std::string_view path) -> std::optional<metrics::static_file> {
                const auto f = console::find(path);
                if (!f) {
                    return std::nullopt;
                }
                return metrics::static_file{f->content_type, f->body,
                                            console::content_security_policy};
            };
        }
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
    // Each job holds its gate's pass until it returns (the stop awaits them).
    renewal_.emplace(io_.get_executor(), keeper_, leases_, log_,
                     [this](std::size_t held) { metrics_.lease_event("renewed", held); });
    asio::co_spawn(io_, renewal_->run(renewing_.enter()),
                   asio::bind_cancellation_slot(stop_renewal_.slot(), ended("lease renewal")));
    sweep_.emplace(recovery_sweep::settings{options_.sweep_interval, options_.sweep_batch},
                   *registry_, keeper_, leases_, metrics_, clock_, log_, stopping_);
    asio::co_spawn(io_, sweep_->run(busy_.enter()),
                   asio::bind_cancellation_slot(stop_sweep_.slot(), ended("the sweep")));
    const passivation::settings passivating{options_.passivate_after,
                                            options_.max_loaded_sessions,
                                            options_.passivate_batch, options_.sweep_interval};
    if (passivation::wanted(passivating)) {
        passivation_.emplace(passivating, *registry_, leases_, clock_, log_, stopping_);
        asio::co_spawn(io_, passivation_->run(busy_.enter()),
                       asio::bind_cancellation_slot(stop_passivation_.slot(),
                                                    ended("passivation")));
    }
    watchdog_.emplace(*registry_, options_.loop, log_, stopping_);
    asio::co_spawn(io_, watchdog_->run(busy_.enter()),
                   asio::bind_cancellation_slot(stop_watch_.slot(), ended("the watchdog")));
    if (options_.close_files_after.count() > 0) {
        asio::co_spawn(io_, close_idle_files(busy_.enter()),
                       asio::bind_cancellation_slot(stop_files_.slot(), ended("closing files")));
    }
    for (const auto& server : options_.mcp_servers) {
        auto c = std::make_shared<mcp::client>(io_.get_executor(), server.where);
        tools_.expect_offer();
        mcp::call_observer observe;
        if (measuring()) {
            metrics_.declare_mcp_server(server.where.name);
            observe = [this](const std::string& name, std::string_view result, double seconds) {
                metrics_.mcp_call(name, result, seconds);
            };
        }
        stop_mcp_.push_back(std::make_unique<asio::cancellation_signal>());
        asio::co_spawn(
            io_,
            mcp::serve(
                std::move(c), server, tools_, clock_,
                [log = log_](std::string line) { log->info("{}", line); }, std::move(observe)),
            asio::bind_cancellation_slot(stop_mcp_.back()->slot(), ended("an MCP server's tools")));
    }
}

asio::awaitable<void> node::close_idle_files([[maybe_unused]] runtime::work_gate::pass pass) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
        timer.expires_after(std::chrono::seconds(1));
        co_await timer.async_wait(asio::use_awaitable);
        if (stopping_) {
            co_return;
        }
        auto close = [&store = store_, after = options_.close_files_after]() -> std::size_t {
            const auto closed = store.close_idle(std::chrono::steady_clock::now() - after);
            if (closed > 0) {
                malloc_trim(0);  // what they held goes back to the system, not to the heap
            }
            return closed;
        };
        auto closing = runtime::run_on<std::size_t>(options_.loop.store_executor, std::move(close));
        co_await std::move(closing);
    }
}

// The completion of a job the node started: its pass went with its frame; an exception other
// than the stop's cancellation is logged (that job is over; the worker goes on).
std::function<void(std::exception_ptr)> node::ended(const char* job) {
    return [log = log_, job](const std::exception_ptr& e) {
        if (!e) {
            return;
        }
        try {
            std::rethrow_exception(e);
        } catch (const boost::system::system_error& x) {
            if (x.code() != asio::error::operation_aborted) {
                log->error("{} ended: {}", job, x.what());
            }
        } catch (const std::exception& x) {
            log->error("{} ended: {}", job, x.what());
        } catch (...) {
            log->error("{} ended: an exception of an unknown type", job);
        }
    };
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
        nats_.batch_sends_here(
            [this](std::function<void()> send) { asio::post(io_, std::move(send)); });
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
        stop_files_.emit(asio::cancellation_type::terminal);
        for (auto& s : stop_mcp_) {
            s->emit(asio::cancellation_type::terminal);
        }
        registry_->stop();  // every session loop is cancelled
        asio::co_spawn(io_, drain(), ended("the drain"));
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
                    renewal_->hasten();  // the lease keeper's turn now
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

// Waits until the session loops have returned and every request taken has been answered,
// then releases the leases and lets run() return. Lease renewal goes on while it waits. After
// drain_timeout the leases are released anyway, so other workers take the sessions over (the
// new epochs fence out whatever still runs here), and the wait goes on: the executor never
// stops with a coroutine still suspended on it, whose frame would outlive what it refers to.
asio::awaitable<void> node::drain() {
    using clock = std::chrono::steady_clock;
    auto settling = busy_.emptied(clock::now() + options_.drain_timeout);
    const bool late = !co_await std::move(settling);
    if (late) {
        log_->warn(
            "{} loops and {} requests still running after {} ms: releasing the "
            "leases now, and waiting for them",
            registry_->running(), server_->in_flight(), options_.drain_timeout.count());
    }
    stop_renewal_.emit(asio::cancellation_type::terminal);
    auto renewal_ended = renewing_.emptied(clock::time_point::max());
    co_await std::move(renewal_ended);
    auto releasing = leases_.release_all();
    const auto released = co_await std::move(releasing);
    log_->info("released {} leases; {} requests were forwarded to other owners", released,
               server_->forwarded());
    // Another worker may have read a lease just before its release and forwarded a request
    // here: keep answering (worker_stopping, which clients retry) for a little while.
    asio::steady_timer timer(co_await asio::this_coro::executor);
    timer.expires_after(options_.forward_grace);
    co_await timer.async_wait(asio::use_awaitable);
    server_->finish();
    auto finished = busy_.emptied(clock::time_point::max());
    co_await std::move(finished);
    if (late) {
        log_->info("the last loops and requests have returned");
    }
    work_.reset();
    server_->flush_patches();  // the last loops' patches, before the executor stops
    io_.stop();
}

}  // namespace wuhu::app
