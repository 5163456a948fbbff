// wuhu-worker: runs durable agent sessions behind NATS.
//
//   wuhu-worker --nats nats://127.0.0.1:4222 --store sqlite:///var/lib/wuhu --script demo.json
//
// Every flag has a WUHU_* environment variable (flags win). Logs are JSON lines on stderr.
// SIGTERM or SIGINT: stop taking requests, stop every session loop, release the leases, exit 0.
#include "broker/server.hpp"
#include "ownership/memory_lease.hpp"
#include "ownership/sqlite_lease.hpp"
#include "storage/postgres_store.hpp"
#include "storage/sqlite_store.hpp"
#include "worker/scripted_provider.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fstream>
#include <sstream>

namespace {

namespace asio = boost::asio;
namespace s = wuhu::session;

std::string env_or(const char* name, std::string fallback) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

// The SQLite data directory of a sqlite:// store URL, or empty.
std::string sqlite_dir(const std::string& url) {
    const std::string sqlite = "sqlite://";
    return url.rfind(sqlite, 0) == 0 ? url.substr(sqlite.size()) : std::string();
}

std::unique_ptr<wuhu::storage::session_store> open_store(const std::string& url, std::size_t pool) {
    if (auto dir = sqlite_dir(url); !dir.empty()) {
        return std::make_unique<wuhu::storage::sqlite_store>(wuhu::storage::sqlite_options{dir});
    }
    if (url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0) {
        wuhu::storage::postgres_options o;
        o.dsn = url;
        o.pool_size = pool;
        return std::make_unique<wuhu::storage::postgres_store>(o);
    }
    throw std::invalid_argument("--store must be sqlite:///<dir> or postgresql://...");
}

// `auto` (`sqlite` with a SQLite store, `memory` otherwise), `sqlite` (the catalog of the
// SQLite store's data directory), `sqlite://<dir>`, or `memory` (one worker only: nothing is
// shared; the PostgreSQL lease arrives with the ownership work).
std::unique_ptr<wuhu::ownership::lease_store> open_leases(const std::string& lease,
                                                          const std::string& store_url) {
    if (lease == "auto") {
        return open_leases(sqlite_dir(store_url).empty() ? "memory" : "sqlite", store_url);
    }
    if (lease == "memory") {
        return std::make_unique<wuhu::ownership::memory_lease>();
    }
    std::string dir = lease == "sqlite" ? sqlite_dir(store_url) : sqlite_dir(lease);
    if (dir.empty()) {
        throw std::invalid_argument(
            "--lease must be sqlite (with a sqlite:// store), sqlite:///<dir> or memory");
    }
    return std::make_unique<wuhu::ownership::sqlite_lease>(dir);
}

// Renews this worker's leases every TTL/3; a session whose lease was lost is unloaded at once
// (its store writes would fail on the fence anyway).
asio::awaitable<void> keep_leases(wuhu::ownership::keeper& keeper,
                                  wuhu::worker::session_registry& registry,
                                  std::shared_ptr<spdlog::logger> log) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
        timer.expires_after(keeper.ttl() / 3);
        co_await timer.async_wait(asio::use_awaitable);
        auto lost = keeper.renew();
        if (!lost) {
            log->error("lease renewal failed: {}", lost.error().message());
            continue;
        }
        for (const auto& sid : *lost) {
            log->warn("lease of session {} lost: unloading it", sid.str());
            registry.unload(sid);
        }
    }
}

