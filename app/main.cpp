// wuhu-worker: runs durable agent sessions behind NATS.
//
//   wuhu-worker --nats nats://127.0.0.1:4222 --store sqlite:///var/lib/wuhu --script demo.json
//
// Every flag has a WUHU_* environment variable (flags win). Logs are JSON lines on stderr.
// SIGTERM or SIGINT: stop taking requests, stop every session loop, answer the requests already
// taken, release the leases, exit 0 (app/node.hpp).
#include "app/backends.hpp"
#include "app/node.hpp"
#include "protocol/subjects.hpp"
#include "providers/scripted_provider.hpp"
#include "runtime/log.hpp"
#include "runtime/secrets.hpp"

#include <CLI/CLI.hpp>
#include <boost/asio/signal_set.hpp>

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

namespace {

namespace asio = boost::asio;

// A flag that becomes part of NATS subjects, checked by the contract's rule (protocol/).
CLI::Validator subject_rule(bool (*valid)(std::string_view), std::string refusal,
                            std::string name) {
    return CLI::Validator(
        [valid, refusal](std::string& v) { return valid(v) ? std::string() : refusal + v; },
        std::move(name));
}

CLI::Validator subject_prefix_rule() {
    return subject_rule(wuhu::protocol::valid_prefix,
                        "must be tokens of [A-Za-z0-9_-] separated by dots: ", "PREFIX");
}

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) {
        throw std::invalid_argument("cannot read " + path);
    }
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"wuhu-worker: runs durable LLM agent sessions behind NATS"};
    std::string nats_url = "nats://127.0.0.1:4222";
    std::string store_url = "sqlite://./wuhu-data";
    std::string script_path;
    std::string prefix = "wuhu";
    std::string worker_id = "worker-" + std::to_string(getpid());
    std::size_t pool = 8;
    std::string lease = "auto";
    long lease_ttl_ms = 15000;
    std::size_t store_threads = 4;
    const auto subject_token = subject_rule(wuhu::protocol::valid_worker_id,
                                            "must be 1-64 characters of [A-Za-z0-9_-]: ", "ID");
    app.add_option("--nats", nats_url,
                   "NATS URL or comma-separated URLs; credentials may go in the URL "
                   "(nats://user:password@host:4222, nats://token@host:4222) or in the flags "
                   "below (docs/security.md)")
        ->envname("WUHU_NATS_URL");
    wuhu::nats::credentials nats_auth;
    app.add_option("--nats-user", nats_auth.user, "NATS user (with --nats-password)")
        ->envname("WUHU_NATS_USER");
    app.add_option("--nats-password", nats_auth.password,
                   "NATS password (prefer the variable: a flag shows in the process list)")
        ->envname("WUHU_NATS_PASSWORD");
    app.add_option("--nats-token", nats_auth.token, "NATS token")->envname("WUHU_NATS_TOKEN");
    app.add_option("--nats-creds", nats_auth.credentials_file,
                   "NATS credentials file (a user JWT and its NKey seed)")
        ->envname("WUHU_NATS_CREDS");
    app.add_option("--nats-nkey", nats_auth.nkey_seed_file, "file holding the NATS user's NKey seed")
        ->envname("WUHU_NATS_NKEY");
    std::string inbox_prefix = "_INBOX";
    app.add_option("--nats-inbox-prefix", inbox_prefix,
                   "prefix of this worker's reply subjects (the fleet's own requests: the "
                   "fleet view asking owners, tool calls)")
        ->envname("WUHU_NATS_INBOX_PREFIX")
        ->check(subject_prefix_rule());
    app.add_option("--store", store_url,
                   "sqlite:///<data-dir>, postgresql://..., or memory (development and "
                   "benchmarks: nothing survives the process)")
        ->envname("WUHU_STORE");
    std::string synchronous = "full";
    app.add_option("--sqlite-synchronous", synchronous,
                   "full: an acknowledged command survives a power loss; normal: it survives "
                   "a crash of the worker, but a power loss may take the last commits "
                   "(docs/storage.md)")
        ->envname("WUHU_SQLITE_SYNCHRONOUS")
        ->check(CLI::IsMember({"full", "normal"}, CLI::ignore_case));
    std::size_t sqlite_open_files = 512;
    app.add_option("--sqlite-open-files", sqlite_open_files,
                   "the most session files kept open (each ~35 KiB of SQLite's heap and 3 "
                   "descriptors; the least recently used idle one is closed past it): a few "
                   "times the sessions at work at once (docs/operations.md)")
        ->envname("WUHU_SQLITE_OPEN_FILES")
        ->check(CLI::Range(std::size_t{16}, std::size_t{2000}));
    app.add_option("--script", script_path,
                   "scripted provider script, see docs/scripted-provider.md")
        ->envname("WUHU_SCRIPT");
    const auto subject_prefix = subject_prefix_rule();
    app.add_option("--prefix", prefix, "subject prefix (tokens separated by dots)")
        ->envname("WUHU_PREFIX")
        ->check(subject_prefix);
    bool tenancy = false;
    app.add_flag("--tenancy", tenancy,
                 "serve tenants: <prefix>.<tenant>.session.<sid>.<verb>, each tenant's sessions "
                 "its own, isolated by nats-server accounts (docs/security.md)")
        ->envname("WUHU_TENANCY");
    std::string default_tenant;
    app.add_option("--default-tenant", default_tenant,
                   "with --tenancy: the tenant the sessions stored without one belong to (those "
                   "made before tenancy was on); its new sessions are stored the same way")
        ->envname("WUHU_DEFAULT_TENANT");
    app.add_option("--worker-id", worker_id, "this worker's id (default worker-<pid>)")
        ->envname("WUHU_WORKER_ID")
        ->check(subject_token);
    std::string pg_schema = "wuhu";
    app.add_option("--pg-schema", pg_schema,
                   "the PostgreSQL schema of the sessions and leases ([a-z_][a-z0-9_]*, created "
                   "if missing): fleets that share a database each use a schema of their own")
        ->envname("WUHU_PG_SCHEMA");
    app.add_option("--pg-pool", pool, "PostgreSQL connections")
        ->envname("WUHU_PG_POOL")
        ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
    app.add_option("--lease", lease,
                   "lease backend: auto, sqlite (the SQLite store's catalog), sqlite:///<dir>, "
                   "postgres (the PostgreSQL store's database), or memory (tests only)")
        ->envname("WUHU_LEASE");
    bool force_memory_lease = false;
    app.add_flag("--force-memory-lease", force_memory_lease,
                 "allow --lease memory with a persistent store (tests only)")
        ->envname("WUHU_FORCE_MEMORY_LEASE");
    app.add_option("--store-threads", store_threads, "threads that run the sessions' store IO")
        ->envname("WUHU_STORE_THREADS")
        ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
    app.add_option("--lease-ttl-ms", lease_ttl_ms, "lease time to live")
        ->envname("WUHU_LEASE_TTL_MS")
        ->check(CLI::Range(300L, 3600000L));
    long renew_ms = 0;
    app.add_option("--lease-renew-ms", renew_ms,
                   "how often leases are renewed (default: a third of the TTL)")
        ->envname("WUHU_LEASE_RENEW_MS")
        ->check(CLI::Range(0L, 3600000L));
    long stop_margin_ms = 0;
    app.add_option("--lease-stop-margin-ms", stop_margin_ms,
                   "a session whose lease was not renewed is given up this long before it "
                   "expires (default: a fifth of the TTL)")
        ->envname("WUHU_LEASE_STOP_MARGIN_MS")
        ->check(CLI::Range(0L, 3600000L));
    // A duration flag: milliseconds, or a number with a unit (500ms, 30s, 10m, 1h), up to
    // `max_ms`.
    const auto duration = CLI::AsNumberWithUnit(
        std::map<std::string, long>{{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}});
    auto add_duration = [&](const char* flag, const char* env, const std::string& what, long& ms,
                            long max_ms) {
        app.add_option(flag, ms, what + " (milliseconds, or a number with a unit: 500ms, 30s, "
                                        "10m, 1h)")
            ->envname(env)
            ->transform(duration)
            ->check(CLI::Range(0L, max_ms));
    };
    constexpr long a_day_ms = 86400000L;
    long passivate_after_ms = 600000;
    add_duration("--passivate-after", "WUHU_PASSIVATE_AFTER",
                 "unload an idle session unused this long and release its lease; 0: never",
                 passivate_after_ms, a_day_ms);
    std::size_t max_loaded = 10000;
    app.add_option("--max-loaded-sessions", max_loaded,
                   "at most this many sessions loaded: past it the least recently used idle "
                   "ones are unloaded first; 0: no limit")
        ->envname("WUHU_MAX_LOADED_SESSIONS");
    std::string providers_path;
    app.add_option("--providers", providers_path,
                   "the model endpoints (docs/providers.md); without it every model is the "
                   "scripted one")
        ->envname("WUHU_PROVIDERS");
    std::string metrics_addr = "127.0.0.1:9464";
    auto* metrics_flag =
        app.add_option("--metrics-addr", metrics_addr,
                       "where /metrics, /healthz and /readyz are served (host:port; port 0: a "
                       "free one; \"off\": nowhere). When the default port is taken (another "
                       "worker of this host), a free one")
            ->envname("WUHU_METRICS_ADDR");
    std::size_t metrics_max_connections = 64;
    app.add_option("--metrics-max-connections", metrics_max_connections,
                   "connections the metrics port holds open at once; one past it is closed "
                   "unread")
        ->envname("WUHU_METRICS_MAX_CONNECTIONS")
        ->check(CLI::Range(std::size_t{1}, std::size_t{100000}));
    bool console = true;
    app.add_flag("--console,!--no-console", console,
                 "serve the web console at /console/ on the metrics port (docs/console.md); "
                 "--no-console turns it off")
        ->envname("WUHU_CONSOLE");
    std::string tools_path;
    app.add_option("--tools", tools_path,
                   "tools served over NATS (docs/tools.md), besides the built-in ones")
        ->envname("WUHU_TOOLS");
    std::size_t sweep_batch = 64;
    app.add_option("--sweep-batch", sweep_batch,
                   "the recovery sweep claims at most this many sessions each round (every "
                   "half lease TTL)")
        ->envname("WUHU_SWEEP_BATCH")
        ->check(CLI::Range(std::size_t{1}, std::size_t{100000}));
    // Bounds (DESIGN.md "Bounds"; docs/operations.md "Limits").
    wuhu::storage::pg_timeouts pg_timeouts;
    long pg_statement_ms = pg_timeouts.statement.count();
    long pg_lock_ms = pg_timeouts.lock.count();
    long pg_idle_ms = pg_timeouts.idle_in_transaction.count();
    add_duration("--pg-statement-timeout", "WUHU_PG_STATEMENT_TIMEOUT",
                 "PostgreSQL: the longest a statement of the worker's may run (unavailable past "
                 "it); 0: no limit",
                 pg_statement_ms, a_day_ms);
    add_duration("--pg-lock-timeout", "WUHU_PG_LOCK_TIMEOUT",
                 "PostgreSQL: the longest a statement waits for a row lock (a frozen previous "
                 "owner's, say); 0: no limit",
                 pg_lock_ms, a_day_ms);
    add_duration("--pg-idle-in-transaction-timeout", "WUHU_PG_IDLE_IN_TRANSACTION_TIMEOUT",
                 "PostgreSQL: a session of the worker's left idle inside a transaction this long "
                 "is ended by the server, and its locks released; 0: no limit",
                 pg_idle_ms, a_day_ms);
    std::size_t max_in_flight = 1024;
    app.add_option("--max-requests-in-flight", max_in_flight,
                   "requests taken and not answered yet, at most: past it a request is "
                   "refused at once with overloaded (0: no limit)")
        ->envname("WUHU_MAX_REQUESTS_IN_FLIGHT");
    std::size_t max_waiting_commands = 64;
    app.add_option("--max-commands-per-session", max_waiting_commands,
                   "commands waiting for one session, at most (overloaded past it; 0: no "
                   "limit)")
        ->envname("WUHU_MAX_COMMANDS_PER_SESSION");
    wuhu::session::lane_limits lanes;
    app.add_option("--lane-max-items", lanes.max_items,
                   "pending items one lane of a session may hold (lane_full past it; 0: no "
                   "limit)")
        ->envname("WUHU_LANE_MAX_ITEMS");
    app.add_option("--lane-max-bytes", lanes.max_bytes,
                   "bytes of content one lane's pending items may hold (lane_full past it; a "
                   "number with a unit: 4MiB, 512KiB; 0: no limit)")
        ->envname("WUHU_LANE_MAX_BYTES")
        ->transform(CLI::AsSizeValue(false));
    std::size_t max_content = wuhu::session::default_max_content_bytes;
    app.add_option("--max-content-bytes", max_content,
                   "the content of one queued message, at most (content_too_large past it; "
                   "a number with a unit: 256KiB)")
        ->envname("WUHU_MAX_CONTENT_BYTES")
        ->transform(CLI::AsSizeValue(false))
        ->check(CLI::Range(std::size_t{1}, std::size_t{64} << 20));
    std::size_t max_entry = 1024 * 1024;
    app.add_option("--max-entry-bytes", max_entry,
                   "a provider's answer or a tool's output stored in one entry, at most: past "
                   "it, stored cut with a note (a number with a unit: 1MiB; 0: no limit)")
        ->envname("WUHU_MAX_ENTRY_BYTES")
        ->transform(CLI::AsSizeValue(false));
    long retry_after_ms = 100;
    app.add_option("--retry-after-ms", retry_after_ms,
                   "the wait an overloaded or lane_full refusal suggests to the client")
        ->envname("WUHU_RETRY_AFTER_MS")
        ->check(CLI::Range(1L, 600000L));
    wuhu::broker::tenant_limits tenant_limits;
    app.add_option("--tenant-requests-per-second", tenant_limits.requests_per_second,
                   "requests per second each tenant (the fleet, without tenancy) may send to "
                   "this worker (rate_limited past it; 0: no limit)")
        ->envname("WUHU_TENANT_REQUESTS_PER_SECOND")
        ->check(CLI::Range(0.0, 1e9));
    app.add_option("--tenant-new-sessions-per-second", tenant_limits.new_sessions_per_second,
                   "new sessions per second each tenant may create through this worker "
                   "(rate_limited past it; 0: no limit)")
        ->envname("WUHU_TENANT_NEW_SESSIONS_PER_SECOND")
        ->check(CLI::Range(0.0, 1e9));
    wuhu::providers::inference_slots::limits inferences;
    app.add_option("--max-inferences", inferences.total,
                   "inferences this worker runs at once; more wait their turn, fairly across "
                   "tenants (0: no limit)")
        ->envname("WUHU_MAX_INFERENCES");
    app.add_option("--tenant-max-inferences", inferences.per_tenant,
                   "inferences one tenant (the fleet, without tenancy) runs at once on this "
                   "worker (0: no limit)")
        ->envname("WUHU_TENANT_MAX_INFERENCES");
    app.add_option("--tenant-max-sessions", tenant_limits.max_sessions,
                   "sessions each tenant may keep in the store (quota_exceeded for a new one "
                   "past it; 0: no limit)")
        ->envname("WUHU_TENANT_MAX_SESSIONS");
    // Timeouts and the retry policy of inference (docs/operations.md "Timeouts and retries").
    const wuhu::worker::loop_options defaults;
    long inference_first_byte_ms = defaults.inference.first_byte.count();
    long inference_idle_ms = defaults.inference.idle.count();
    long inference_total_ms = defaults.inference.total.count();
    long summary_first_byte_ms = defaults.summary.first_byte.count();
    long summary_idle_ms = defaults.summary.idle.count();
    long summary_total_ms = defaults.summary.total.count();
    long tool_timeout_ms = defaults.tool_timeout.count();
    long retry_base_ms = defaults.retry.base.count();
    long retry_cap_ms = defaults.retry.cap.count();
    long retry_server_wait_ms = defaults.retry.max_server_wait.count();
    struct timed_flag {
        const char* flag;
        const char* env;
        const char* what;
        long* ms;
    };
    std::vector<timed_flag> timed{
        {"--inference-first-byte-timeout", "WUHU_INFERENCE_FIRST_BYTE_TIMEOUT",
         "an inference's first byte (the response's headers) comes within this, or the attempt "
         "ends and is retried; 0: no limit",
         &inference_first_byte_ms},
        {"--inference-idle-timeout", "WUHU_INFERENCE_IDLE_TIMEOUT",
         "an inference streams no longer quiet than this between two bytes; 0: no limit",
         &inference_idle_ms},
        {"--inference-timeout", "WUHU_INFERENCE_TIMEOUT",
         "an inference attempt, stream included, takes at most this in all; 0: no limit",
         &inference_total_ms},
        {"--summary-first-byte-timeout", "WUHU_SUMMARY_FIRST_BYTE_TIMEOUT",
         "a compaction summary's first byte comes within this; 0: no limit", &summary_first_byte_ms},
        {"--summary-idle-timeout", "WUHU_SUMMARY_IDLE_TIMEOUT",
         "a compaction summary streams no longer quiet than this; 0: no limit", &summary_idle_ms},
        {"--summary-timeout", "WUHU_SUMMARY_TIMEOUT",
         "a compaction summary takes at most this in all; 0: no limit", &summary_total_ms},
        {"--tool-timeout", "WUHU_TOOL_TIMEOUT",
         "a tool call takes at most this, for the tools without a timeout of their own (the "
         "tools file's timeout_ms); then it gets an error result; 0: no limit",
         &tool_timeout_ms},
        {"--retry-base-delay", "WUHU_RETRY_BASE_DELAY",
         "the wait before an inference's first retry (doubling each retry, with jitter)",
         &retry_base_ms},
        {"--retry-max-delay", "WUHU_RETRY_MAX_DELAY", "the longest wait between two retries",
         &retry_cap_ms},
        {"--retry-max-server-wait", "WUHU_RETRY_MAX_SERVER_WAIT",
         "a provider's Retry-After is honoured up to this", &retry_server_wait_ms},
    };
    for (auto& t : timed) {
        add_duration(t.flag, t.env, t.what, *t.ms, 7 * a_day_ms);
    }
    int retry_max_attempts = defaults.retry.max_attempts;
    app.add_option("--retry-max-attempts", retry_max_attempts,
                   "attempts of one inference in all, the first included (then the turn ends "
                   "with an inference_failed diagnostic)")
        ->envname("WUHU_RETRY_MAX_ATTEMPTS")
        ->check(CLI::Range(1, 1000));
    // The fleet's default budget (docs/protocol.md "Budgets"): what a session's own leaves at 0.
    wuhu::session::budget budget;
    double budget_cost_usd = 0;
    app.add_option("--budget-tokens", budget.tokens,
                   "a session stops before its next inference once its answers used this many "
                   "tokens, unless its own budget says otherwise; 0: no limit")
        ->envname("WUHU_BUDGET_TOKENS");
    app.add_option("--budget-cost-usd", budget_cost_usd,
                   "a session stops before its next inference once its answers cost this many "
                   "US dollars (the providers file's prices), unless its own budget says "
                   "otherwise; 0: no limit")
        ->envname("WUHU_BUDGET_COST_USD")
        ->check(CLI::Range(0.0, 1e9));
    app.add_option("--budget-turns", budget.turns,
                   "a session stops before its next inference once it made this many answers, "
                   "unless its own budget says otherwise; 0: no limit")
        ->envname("WUHU_BUDGET_TURNS");
    app.add_option("--budget-tool-calls", budget.tool_calls,
                   "a session stops before its next inference once it started this many tool "
                   "calls, unless its own budget says otherwise; 0: no limit")
        ->envname("WUHU_BUDGET_TOOL_CALLS");
    app.add_option("--budget-soft-percent", budget.soft_percent,
                   "at this percent of a limit the model gets one notice (100: none)")
        ->envname("WUHU_BUDGET_SOFT_PERCENT")
        ->check(CLI::Range(1, 100))
        ->default_val(80);
    std::string tenant_budgets_path;
    app.add_option("--tenant-budgets", tenant_budgets_path,
                   "with --tenancy: each tenant's default budget, a JSON file {\"<tenant>\": "
                   "{\"turns\": 50, \"cost_usd\": \"5\", ...}} (its sessions' own budgets "
                   "come first, the --budget-* flags last)")
        ->envname("WUHU_TENANT_BUDGETS");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;  // --help is 0; every usage error is 2
    }

    pg_timeouts.statement = std::chrono::milliseconds(pg_statement_ms);
    pg_timeouts.lock = std::chrono::milliseconds(pg_lock_ms);
    pg_timeouts.idle_in_transaction = std::chrono::milliseconds(pg_idle_ms);
    auto log = wuhu::runtime::json_logger(worker_id);
    try {
        const auto lease_settings = wuhu::app::lease_settings_of(lease_ttl_ms, renew_ms, stop_margin_ms);
        auto script = wuhu::providers::script{};
        if (!script_path.empty()) {
            auto parsed = wuhu::providers::parse_script(read_file(script_path));
            if (!parsed) {
                log->error("bad script {}: {}", script_path, parsed.error().message());
                return 2;
            }
            script = std::move(*parsed);
        }
        std::vector<wuhu::providers::endpoint_config> endpoints;
        wuhu::providers::price_table prices;
        if (!providers_path.empty()) {
            auto env = [](std::string_view name) -> std::optional<std::string> {
                const char* v = std::getenv(std::string(name).c_str());
                return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
            };
            auto file = [](std::string_view path) -> std::optional<std::string> {
                std::ifstream f{std::string(path)};
                if (!f) {
                    return std::nullopt;
                }
                std::stringstream ss;
                ss << f.rdbuf();
                return ss.str();
            };
            const auto text = read_file(providers_path);
            auto parsed = wuhu::providers::parse_providers(text, env, file);
            if (!parsed) {
                log->error("bad providers file {}: {}", providers_path, parsed.error());
                return 2;
            }
            endpoints = std::move(*parsed);
            auto priced = wuhu::providers::parse_prices(text);
            if (!priced) {
                log->error("bad providers file {}: {}", providers_path, priced.error());
                return 2;
            }
            prices = std::move(*priced);
        }
        std::map<std::string, wuhu::session::budget, std::less<>> tenant_budgets;
        if (!tenant_budgets_path.empty()) {
            boost::system::error_code ec;
            const auto v = boost::json::parse(read_file(tenant_budgets_path), ec);
            auto parsed =
                ec ? wuhu::session::decoded<
                         std::map<std::string, wuhu::session::budget, std::less<>>>(
                         wuhu::session::decode_error{wuhu::session::errc::invalid_json, ""})
                   : wuhu::protocol::decode_tenant_budgets(v);
            if (!parsed || !tenancy) {
                log->error("bad tenant budgets file {}: {}", tenant_budgets_path,
                           !tenancy ? std::string("it needs --tenancy") : parsed.error().message());
                return 2;
            }
            tenant_budgets = std::move(*parsed);
        }
        std::vector<wuhu::tools::tool_service> tool_services;
        std::map<std::string, wuhu::session::tool_approval> tool_approvals;
        std::vector<wuhu::mcp::server_config> mcp_servers;
        if (!tools_path.empty()) {
            const auto text = read_file(tools_path);  // read once: one version of the file
            auto parsed = wuhu::tools::parse_tools(text);
            if (!parsed) {
                log->error("bad tools file {}: {}", tools_path, parsed.error());
                return 2;
            }
            tool_services = std::move(*parsed);
            tool_approvals = std::move(*wuhu::tools::parse_approvals(text));
            auto servers = wuhu::mcp::parse_servers(text, tenancy);
            if (!servers) {
                log->error("bad tools file {}: {}", tools_path, servers.error());
                return 2;
            }
            mcp_servers = std::move(*servers);
        }
        // Checked before anything is opened: a bad default tenant is a usage error.
        const wuhu::protocol::subject_layout subjects(
            prefix, wuhu::protocol::tenancy{tenancy, default_tenant});
        if (!subjects.valid_worker(worker_id)) {
            throw std::invalid_argument(
                "--worker-id cannot be session, admin, events, tools or worker with --tenancy");
        }
        auto store = wuhu::app::open_store(store_url, pool, synchronous, sqlite_open_files,
                                           pg_schema, pg_timeouts);
        if (tenancy && !default_tenant.empty()) {
            // The default tenant's sessions are kept without a tenant: sessions already kept
            // as that tenant's (<tenant>.<id>) would be hidden behind them, and share their
            // subjects.
            wuhu::storage::catalog_query q;
            q.tenant = default_tenant;
            q.limit = 1;
            auto found = store->sessions(q);
            if (!found) {
                throw std::runtime_error("reading the store's sessions: " +
                                         found.error().message());
            }
            if (!found->empty()) {
                throw std::invalid_argument(
                    "--default-tenant " + default_tenant + ": the store already holds sessions "
                    "of that tenant (" + found->front().id.str() + "); the default tenant must "
                    "be one whose sessions were all made before tenancy");
            }
        }
        auto leases = wuhu::app::open_leases(lease, store_url, force_memory_lease, pg_schema, pg_timeouts);
        wuhu::nats::options nats_options;
        nats_options.url = nats_url;
        nats_options.name = worker_id;
        nats_options.auth = nats_auth;
        nats_options.inbox_prefix = inbox_prefix;
        // The URL libnats hands over is redacted in nats/ (runtime::redacted_url).
        nats_options.on_connection = [log](std::string_view event, std::string_view url) {
            if (event == "disconnected") {
                log->warn("NATS connection lost; reconnecting");
            } else {
                log->info("NATS {} {}", event, url);
            }
        };
        wuhu::nats::connection nats(nats_options);
        wuhu::app::node_options options;
        options.worker_id = worker_id;
        options.server.prefix = prefix;
        options.server.tenancy = wuhu::protocol::tenancy{tenancy, default_tenant};
        options.lease = lease_settings;
        options.passivate_after = std::chrono::milliseconds(passivate_after_ms);
        options.max_loaded_sessions = max_loaded;
        options.sweep_batch = sweep_batch;
        if (lanes.max_bytes > 0 && lanes.max_bytes < max_content) {
            throw std::invalid_argument(
                "--lane-max-bytes (" + std::to_string(lanes.max_bytes) +
                ") must be 0 or at least --max-content-bytes (" + std::to_string(max_content) +
                "): a message of the largest size must fit an empty lane");
        }
        options.server.max_in_flight = max_in_flight;
        options.server.retry_after = std::chrono::milliseconds(retry_after_ms);
        options.server.limits.max_content_bytes = max_content;
        options.server.tenants = tenant_limits;
        options.loop.lanes = lanes;
        options.loop.max_waiting_commands = max_waiting_commands;
        // A session's requests at the door: its waiting commands, and as many reads.
        options.server.max_per_session = 2 * max_waiting_commands;
        options.loop.max_entry_bytes = max_entry;
        {
            using ms = std::chrono::milliseconds;
            auto& l = options.loop;
            l.inference = {ms(inference_first_byte_ms), ms(inference_idle_ms),
                           ms(inference_total_ms)};
            l.summary = {ms(summary_first_byte_ms), ms(summary_idle_ms), ms(summary_total_ms)};
            l.tool_timeout = ms(tool_timeout_ms);
            l.retry.base = ms(retry_base_ms);
            l.retry.cap = ms(retry_cap_ms);
            l.retry.max_server_wait = ms(retry_server_wait_ms);
            l.retry.max_attempts = retry_max_attempts;
            if (l.tool_timeout.count() == 0) {
                l.tool_timeout = ms(7 * a_day_ms);  // "no limit": a week
            }
            l.budget = budget;
            l.budget.cost = static_cast<std::uint64_t>(std::llround(budget_cost_usd * 1e9));
            l.tenant_budgets = tenant_budgets;
        }
        options.inferences = inferences;
        options.store_threads = store_threads;
        options.endpoints = endpoints;
        options.prices = prices;
        options.tool_services = tool_services;
        options.tool_approvals = tool_approvals;
        options.mcp_servers = mcp_servers;
        options.metrics_addr = metrics_addr == "off" ? std::string() : metrics_addr;
        options.metrics_max_connections = metrics_max_connections;
        options.console = console;
        options.metrics_addr_is_default = metrics_flag->count() == 0 &&
                                          std::getenv("WUHU_METRICS_ADDR") == nullptr;
        options.nats_connected = [&nats] { return nats.connected(); };
        wuhu::app::node node(
            *store, *leases, nats,
            [script = std::make_shared<const wuhu::providers::script>(std::move(script))](
                wuhu::runtime::clock& clk) {
                return std::make_unique<wuhu::providers::scripted_provider>(script, clk);
            },
            options, log);
        asio::signal_set signals(node.executor(), SIGTERM, SIGINT);
        signals.async_wait([&](const boost::system::error_code& ec, int sig) {
            if (!ec) {
                log->info("signal {}", sig);
                node.stop();
            }
        });
        log->info(
            "serving {}{} on {} with store {} and {} leases (ttl {} ms, renewed every "
            "{} ms, stop margin {} ms)",
            subjects.requests(),
            tenancy ? (default_tenant.empty() ? " (tenancy)"
                                              : " (tenancy; default tenant " + default_tenant + ")")
                    : std::string(),
            wuhu::runtime::redacted_url(nats_url), std::string(store->backend()),
            std::string(leases->backend()), lease_ttl_ms, lease_settings.renew_interval.count(),
            lease_settings.stop_margin.count());
        for (const auto& e : endpoints) {
            if (e.api == wuhu::providers::api_kind::replay) {
                log->info("model endpoint {}: replay of {}", e.name, e.replay_file);
                continue;
            }
            log->info("model endpoint {}: {} at {}://{}:{}{} (default model {}){}", e.name,
                      e.api == wuhu::providers::api_kind::openai ? "openai" : "anthropic",
                      e.base.tls ? "https" : "http", e.base.host, e.base.port, e.base.path,
                      e.default_model.empty() ? "none" : e.default_model,
                      e.record_to.empty() ? "" : ", recorded to " + e.record_to);
        }
        if (const auto at = node.metrics_address(); !at.empty()) {
            log->info("metrics on http://{}/metrics (and /healthz, /readyz)", at);
        }
        for (const auto& t : tool_services) {
            log->info("tool {}: served on {}{}", t.spec.name, wuhu::tools::subject_of(t, subjects),
                      t.idempotent ? " (idempotent)" : "");
        }
        for (const auto& [name, terms] : tool_approvals) {
            if (terms.mode == wuhu::session::approval_mode::always) {
                log->info("tool {}: its calls wait for approval{}", name,
                          terms.deadline_ms == 0
                              ? std::string()
                              : " (" +
                                    std::string(wuhu::session::decision_name(terms.on_deadline)) +
                                    " after " + std::to_string(terms.deadline_ms) + " ms)");
            }
        }
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
