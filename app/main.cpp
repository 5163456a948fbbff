// wuhu-worker: runs durable agent sessions behind NATS.
//
//   wuhu-worker --nats nats://127.0.0.1:4222 --store sqlite:///var/lib/wuhu --script demo.json
//
// Every flag has a WUHU_* environment variable (flags win: app/worker_flags.hpp). Logs are JSON
// lines on stderr. SIGTERM or SIGINT: stop taking requests, stop every session loop, answer the
// requests already taken, release the leases, exit 0 (app/node.hpp).
#include "app/backends.hpp"
#include "app/node.hpp"
#include "app/worker_flags.hpp"
#include "protocol/subjects.hpp"
#include "providers/scripted_provider.hpp"
#include "runtime/log.hpp"
#include "runtime/secrets.hpp"

#include <CLI/CLI.hpp>
#include <boost/asio/signal_set.hpp>

namespace {

namespace asio = boost::asio;
using namespace wuhu;

// With --default-tenant, the store must hold no session of that tenant yet: its sessions are
// kept without a tenant, and sessions already kept as that tenant's (<tenant>.<id>) would be
// hidden behind them, and share their subjects.
void check_default_tenant(storage::session_store& store, const std::string& tenant) {
    storage::catalog_query q;
    q.tenant = tenant;
    q.limit = 1;
    auto found = store.sessions(q);
    if (!found) {
        throw std::runtime_error("reading the store's sessions: " + found.error().message());
    }
    if (!found->empty()) {
        throw std::invalid_argument("--default-tenant " + tenant +
                                    ": the store already holds sessions of that tenant (" +
                                    found->front().id.str() +
                                    "); the default tenant must be one whose sessions were all "
                                    "made before tenancy");
    }
}

// What the worker serves, where, with what, logged once it is ready to run.
void log_start(spdlog::logger& log, const app::worker_flags& f, const app::node_options& o,
               const protocol::subject_layout& subjects, const app::node& node,
               std::string_view store, std::string_view leases) {
    log.info(
        "serving {}{} on {} with store {} and {} leases (ttl {} ms, renewed every {} ms, stop "
        "margin {} ms)",
        subjects.requests(),
        f.tenancy
            ? (f.default_tenant.empty() ? " (tenancy)"
                                        : " (tenancy; default tenant " + f.default_tenant + ")")
            : std::string(),
        runtime::redacted_url(f.nats_url), std::string(store), std::string(leases), f.lease_ttl_ms,
        o.lease.renew_interval.count(), o.lease.stop_margin.count());
    for (const auto& e : o.endpoints) {
        if (e.api == providers::api_kind::replay) {
            log.info("model endpoint {}: replay of {}", e.name, e.replay_file);
            continue;
        }
        log.info("model endpoint {}: {} at {}://{}:{}{} (default model {}){}", e.name,
                 e.api == providers::api_kind::openai ? "openai" : "anthropic",
                 e.base.tls ? "https" : "http", e.base.host, e.base.port, e.base.path,
                 e.default_model.empty() ? "none" : e.default_model,
                 e.record_to.empty() ? "" : ", recorded to " + e.record_to);
    }
    if (const auto at = node.metrics_address(); !at.empty()) {
        log.info("metrics on http://{}/metrics (and /healthz, /readyz)", at);
    }
    for (const auto& t : o.tool_services) {
        log.info("tool {}: served on {}{}", t.spec.name, tools::subject_of(t, subjects),
                 t.idempotent ? " (idempotent)" : "");
    }
    for (const auto& [name, terms] : o.tool_approvals) {
        if (terms.mode == session::approval_mode::always) {
            log.info("tool {}: its calls wait for approval{}", name,
                     terms.deadline_ms == 0
                         ? std::string()
                         : " (" + std::string(session::decision_name(terms.on_deadline)) +
                               " after " + std::to_string(terms.deadline_ms) + " ms)");
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"wuhu-worker: runs durable LLM agent sessions behind NATS"};
    app::worker_flags f;
    app::add_flags(app, f);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;  // --help is 0; every usage error is 2
    }
    f.metrics_addr_given = app.get_option("--metrics-addr")->count() > 0 ||
                           std::getenv("WUHU_METRICS_ADDR") != nullptr;

    auto log = runtime::json_logger(f.worker_id);
    try {
        auto files = app::read_files(f);
        auto options = app::node_options_of(f, files);
        // Checked before anything is opened: a bad default tenant is a usage error.
        const protocol::subject_layout subjects(f.prefix,
                                                protocol::tenancy{f.tenancy, f.default_tenant});
        if (!subjects.valid_worker(f.worker_id)) {
            throw std::invalid_argument(
                "--worker-id cannot be session, admin, events, tools or worker with --tenancy");
        }
        const auto pg_timeouts = app::pg_timeouts_of(f);
        auto store = app::open_store(f.store_url, f.pool, f.synchronous, f.sqlite_open_files,
                                     f.pg_schema, pg_timeouts);
        if (f.tenancy && !f.default_tenant.empty()) {
            check_default_tenant(*store, f.default_tenant);
        }
        auto leases =
            app::open_leases(f.lease, f.store_url, f.force_memory_lease, f.pg_schema, pg_timeouts);
        nats::options nats_options;
        nats_options.url = f.nats_url;
        nats_options.name = f.worker_id;
        nats_options.auth = f.nats_auth;
        nats_options.inbox_prefix = f.inbox_prefix;
        // The URL libnats hands over is redacted in nats/ (runtime::redacted_url).
        nats_options.on_connection = [log](std::string_view event, std::string_view url) {
            if (event == "disconnected") {
                log->warn("NATS connection lost; reconnecting");
            } else {
                log->info("NATS {} {}", event, url);
            }
        };
        nats::connection nats(nats_options);
        options.nats_connected = [&nats] { return nats.connected(); };
        app::node node(
            *store, *leases, nats,
            [script = std::make_shared<const providers::script>(std::move(files.script))](
                runtime::clock& clk) {
                return std::make_unique<providers::scripted_provider>(script, clk);
            },
            options, log);
        asio::signal_set signals(node.executor(), SIGTERM, SIGINT);
        signals.async_wait([&](const boost::system::error_code& ec, int sig) {
            if (!ec) {
                log->info("signal {}", sig);
                node.stop();
            }
        });
        log_start(*log, f, options, subjects, node, store->backend(), leases->backend());
        node.run();
        log->info("stopped");
        return 0;
    } catch (const std::invalid_argument& e) {
        log->error("{}", e.what());  // a flag or variable that cannot work: a usage error
        return 2;
    } catch (const std::exception& e) {
        log->error("fatal: {}", e.what());
        return 1;
    }
}
