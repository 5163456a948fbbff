// One Wuhu worker, assembled: the sessions it owns (the registry), its leases (the keeper, their
// renewal and their stop margin), its NATS side (the server), the pool its store IO runs on, and
// the orderly stop of all of it. wuhu-worker's main() runs one; the NATS tests and the broker
// benchmark run several in one process.
//
// Threads: run() runs the worker's io_context on the calling thread (sessions, requests, the
// timers of lease renewal, the sweep and passivation); store IO runs on `store_threads` threads
// of its own, and lease-store IO on one strand of them (ownership/lease_desk.hpp), so no store or
// lease round trip blocks the sessions being served; stop() may be called from any thread. The
// store, the lease store and the NATS connection belong to the caller and must outlive the node.
//
// Stopping: stop taking requests from the queue group (drain: the queue group sends new ones
// to the other workers, and those already received are still handled), cancel every session
// loop, answer the requests already taken (sessions not loaded get worker_stopping, and the
// client retries elsewhere), release the leases so that other workers take the sessions at
// once, keep answering requests forwarded here for `forward_grace` (worker_stopping: another
// worker may have read the lease just before it was released), and return from run(). After
// `drain_timeout` the leases are released anyway (the new owners' epochs fence out whatever
// still runs here), and run() returns once the last loop and request have. Every request,
// session loop, subscription drain, sweep and passivation holds a pass of one gate, and the
// lease keeper one of another: the stop awaits them (no polling).
//
// Background jobs, each a small class whose run() holds a pass of the node's gate until it
// returns: lease renewal (ownership/renewal.hpp), the recovery sweep (app/recovery_sweep.hpp),
// passivation (app/passivation.hpp) and the watchdog of stuck sessions (app/watchdog.hpp). The
// node builds them, starts them and stops them; nothing it starts is detached (an exception that
// ends one is logged).
//
// Logs: every lease acquired, taken over, lost or released (but passivations: one line per
// round), with its epoch; each sweep round that recovers sessions, and every session it
// recovers; the store going away and
// coming back (once each per outage).
#pragma once

#include "app/passivation.hpp"
#include "app/recovery_sweep.hpp"
#include "app/watchdog.hpp"
#include "broker/server.hpp"
#include "mcp/tools.hpp"
#include "metrics/http_endpoint.hpp"
#include "metrics/metrics.hpp"
#include "ownership/lease_desk.hpp"
#include "ownership/renewal.hpp"
#include "providers/providers_config.hpp"
#include "runtime/clock.hpp"
#include "storage/watched_store.hpp"
#include "tools/nats_tools.hpp"

#include <spdlog/logger.h>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <map>
#include <memory>

namespace wuhu::app {

namespace asio = boost::asio;

struct node_options {
    std::string worker_id;  // 1-64 of [A-Za-z0-9_-]: a subject token
    broker::server_options server;
    ownership::lease_settings lease;  // ttl, renew interval, stop margin
    std::size_t store_threads = 4;
    std::chrono::milliseconds drain_timeout{10000};
    std::chrono::milliseconds forward_grace{250};
    // The recovery sweep: how often, and how many sessions it claims at most each time.
    // 0: half the lease TTL.
    std::chrono::milliseconds sweep_interval{0};
    std::size_t sweep_batch = 64;
    // Passivation: a loaded session that is idle (no work, no timer due within two sweep
    // intervals) and unused for
    // `passivate_after` is unloaded and its lease released (0: never); past
    // `max_loaded_sessions` loaded sessions, the least recently used idle ones go first (0: no
    // limit). Checked every quarter of `passivate_after` (at most every second); at most
    // `passivate_batch` sessions per round.
    std::chrono::milliseconds passivate_after{600000};
    std::size_t max_loaded_sessions = 10000;
    std::size_t passivate_batch = 1000;
    // What a loaded session holds open in the store beyond its data (the SQLite store's file:
    // a connection, page cache and shared memory) is closed once unused this long, checked
    // every second (0: never); its next commit opens it again.
    std::chrono::milliseconds close_files_after{10000};
    worker::loop_options loop;  // its store_executor is the node's pool (none: memory store)
    // Concurrent inferences of this worker, and of each tenant (providers/inference_slots.hpp);
    // both 0: no limit.
    providers::inference_slots::limits inferences;
    // The model endpoints of the providers file: a session whose model names one infers
    // there; the others use the node's provider factory (the scripted model).
    std::vector<providers::endpoint_config> endpoints;
    // The providers file's prices: each answer's cost, by the model its provider reported.
    providers::price_table prices;
    // The tools file's tools, served over NATS (tools/nats_tools.hpp).
    std::vector<tools::tool_service> tool_services;
    // The tools file's approval terms, by tool (built-ins too): tools::parse_approvals.
    std::map<std::string, session::tool_approval> tool_approvals;
    // The tools file's MCP servers (mcp/tools.hpp): their tools are offered once each answers.
    std::vector<mcp::server_config> mcp_servers;
    // Where /metrics, /healthz and /readyz are served ("host:port"; port 0: a free one);
    // empty: nowhere, and no metric is recorded. Throws std::runtime_error when it cannot
    // listen there, unless `metrics_addr_is_default`: then a free port of that host is used (and
    // logged).
    std::string metrics_addr;
    bool metrics_addr_is_default = false;
    // Connections the metrics port holds open at once (one past it is closed unread).
    std::size_t metrics_max_connections = 64;
    // Whether that port also serves the web console at /console/ (docs/console.md).
    bool console = true;
    // Whether the NATS connection is up (/readyz); none: always.
    std::function<bool()> nats_connected;
};

class node {
  public:
    // A new provider for each session the node loads.
    using provider_factory = std::function<std::unique_ptr<providers::provider>(runtime::clock&)>;

