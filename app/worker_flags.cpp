#include "app/worker_flags.hpp"

#include "protocol/requests.hpp"
#include "protocol/subjects.hpp"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace wuhu::app {

namespace {

// A flag that becomes part of NATS subjects, checked by the contract's rule (protocol/).
CLI::Validator subject_rule(bool (*valid)(std::string_view), std::string refusal,
                            std::string name) {
    return CLI::Validator(
        [valid, refusal](std::string& v) { return valid(v) ? std::string() : refusal + v; },
        std::move(name));
}

CLI::Validator subject_prefix_rule() {
    return subject_rule(protocol::valid_prefix,
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

void add_flags(CLI::App& app, worker_flags& f) {
    f.worker_id = "worker-" + std::to_string(getpid());
    const auto subject_token =
        subject_rule(protocol::valid_worker_id, "must be 1-64 characters of [A-Za-z0-9_-]: ", "ID");
    app.add_option("--nats", f.nats_url,
                   "NATS URL or comma-separated URLs; credentials may go in the URL "
                   "(nats://user:password@host:4222, nats://token@host:4222) or in the flags "
                   "below (docs/security.md)")
        ->envname("WUHU_NATS_URL");
    app.add_option("--nats-user", f.nats_auth.user, "NATS user (with --nats-password)")
        ->envname("WUHU_NATS_USER");
    app.add_option("--nats-password", f.nats_auth.password,
                   "NATS password (prefer the variable: a flag shows in the process list)")
        ->envname("WUHU_NATS_PASSWORD");
    app.add_option("--nats-token", f.nats_auth.token, "NATS token")->envname("WUHU_NATS_TOKEN");
    app.add_option("--nats-creds", f.nats_auth.credentials_file,
                   "NATS credentials file (a user JWT and its NKey seed)")
        ->envname("WUHU_NATS_CREDS");
    app.add_option("--nats-nkey", f.nats_auth.nkey_seed_file,
                   "file holding the NATS user's NKey seed")
        ->envname("WUHU_NATS_NKEY");
    app.add_option("--nats-inbox-prefix", f.inbox_prefix,
                   "prefix of this worker's reply subjects (the fleet's own requests: the "
                   "fleet view asking owners, tool calls)")
        ->envname("WUHU_NATS_INBOX_PREFIX")
        ->check(subject_prefix_rule());
    app.add_option("--store", f.store_url,
                   "sqlite:///<data-dir>, postgresql://..., or memory (development and "
                   "benchmarks: nothing survives the process)")
        ->envname("WUHU_STORE");
    app.add_option("--sqlite-synchronous", f.synchronous,
                   "full: an acknowledged command survives a power loss; normal: it survives "
                   "a crash of the worker, but a power loss may take the last commits "
                   "(docs/storage.md)")
        ->envname("WUHU_SQLITE_SYNCHRONOUS")
        ->check(CLI::IsMember({"full", "normal"}, CLI::ignore_case));
    app.add_option("--sqlite-open-files", f.sqlite_open_files,
                   "the most session files kept open (each ~35 KiB of SQLite's heap and 3 "
                   "descriptors; the least recently used idle one is closed past it): a few "
                   "times the sessions at work at once (docs/operations.md)")
        ->envname("WUHU_SQLITE_OPEN_FILES")
        ->check(CLI::Range(std::size_t{16}, std::size_t{2000}));
    app.add_option("--script", f.script_path,
                   "scripted provider script, see docs/scripted-provider.md")
        ->envname("WUHU_SCRIPT");
    const auto subject_prefix = subject_prefix_rule();
    app.add_option("--prefix", f.prefix, "subject prefix (tokens separated by dots)")
        ->envname("WUHU_PREFIX")
        ->check(subject_prefix);
    app.add_flag("--tenancy", f.tenancy,
                 "serve tenants: <prefix>.<tenant>.session.<sid>.<verb>, each tenant's sessions "
                 "its own, isolated by nats-server accounts (docs/security.md)")
        ->envname("WUHU_TENANCY");
    app.add_option("--default-tenant", f.default_tenant,
                   "with --tenancy: the tenant the sessions stored without one belong to (those "
                   "made before tenancy was on); its new sessions are stored the same way")
        ->envname("WUHU_DEFAULT_TENANT");
    app.add_option("--worker-id", f.worker_id, "this worker's id (default worker-<pid>)")
        ->envname("WUHU_WORKER_ID")
        ->check(subject_token);
    app.add_option("--pg-schema", f.pg_schema,
                   "the PostgreSQL schema of the sessions and leases ([a-z_][a-z0-9_]*, created "
                   "if missing): fleets that share a database each use a schema of their own")
        ->envname("WUHU_PG_SCHEMA");
    app.add_option("--pg-pool", f.pool, "PostgreSQL connections")
        ->envname("WUHU_PG_POOL")
        ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
    app.add_option("--lease", f.lease,
                   "lease backend: auto, sqlite (the SQLite store's catalog), sqlite:///<dir>, "
                   "postgres (the PostgreSQL store's database), or memory (tests only)")
        ->envname("WUHU_LEASE");
    app.add_flag("--force-memory-lease", f.force_memory_lease,
                 "allow --lease memory with a persistent store (tests only)")
        ->envname("WUHU_FORCE_MEMORY_LEASE");
    app.add_option("--store-threads", f.store_threads, "threads that run the sessions' store IO")
        ->envname("WUHU_STORE_THREADS")
        ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
    app.add_option("--lease-ttl-ms", f.lease_ttl_ms, "lease time to live")
        ->envname("WUHU_LEASE_TTL_MS")
        ->check(CLI::Range(300L, 3600000L));
    app.add_option("--lease-renew-ms", f.renew_ms,
                   "how often leases are renewed (default: a third of the TTL)")
        ->envname("WUHU_LEASE_RENEW_MS")
        ->check(CLI::Range(0L, 3600000L));
    app.add_option("--lease-stop-margin-ms", f.stop_margin_ms,
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
        app.add_option(flag, ms,
                       what +
                           " (milliseconds, or a number with a unit: 500ms, 30s, "
                           "10m, 1h)")
            ->envname(env)
            ->transform(duration)
            ->check(CLI::Range(0L, max_ms));
    };
    constexpr long a_day_ms = 86400000L;
    add_duration("--passivate-after", "WUHU_PASSIVATE_AFTER",
                 "unload an idle session unused this long and release its lease; 0: never",
                 f.passivate_after_ms, a_day_ms);
    app.add_option("--max-loaded-sessions", f.max_loaded,
                   "at most this many sessions loaded: past it the least recently used idle "
                   "ones are unloaded first; 0: no limit")
        ->envname("WUHU_MAX_LOADED_SESSIONS");
    app.add_option("--providers", f.providers_path,
                   "the model endpoints (docs/providers.md); without it every model is the "
                   "scripted one")
        ->envname("WUHU_PROVIDERS");
    app.add_option("--metrics-addr", f.metrics_addr,
                   "where /metrics, /healthz and /readyz are served (host:port; port 0: a free "
                   "one; \"off\": nowhere). When the default port is taken (another worker of "
                   "this host), a free one")
        ->envname("WUHU_METRICS_ADDR");
    app.add_option("--metrics-max-connections", f.metrics_max_connections,
                   "connections the metrics port holds open at once; one past it is closed "
                   "unread")
        ->envname("WUHU_METRICS_MAX_CONNECTIONS")
        ->check(CLI::Range(std::size_t{1}, std::size_t{100000}));
    app.add_flag("--console,!--no-console", f.console,
                 "serve the web console at /console/ on the metrics port (docs/console.md); "
                 "--no-console turns it off")
        ->envname("WUHU_CONSOLE");
    app.add_option("--tools", f.tools_path,
                   "tools served over NATS (docs/tools.md), besides the built-in ones")
        ->envname("WUHU_TOOLS");
    app.add_option("--sweep-batch", f.sweep_batch,
                   "the recovery sweep claims at most this many sessions each round (every "
                   "half lease TTL)")
        ->envname("WUHU_SWEEP_BATCH")
        ->check(CLI::Range(std::size_t{1}, std::size_t{100000}));
    // Bounds (DESIGN.md "Bounds"; docs/operations.md "Limits").
    add_duration("--pg-statement-timeout", "WUHU_PG_STATEMENT_TIMEOUT",
                 "PostgreSQL: the longest a statement of the worker's may run (unavailable past "
                 "it); 0: no limit",
                 f.pg_statement_ms, a_day_ms);
    add_duration("--pg-lock-timeout", "WUHU_PG_LOCK_TIMEOUT",
                 "PostgreSQL: the longest a statement waits for a row lock (a frozen previous "
                 "owner's, say); 0: no limit",
                 f.pg_lock_ms, a_day_ms);
    add_duration("--pg-idle-in-transaction-timeout", "WUHU_PG_IDLE_IN_TRANSACTION_TIMEOUT",
                 "PostgreSQL: a session of the worker's left idle inside a transaction this long "
                 "is ended by the server, and its locks released; 0: no limit",
                 f.pg_idle_ms, a_day_ms);
    app.add_option("--max-requests-in-flight", f.max_in_flight,
                   "requests taken and not answered yet, at most: past it a request is "
                   "refused at once with overloaded (0: no limit)")
        ->envname("WUHU_MAX_REQUESTS_IN_FLIGHT");
    app.add_option("--max-commands-per-session", f.max_waiting_commands,
                   "commands waiting for one session, at most (overloaded past it; 0: no "
                   "limit)")
        ->envname("WUHU_MAX_COMMANDS_PER_SESSION");
    app.add_option("--lane-max-items", f.lanes.max_items,
                   "pending items one lane of a session may hold (lane_full past it; 0: no "
                   "limit)")
        ->envname("WUHU_LANE_MAX_ITEMS");
    app.add_option("--lane-max-bytes", f.lanes.max_bytes,
                   "bytes of content one lane's pending items may hold (lane_full past it; a "
                   "number with a unit: 4MiB, 512KiB; 0: no limit)")
        ->envname("WUHU_LANE_MAX_BYTES")
        ->transform(CLI::AsSizeValue(false));
    app.add_option("--max-content-bytes", f.max_content,
                   "the content of one queued message, at most (content_too_large past it; "
                   "a number with a unit: 256KiB)")
        ->envname("WUHU_MAX_CONTENT_BYTES")
        ->transform(CLI::AsSizeValue(false))
        ->check(CLI::Range(std::size_t{1}, std::size_t{64} << 20));
    app.add_option("--max-entry-bytes", f.max_entry,
                   "a provider's answer or a tool's output stored in one entry, at most: past "
                   "it, stored cut with a note (a number with a unit: 1MiB; 0: no limit)")
        ->envname("WUHU_MAX_ENTRY_BYTES")
        ->transform(CLI::AsSizeValue(false));
    app.add_option("--retry-after-ms", f.retry_after_ms,
                   "the wait an overloaded or lane_full refusal suggests to the client")
        ->envname("WUHU_RETRY_AFTER_MS")
        ->check(CLI::Range(1L, 600000L));
    app.add_option("--tenant-requests-per-second", f.tenants.requests_per_second,
                   "requests per second each tenant (the fleet, without tenancy) may send to "
                   "this worker (rate_limited past it; 0: no limit)")
        ->envname("WUHU_TENANT_REQUESTS_PER_SECOND")
        ->check(CLI::Range(0.0, 1e9));
    app.add_option("--tenant-new-sessions-per-second", f.tenants.new_sessions_per_second,
                   "new sessions per second each tenant may create through this worker "
                   "(rate_limited past it; 0: no limit)")
        ->envname("WUHU_TENANT_NEW_SESSIONS_PER_SECOND")
        ->check(CLI::Range(0.0, 1e9));
    app.add_option("--max-inferences", f.inferences.total,
                   "inferences this worker runs at once; more wait their turn, fairly across "
                   "tenants (0: no limit)")
        ->envname("WUHU_MAX_INFERENCES");
    app.add_option("--tenant-max-inferences", f.inferences.per_tenant,
                   "inferences one tenant (the fleet, without tenancy) runs at once on this "
                   "worker (0: no limit)")
        ->envname("WUHU_TENANT_MAX_INFERENCES");
    app.add_option("--tenant-max-sessions", f.tenants.max_sessions,
                   "sessions each tenant may keep in the store (quota_exceeded for a new one "
                   "past it; 0: no limit)")
        ->envname("WUHU_TENANT_MAX_SESSIONS");
    // Timeouts and the retry policy of inference (docs/operations.md "Timeouts and retries").
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
         &f.inference_first_byte_ms},
        {"--inference-idle-timeout", "WUHU_INFERENCE_IDLE_TIMEOUT",
         "an inference streams no longer quiet than this between two bytes; 0: no limit",
         &f.inference_idle_ms},
        {"--inference-timeout", "WUHU_INFERENCE_TIMEOUT",
         "an inference attempt, stream included, takes at most this in all; 0: no limit",
         &f.inference_total_ms},
        {"--summary-first-byte-timeout", "WUHU_SUMMARY_FIRST_BYTE_TIMEOUT",
         "a compaction summary's first byte comes within this; 0: no limit",
         &f.summary_first_byte_ms},
        {"--summary-idle-timeout", "WUHU_SUMMARY_IDLE_TIMEOUT",
         "a compaction summary streams no longer quiet than this; 0: no limit", &f.summary_idle_ms},
        {"--summary-timeout", "WUHU_SUMMARY_TIMEOUT",
         "a compaction summary takes at most this in all; 0: no limit", &f.summary_total_ms},
        {"--tool-timeout", "WUHU_TOOL_TIMEOUT",
         "a tool call takes at most this, for the tools without a timeout of their own (the "
         "tools file's timeout_ms); then it gets an error result; 0: no limit",
         &f.tool_timeout_ms},
        {"--retry-base-delay", "WUHU_RETRY_BASE_DELAY",
         "the wait before an inference's first retry (doubling each retry, with jitter)",
         &f.retry_base_ms},
        {"--retry-max-delay", "WUHU_RETRY_MAX_DELAY", "the longest wait between two retries",
         &f.retry_cap_ms},
        {"--retry-max-server-wait", "WUHU_RETRY_MAX_SERVER_WAIT",
         "a provider's Retry-After is honoured up to this", &f.retry_server_wait_ms},
    };
    for (auto& t : timed) {
        add_duration(t.flag, t.env, t.what, *t.ms, 7 * a_day_ms);
    }
    app.add_option("--retry-max-attempts", f.retry_max_attempts,
                   "attempts of one inference in all, the first included (then the turn ends "
                   "with an inference_failed diagnostic)")
        ->envname("WUHU_RETRY_MAX_ATTEMPTS")
        ->check(CLI::Range(1, 1000));
    // The fleet's default budget (docs/protocol.md "Budgets"): what a session's own leaves at 0.
    app.add_option("--budget-tokens", f.budget.tokens,
                   "a session stops before its next inference once its answers used this many "
                   "tokens, unless its own budget says otherwise; 0: no limit")
        ->envname("WUHU_BUDGET_TOKENS");
    app.add_option("--budget-cost-usd", f.budget_cost_usd,
                   "a session stops before its next inference once its answers cost this many "
                   "US dollars (the providers file's prices), unless its own budget says "
                   "otherwise; 0: no limit")
        ->envname("WUHU_BUDGET_COST_USD")
        ->check(CLI::Range(0.0, 1e9));
    app.add_option("--budget-turns", f.budget.turns,
                   "a session stops before its next inference once it made this many answers, "
                   "unless its own budget says otherwise; 0: no limit")
        ->envname("WUHU_BUDGET_TURNS");
    app.add_option("--budget-tool-calls", f.budget.tool_calls,
                   "a session stops before its next inference once it started this many tool "
                   "calls, unless its own budget says otherwise; 0: no limit")
        ->envname("WUHU_BUDGET_TOOL_CALLS");
    app.add_option("--budget-soft-percent", f.budget.soft_percent,
                   "at this percent of a limit the model gets one notice (100: none)")
        ->envname("WUHU_BUDGET_SOFT_PERCENT")
        ->check(CLI::Range(1, 100))
        ->default_val(80);
    app.add_option("--tenant-budgets", f.tenant_budgets_path,
                   "with --tenancy: each tenant's default budget, a JSON file {\"<tenant>\": "
                   "{\"turns\": 50, \"cost_usd\": \"5\", ...}} (its sessions' own budgets "
                   "come first, the --budget-* flags last)")
        ->envname("WUHU_TENANT_BUDGETS");
}

worker_files read_files(const worker_flags& f) {
    worker_files out;
    if (!f.script_path.empty()) {
        auto parsed = providers::parse_script(read_file(f.script_path));
        if (!parsed) {
            throw std::invalid_argument("bad script " + f.script_path + ": " +
                                        parsed.error().message());
        }
        out.script = std::move(*parsed);
    }
    if (!f.providers_path.empty()) {
        auto env = [](std::string_view name) -> std::optional<std::string> {
            const char* v = std::getenv(std::string(name).c_str());
            return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
        };
        auto file = [](std::string_view path) -> std::optional<std::string> {
            std::ifstream in{std::string(path)};
            if (!in) {
                return std::nullopt;
            }
            std::stringstream ss;
            ss << in.rdbuf();
            return ss.str();
        };
        const auto text = read_file(f.providers_path);
        auto parsed = providers::parse_providers(text, env, file);
        if (!parsed) {
            throw std::invalid_argument("bad providers file " + f.providers_path + ": " +
                                        parsed.error());
        }
        out.endpoints = std::move(*parsed);
        auto priced = providers::parse_prices(text);
        if (!priced) {
            throw std::invalid_argument("bad providers file " + f.providers_path + ": " +
                                        priced.error());
        }
        out.prices = std::move(*priced);
    }
    if (!f.tenant_budgets_path.empty()) {
        boost::system::error_code ec;
        const auto v = boost::json::parse(read_file(f.tenant_budgets_path), ec);
        auto parsed = ec ? session::decoded<std::map<std::string, session::budget, std::less<>>>(
                               session::decode_error{session::errc::invalid_json, ""})
                         : protocol::decode_tenant_budgets(v);
        if (!parsed || !f.tenancy) {
            throw std::invalid_argument(
                "bad tenant budgets file " + f.tenant_budgets_path + ": " +
                (!f.tenancy ? std::string("it needs --tenancy") : parsed.error().message()));
        }
        out.tenant_budgets = std::move(*parsed);
    }
    if (!f.tools_path.empty()) {
        const auto text = read_file(f.tools_path);  // read once: one version of the file
        auto parsed = tools::parse_tools(text);
        if (!parsed) {
            throw std::invalid_argument("bad tools file " + f.tools_path + ": " + parsed.error());
        }
        out.tool_services = std::move(*parsed);
        out.tool_approvals = std::move(*tools::parse_approvals(text));
        auto servers = mcp::parse_servers(text, f.tenancy);
        if (!servers) {
            throw std::invalid_argument("bad tools file " + f.tools_path + ": " + servers.error());
        }
        out.mcp_servers = std::move(*servers);
    }
    return out;
}

storage::pg_timeouts pg_timeouts_of(const worker_flags& f) {
    storage::pg_timeouts t;
    t.statement = std::chrono::milliseconds(f.pg_statement_ms);
    t.lock = std::chrono::milliseconds(f.pg_lock_ms);
    t.idle_in_transaction = std::chrono::milliseconds(f.pg_idle_ms);
    return t;
}

node_options node_options_of(const worker_flags& f, const worker_files& files) {
    if (f.lanes.max_bytes > 0 && f.lanes.max_bytes < f.max_content) {
        throw std::invalid_argument("--lane-max-bytes (" + std::to_string(f.lanes.max_bytes) +
                                    ") must be 0 or at least --max-content-bytes (" +
                                    std::to_string(f.max_content) +
                                    "): a message of the largest size must fit an empty lane");
    }
    using ms = std::chrono::milliseconds;
    node_options options;
    options.worker_id = f.worker_id;
    options.server.prefix = f.prefix;
    options.server.tenancy = protocol::tenancy{f.tenancy, f.default_tenant};
    options.lease = lease_settings_of(f.lease_ttl_ms, f.renew_ms, f.stop_margin_ms);
    options.passivate_after = ms(f.passivate_after_ms);
    options.max_loaded_sessions = f.max_loaded;
    options.sweep_batch = f.sweep_batch;
    options.server.max_in_flight = f.max_in_flight;
    options.server.retry_after = ms(f.retry_after_ms);
    options.server.limits.max_content_bytes = f.max_content;
    options.server.tenants = f.tenants;
    // A session's requests at the door: its waiting commands, and as many reads.
    options.server.max_per_session = 2 * f.max_waiting_commands;
    auto& l = options.loop;
    l.lanes = f.lanes;
    l.max_waiting_commands = f.max_waiting_commands;
    l.max_entry_bytes = f.max_entry;
    l.inference = {ms(f.inference_first_byte_ms), ms(f.inference_idle_ms),
                   ms(f.inference_total_ms)};
    l.summary = {ms(f.summary_first_byte_ms), ms(f.summary_idle_ms), ms(f.summary_total_ms)};
    l.tool_timeout = ms(f.tool_timeout_ms);
    l.retry.base = ms(f.retry_base_ms);
    l.retry.cap = ms(f.retry_cap_ms);
    l.retry.max_server_wait = ms(f.retry_server_wait_ms);
    l.retry.max_attempts = f.retry_max_attempts;
    if (l.tool_timeout.count() == 0) {
        l.tool_timeout = ms(7 * 86400000L);  // "no limit": a week
    }
    l.budget = f.budget;
    l.budget.cost = static_cast<std::uint64_t>(std::llround(f.budget_cost_usd * 1e9));
    l.tenant_budgets = files.tenant_budgets;
    options.inferences = f.inferences;
    options.store_threads = f.store_threads;
    options.endpoints = files.endpoints;
    options.prices = files.prices;
    options.tool_services = files.tool_services;
    options.tool_approvals = files.tool_approvals;
    options.mcp_servers = files.mcp_servers;
    options.metrics_addr = f.metrics_addr == "off" ? std::string() : f.metrics_addr;
    options.metrics_max_connections = f.metrics_max_connections;
    options.console = f.console;
    options.metrics_addr_is_default = !f.metrics_addr_given;
    return options;
}

}  // namespace wuhu::app