// Lets the cancelled session loops unwind (at most 10 s), releases the leases so that other
// workers take the sessions at once, then stops the io_context.
asio::awaitable<void> drain_then_stop(wuhu::worker::session_registry& registry,
                                      wuhu::ownership::keeper& keeper, asio::io_context& io) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (registry.running() > 0 && std::chrono::steady_clock::now() < deadline) {
        timer.expires_after(std::chrono::milliseconds(10));
        co_await timer.async_wait(asio::use_awaitable);
    }
    keeper.release_all();
    io.stop();
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
    std::string nats_url = env_or("WUHU_NATS_URL", "nats://127.0.0.1:4222");
    std::string store_url = env_or("WUHU_STORE", "sqlite://./wuhu-data");
    std::string script_path = env_or("WUHU_SCRIPT", "");
    std::string prefix = env_or("WUHU_PREFIX", "wuhu");
    std::string worker_id = env_or("WUHU_WORKER_ID", "worker-" + std::to_string(getpid()));
    std::size_t pool = std::stoul(env_or("WUHU_PG_POOL", "8"));
    std::string lease = env_or("WUHU_LEASE", "auto");
    long lease_ttl_ms = std::stol(env_or("WUHU_LEASE_TTL_MS", "15000"));
    std::size_t store_threads = std::stoul(env_or("WUHU_STORE_THREADS", "4"));
    app.add_option("--nats", nats_url, "NATS URL (WUHU_NATS_URL)");
    app.add_option("--store", store_url, "sqlite:///<data-dir> or postgresql://... (WUHU_STORE)");
    app.add_option("--script", script_path,
                   "scripted provider script, see docs/scripted-provider.md (WUHU_SCRIPT)");
    app.add_option("--prefix", prefix, "subject prefix (WUHU_PREFIX)");
    app.add_option("--worker-id", worker_id, "this worker's id (WUHU_WORKER_ID)");
    app.add_option("--pg-pool", pool, "PostgreSQL connections (WUHU_PG_POOL)");
    app.add_option("--lease", lease,
                   "lease backend: auto, sqlite (the SQLite store's catalog), sqlite:///<dir>, "
                   "or memory (a single worker) (WUHU_LEASE)");
    app.add_option("--store-threads", store_threads,
                   "threads that run the sessions' store IO (WUHU_STORE_THREADS)")
        ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
    app.add_option("--lease-ttl-ms", lease_ttl_ms, "lease time to live (WUHU_LEASE_TTL_MS)")
        ->check(CLI::Range(300L, 3600000L));
    CLI11_PARSE(app, argc, argv);

    auto log = spdlog::stderr_logger_mt("wuhu");
    log->set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","worker":")" + worker_id +
                         R"(","msg":"%v"})",
                     spdlog::pattern_time_type::utc);
    try {
        auto script = wuhu::worker::script{};
        if (!script_path.empty()) {
            auto parsed = wuhu::worker::parse_script(read_file(script_path));
            if (!parsed) {
                log->error("bad script {}: {}", script_path, parsed.error().message());
                return 2;
            }
            script = std::move(*parsed);
        }
        auto store = open_store(store_url, pool);
        auto leases = open_leases(lease, store_url);
        wuhu::ownership::keeper keeper(*leases, worker_id, std::chrono::milliseconds(lease_ttl_ms));
        asio::io_context io;
        // Sessions commit here, so one session's fsync does not stall the others.
        asio::thread_pool store_pool(store_threads);
        wuhu::worker::loop_options loop_opts;
        loop_opts.store_executor = store_pool.get_executor();
        wuhu::worker::system_clock clock;
        wuhu::worker::tool_registry tools;
        wuhu::worker::add_builtin_tools(tools);
        wuhu::broker::nats_client nats(nats_url, worker_id);
        wuhu::broker::server_options options;
        options.prefix = prefix;
        wuhu::broker::server server(io.get_executor(), nats, keeper, options);
        wuhu::worker::session_registry registry(
            io.get_executor(), *store,
            [&] { return std::make_unique<wuhu::worker::scripted_provider>(script, clock); }, tools,
            clock, loop_opts, server.epochs(), server.publisher());
        server.start(registry);
        asio::cancellation_signal stop_keeping;
        asio::co_spawn(io, keep_leases(keeper, registry, log),
                       asio::bind_cancellation_slot(stop_keeping.slot(), asio::detached));
        asio::signal_set signals(io, SIGTERM, SIGINT);
        signals.async_wait([&](const boost::system::error_code& ec, int sig) {
            if (ec) {
                return;
            }
            log->info("signal {}: stopping {} sessions", sig, registry.size());
            server.stop();  // new requests go to the other workers
            stop_keeping.emit(asio::cancellation_type::terminal);
            registry.stop();
            asio::co_spawn(io, drain_then_stop(registry, keeper, io), asio::detached);
        });
        log->info("serving {}.session.> on {} with store {} and {} leases (ttl {} ms)", prefix,
                  nats_url, std::string(store->backend()), std::string(leases->backend()),
                  lease_ttl_ms);
        io.run();
        store_pool.join();  // no store operation outlives the sessions
        log->info("stopped ({} requests forwarded to other owners)", server.forwarded());
        return 0;
    } catch (const std::exception& e) {
        log->error("fatal: {}", e.what());
        return 1;
    }
}