    // Throws std::invalid_argument for a bad worker id, or a tool service named as a built-in.
    node(storage::session_store& store, ownership::lease_store& leases, nats::connection& nats,
         provider_factory providers, node_options options, std::shared_ptr<spdlog::logger> log);
    ~node();
    node(const node&) = delete;
    node& operator=(const node&) = delete;

    // Serves until stop() has run its course. Call once.
    void run();
    // Starts the stop sequence (see above); idempotent, from any thread.
    void stop();

    asio::any_io_executor executor() { return io_.get_executor(); }
    // REQUIRES: on the executor.
    const worker::session_registry& registry() const { return *registry_; }
    const broker::server& requests() const { return *server_; }
    // Where /metrics is served ("127.0.0.1:9464"), or empty.
    std::string metrics_address() const { return http_ ? http_->address() : std::string(); }

  private:
    // Metrics nobody can scrape are not recorded.
    bool measuring() const { return !options_.metrics_addr.empty(); }
    worker::session_registry::event_forwarder served_only(
        worker::session_registry::event_forwarder publish);
    // Records what a loop event tells the metrics, then forwards it.
    worker::session_registry::event_forwarder measured(
        worker::session_registry::event_forwarder publish);
    // The gauges, from the loaded sessions (on the executor); and /metrics, /healthz, /readyz
    // (on the endpoint's thread).
    metrics::snapshot take_snapshot();
    std::string scrape();
    bool turning(std::chrono::milliseconds within);
    std::optional<std::string> unready();
    // Waits for the loops and requests, releases the leases, and ends run() (see above).
    asio::awaitable<void> drain();
    // Every second until the stop: the store closes what it holds open for sessions unused for
    // options_.close_files_after.
    asio::awaitable<void> close_idle_files(runtime::work_gate::pass pass);
    // The completion of a job the node starts.
    std::function<void(std::exception_ptr)> ended(const char* job);

    node_options options_;
    nats::connection& nats_;
    std::shared_ptr<spdlog::logger> log_;
    metrics::worker_metrics metrics_;
    std::size_t publish_failures_seen_ = 0;  // the server's count at the last scrape
    std::size_t rerouted_seen_ = 0;          // the server's rerouted() at the last scrape
    std::size_t index_failures_seen_ = 0;    // the store's count at the last scrape
    // Before io_: work destroyed with it gives its passes back to live gates.
    runtime::work_gate busy_;      // requests, loops, drains, sweep, passivation
    runtime::work_gate renewing_;  // the lease keeper
    asio::io_context io_;
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    asio::thread_pool store_pool_;
    runtime::system_clock clock_;
    tools::tool_registry tools_;
    storage::watched_store store_;
    ownership::keeper keeper_;
    ownership::lease_desk leases_;  // lease-store IO on a strand of store_pool_
    std::unique_ptr<broker::server> server_;
    // Before the sessions that hold its slots.
    providers::inference_slots inferences_{options_.inferences};
    // The endpoints' providers (their connections): after io_, before the sessions that use
    // them.
    std::map<std::string, std::unique_ptr<providers::provider>> endpoint_owners_;
    std::map<std::string, providers::provider*> endpoints_;
    std::unique_ptr<worker::session_registry> registry_;
    // The background jobs (after what they use).
    std::optional<ownership::renewal> renewal_;
    bool overdue_ = false;  // an event met an overdue lease: the renewal's turn is asked
    std::optional<recovery_sweep> sweep_;
    std::optional<passivation> passivation_;
    std::optional<watchdog> watchdog_;
    asio::cancellation_signal stop_renewal_;
    asio::cancellation_signal stop_sweep_;
    asio::cancellation_signal stop_passivation_;
    asio::cancellation_signal stop_watch_;
    asio::cancellation_signal stop_files_;
    std::vector<std::unique_ptr<asio::cancellation_signal>> stop_mcp_;  // one per MCP server
    bool stopping_ = false;  // executor only
    std::atomic<bool> stop_asked_{false};  // /readyz: not ready once the stop began
    // Last: destroyed first, while everything it reads is still there.
    std::unique_ptr<metrics::http_endpoint> http_;
};

}  // namespace wuhu::app
