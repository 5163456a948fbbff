// wuhu-worker: runs durable agent sessions behind NATS.
//
//   wuhu-worker --nats nats://127.0.0.1:4222 --store sqlite:///var/lib/wuhu --script demo.json
//
// Every flag has a WUHU_* environment variable (flags win). Logs are JSON lines on stderr.
// SIGTERM or SIGINT: stop taking requests, stop every session loop, exit 0.
#include "broker/server.hpp"
#include "storage/postgres_store.hpp"
#include "storage/sqlite_store.hpp"
#include "worker/scripted_provider.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
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

std::unique_ptr<wuhu::storage::session_store> open_store(const std::string& url, std::size_t pool) {
    const std::string sqlite = "sqlite://";
    if (url.rfind(sqlite, 0) == 0) {
        return std::make_unique<wuhu::storage::sqlite_store>(
            wuhu::storage::sqlite_options{url.substr(sqlite.size())});
    }
    if (url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0) {
        wuhu::storage::postgres_options o;
        o.dsn = url;
        o.pool_size = pool;
        return std::make_unique<wuhu::storage::postgres_store>(o);
    }
    throw std::invalid_argument("--store must be sqlite:///<dir> or postgresql://...");
}

// Lets the cancelled session loops unwind (at most 10 s), then stops the io_context.
asio::awaitable<void> drain_then_stop(wuhu::worker::session_registry& registry,
                                      asio::io_context& io) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (registry.running() > 0 && std::chrono::steady_clock::now() < deadline) {
        timer.expires_after(std::chrono::milliseconds(10));
        co_await timer.async_wait(asio::use_awaitable);
    }
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
    app.add_option("--nats", nats_url, "NATS URL (WUHU_NATS_URL)");
    app.add_option("--store", store_url, "sqlite:///<data-dir> or postgresql://... (WUHU_STORE)");
    app.add_option("--script", script_path,
                   "scripted provider script, see docs/scripted-provider.md (WUHU_SCRIPT)");
    app.add_option("--prefix", prefix, "subject prefix (WUHU_PREFIX)");
    app.add_option("--worker-id", worker_id, "this worker's id (WUHU_WORKER_ID)");
    app.add_option("--pg-pool", pool, "PostgreSQL connections (WUHU_PG_POOL)");
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
        asio::io_context io;
        wuhu::worker::system_clock clock;
        wuhu::worker::tool_registry tools;
        wuhu::worker::add_builtin_tools(tools);
        wuhu::broker::nats_client nats(nats_url, worker_id);
        wuhu::broker::server_options options;
        options.prefix = prefix;
        wuhu::broker::server server(io.get_executor(), nats, options);
        // Until the lease arrives, the fencing epoch is the time of the open: a restarted
        // worker always fences out its previous run.
        wuhu::worker::session_registry registry(
            io.get_executor(), *store,
            [&] { return std::make_unique<wuhu::worker::scripted_provider>(script, clock); }, tools,
            clock, wuhu::worker::loop_options{},
            [&](const s::session_id&) {
                return s::lease_epoch{static_cast<std::uint64_t>(clock.now().value)};
            },
            server.publisher());
        server.start(registry);
        asio::signal_set signals(io, SIGTERM, SIGINT);
        signals.async_wait([&](const boost::system::error_code& ec, int sig) {
            if (ec) {
                return;
            }
            log->info("signal {}: stopping {} sessions", sig, registry.size());
            registry.stop();
            asio::co_spawn(io, drain_then_stop(registry, io), asio::detached);
        });
        log->info("serving {}.session.> on {} with store {}", prefix, nats_url,
                  std::string(store->backend()));
        io.run();
        log->info("stopped");
        return 0;
    } catch (const std::exception& e) {
        log->error("fatal: {}", e.what());
        return 1;
    }
}
