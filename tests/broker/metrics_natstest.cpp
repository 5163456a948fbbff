// The metrics' watchdog (app/watchdog.cpp): a session in one loop state longer than that state's
// timeout is counted in wuhu_loop_stuck_sessions and logged once; it is no longer counted once
// it moves on. A worker in-process against a real nats-server (scripts/test starts it).
#include "app/watchdog.hpp"
#include "console/console.hpp"
#include "metrics/http_endpoint.hpp"
#include "storage/memory_store.hpp"
#include "tests/broker/worker_node.hpp"
#include "tests/support/env.hpp"
#include "tests/support/http_get.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <sstream>
#include <thread>

namespace wuhu::testing {

using namespace std::chrono_literals;

namespace {

// The value of wuhu_loop_stuck_sessions in a scrape of `address` (-1: no answer).
double stuck_sessions(const std::string& address) {
    return metric_value(http_get(address, "/metrics").body, "wuhu_loop_stuck_sessions");
}

}  // namespace

TEST(MetricsWatchdog, ASessionPastItsStatesTimeoutIsCountedAndLoggedOnce) {
    temp_dir dir;
    auto said = std::make_shared<std::ostringstream>();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*said);
    auto log = std::make_shared<spdlog::logger>("watchdog", sink);
    node_options o{nats_url(), "wd" + std::to_string(getpid()), dir.path(), "w1",
                   // Every attempt outlasts the inference timeout: the loop retries, inferring
                   // all along, until it gives up.
                   R"({"responses":[{"text":"late","delay_ms":5000}]})"};
    worker::loop_options loop;
    loop.inference.total = 300ms;
    loop.retry.max_attempts = 4;
    o.loop = loop;
    o.metrics_addr = "127.0.0.1:0";
    o.log = log;
    worker_node w(std::move(o));
    const auto at = w.node().metrics_address();
    nats::connection nc(nats_url(), "watchdog-client");
    auto r = nc.request("wd" + std::to_string(getpid()) + ".session.slow.enqueue",
                        R"({"lane":"followUp","content":"go"})", 10s);
    ASSERT_TRUE(r && r->find("\"ok\":true") != std::string::npos) << (r ? *r : "no reply");
    bool counted = false;
    for (int i = 0; i < 100 && !counted; ++i) {
        counted = stuck_sessions(at) == 1;
        std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(counted) << "the stuck session is counted";
    bool released = false;
    for (int i = 0; i < 300 && !released; ++i) {
        released = stuck_sessions(at) == 0;
        std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(released) << "once it gave up (idle), it is not counted any more";
    log->flush();
    const std::string text = said->str();
    const std::string line = "session slow has been inferring for";
    ASSERT_NE(text.find(line), std::string::npos) << text;
    EXPECT_EQ(text.find(line, text.find(line) + 1), std::string::npos) << "logged once: " << text;
}

namespace asio = boost::asio;

namespace {

// Loads `id` in `r` (its loop starts) and keeps the handle in `out`.
asio::awaitable<void> load_into(worker::session_registry& r, session::session_id id,
                                std::optional<worker::session_registry::handle>& out) {
    auto got = co_await r.get(id, session::lease_epoch{1});
    if (got) {
        out = *got;
    }
}

}  // namespace

// Defect (session 47's review): a loop retired while busy (its session unloaded in the middle of
// a turn) sends no idle event, and one reloaded within a second, idle, left the old loop's busy
// record: the session counted as stuck until it next went idle. A count drops a record whose
// session's loop is idle now.
TEST(MetricsWatchdog, TheBusyRecordOfARetiredLoopIsDroppedWhenTheLoopLoadedNowIsIdle) {
    asio::io_context io;
    storage::memory_store store;
    tools::tool_registry tools;
    runtime::manual_clock clk{session::unix_ms{1'000'000}};
    worker::loop_options limits;
    limits.inference.total = 1ms;
    const auto script = providers::parse_script(R"({"responses":[]})").value();
    worker::session_registry registry(
        io.get_executor(), store,
        [&] { return std::make_unique<providers::scripted_provider>(script, clk); }, tools, clk,
        limits, [](const session::session_id&, const worker::loop_event&) {});
    const auto id = session::session_id::parse("s1").value();
    std::optional<worker::session_registry::handle> loaded;
    asio::co_spawn(io, load_into(registry, id, loaded), asio::detached);
    for (int i = 0; i < 1000 && !loaded; ++i) {
        io.poll();
        io.restart();
    }
    ASSERT_TRUE(loaded.has_value());
    ASSERT_EQ((*loaded)->current(), session::loop_state::idle);
    const bool stopping = false;
    app::watchdog dog(registry, limits, spdlog::null_logger_mt("watchdog-retired"), stopping);
    // What the retired loop said last: it began inferring (the loop now loaded is idle).
    dog.observe(id,
                worker::state_event{session::loop_state::idle, session::loop_state::inferring, {}});
    std::this_thread::sleep_for(5ms);  // past the inference's 1 ms limit
    EXPECT_EQ(dog.stuck(false), 0u);
    loaded.reset();
    registry.stop();
    for (int i = 0; i < 100; ++i) {
        io.poll();
        io.restart();
    }
}

}  // namespace wuhu::testing

namespace wuhu::testing {


// Bounds (issue 30): the metrics port holds at most its cap of connections; one past it is
// closed at once, and once the idle ones go, scrapes are served again.
TEST(MetricsEndpoint, ConnectionsPastTheCapAreClosedAtOnce) {
    metrics::http_endpoint http("127.0.0.1:0",
                                {[] { return std::string("up 1\n"); }, [](auto) { return true; },
                                 [] { return std::optional<std::string>(); }},
                                2);
    const auto at = http.address();
    // Two clients that connect and send nothing.
    const int a = connect_local(at);
    const int b = connect_local(at);
    ASSERT_GE(a, 0);
    ASSERT_GE(b, 0);
    // Accepted in the order they came: the two idle ones first, then this one.
    EXPECT_EQ(http_get(at, "/metrics").status, 0) << "a third connection was served";
    EXPECT_EQ(http.turned_away(), 1u);
    const int c = connect_local(at);
    char byte = 0;
    EXPECT_EQ(recv(c, &byte, 1, 0), 0) << "closed at once, without waiting for its request";
    close(c);
    close(a);
    close(b);
    auto served = http_get(at, "/metrics");
    for (int i = 0; i < 100 && served.status == 0; ++i) {
        std::this_thread::sleep_for(10ms);  // the endpoint sees the idle ones go
        served = http_get(at, "/metrics");
    }
    EXPECT_EQ(served.status, 200);
    EXPECT_EQ(served.body, "up 1\n");
}

}  // namespace wuhu::testing

namespace wuhu::testing {

// Issue 31 ("never tested"): /healthz answers 503 while the worker's executor is stuck, and 200
// once it turns again; /readyz answers 503 while the session store does not answer, and 200
// once it does; and the series of lane depths, command durations and lease renewals move.
TEST(MetricsHealth, HealthzSeesAStuckExecutorAndReadyzAStoreThatDoesNotAnswer) {
    temp_dir dir;
    const std::string prefix = "hz" + std::to_string(getpid());
    node_options o{nats_url(), prefix, dir.path(), "w1", R"({"responses":[{"text":"ok"}]})"};
    o.metrics_addr = "127.0.0.1:0";
    worker_node w(std::move(o));
    const auto at = w.node().metrics_address();
    EXPECT_EQ(http_get(at, "/healthz").status, 200);
    // Stuck: the executor runs one handler for 2.5 s.
    std::atomic<bool> stuck{false};
    boost::asio::post(w.node().executor(), [&stuck] {
        stuck = true;
        std::this_thread::sleep_for(2500ms);
    });
    while (!stuck) {
        std::this_thread::sleep_for(5ms);
    }
    const auto while_stuck = http_get(at, "/healthz");
    EXPECT_EQ(while_stuck.status, 503) << while_stuck.body;
    EXPECT_NE(while_stuck.body.find("did not turn within 1 s"), std::string::npos);
    bool alive = false;
    for (int i = 0; i < 100 && !alive; ++i) {
        alive = http_get(at, "/healthz").status == 200;
        std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(alive) << "healthy again once the executor turns";

    nats::connection nc(nats_url(), "health-client");
    auto send = [&](const std::string& verb, const std::string& body) {
        auto r = nc.request(prefix + ".session.h1." + verb, body, 10s);
        return r ? boost::json::parse(*r) : boost::json::value();
    };
    ASSERT_EQ(send("pause", "{}").as_object().contains("error"), true) << "no session yet";
    ASSERT_EQ(send("configure", "{}").at("ok"), true);
    ASSERT_EQ(send("pause", "{}").at("ok"), true);
    ASSERT_EQ(send("enqueue", R"({"lane":"followUp","id":"f1","content":"held"})").at("ok"), true);
    auto scrape = http_get(at, "/metrics").body;
    EXPECT_EQ(metric_value(scrape, R"(wuhu_lane_depth{lane="followUp"})"), 1) << "paused: queued";
    EXPECT_EQ(metric_value(scrape, R"(wuhu_lane_depth{lane="steer"})"), 0);
    EXPECT_GE(metric_value(scrape, R"(wuhu_command_duration_seconds_count{verb="enqueue"})"), 1)
        << scrape;
    EXPECT_EQ(metric_value(scrape, R"(wuhu_publish_failures_total)"), 0);

    // The store does not answer: the next commit fails (unavailable), and /readyz says so.
    EXPECT_EQ(http_get(at, "/readyz").status, 200);
    w.store().fail_next_commits(1);
    EXPECT_EQ(send("enqueue", R"({"lane":"followUp","id":"f2","content":"lost"})")
                  .at("error")
                  .at("code"),
              "unavailable");
    const auto unready = http_get(at, "/readyz");
    EXPECT_EQ(unready.status, 503) << unready.body;
    EXPECT_NE(unready.body.find("the session store does not answer"), std::string::npos)
        << unready.body;
    boost::json::value back;
    for (int i = 0; i < 100; ++i) {
        back = send("enqueue", R"({"lane":"followUp","id":"f3","content":"again"})");
        if (back.as_object().contains("ok")) {
            break;
        }
        std::this_thread::sleep_for(50ms);
    }
    ASSERT_EQ(back.at("ok"), true) << back;
    EXPECT_EQ(http_get(at, "/readyz").status, 200) << "ready once the store answers";
    ASSERT_EQ(send("resume", "{}").at("ok"), true);
    bool drained = false;
    for (int i = 0; i < 100 && !drained; ++i) {
        drained = metric_value(http_get(at, "/metrics").body,
                               R"(wuhu_lane_depth{lane="followUp"})") == 0;
        std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(drained) << "resumed: the lane was drained";
}

}  // namespace wuhu::testing

namespace wuhu::testing {

// Issue 35: the web console's files on the worker's HTTP port, under a content security
// policy; nothing outside the table of embedded files is served; off, every path 404s.
TEST(MetricsEndpoint, TheConsolesFilesAreServedUnderAPolicyAndNothingElse) {
    metrics::endpoint_handlers handlers{[] { return std::string("up 1\n"); },
                                        [](auto) { return true; },
                                        [] { return std::optional<std::string>(); }};
    handlers.files = [](std::string_view path) -> std::optional<metrics::static_file> {
        const auto f = console::find(path);
        if (!f) {
            return std::nullopt;
        }
        return metrics::static_file{f->content_type, f->body, console::content_security_policy};
    };
    metrics::http_endpoint http("127.0.0.1:0", handlers);
    const auto at = http.address();

    const auto page = http_get(at, "/console/");
    EXPECT_EQ(page.status, 200);
    EXPECT_NE(page.body.find("<title>Wuhu console</title>"), std::string::npos) << page.body;
    EXPECT_NE(page.headers.find("Content-Type: text/html; charset=utf-8"), std::string::npos)
        << page.headers;
    EXPECT_NE(page.headers.find("Content-Security-Policy: default-src 'self'; script-src 'self'"),
              std::string::npos)
        << page.headers;
    EXPECT_NE(page.headers.find("X-Content-Type-Options: nosniff"), std::string::npos);
    EXPECT_EQ(http_get(at, "/console/index.html").body, page.body);

    const auto app = http_get(at, "/console/app.js");
    EXPECT_EQ(app.status, 200);
    EXPECT_NE(app.headers.find("Content-Type: text/javascript"), std::string::npos);
    const auto client = http_get(at, "/console/vendor/nats.js");
    EXPECT_EQ(client.status, 200);
    EXPECT_GT(client.body.size(), 300000u) << "the vendored NATS client, whole";
    EXPECT_EQ(http_get(at, "/console/vendor/nats.ws.LICENSE").status, 200);

    const auto bare = http_get(at, "/console?nats=ws://127.0.0.1:4223");
    EXPECT_EQ(bare.status, 301);
    EXPECT_NE(bare.headers.find("Location: /console/?nats=ws://127.0.0.1:4223"), std::string::npos)
        << bare.headers;
    for (const char* path : {"/console/nothing.js", "/console/../metrics", "/console/vendor/",
                             "/console/%2e%2e/app.js", "/console//app.js", "/consolex"}) {
        EXPECT_EQ(http_get(at, path).status, 404) << path;
    }
    EXPECT_EQ(http_get(at, "/metrics").body, "up 1\n");

    // HEAD: the headers a GET gets, its length included, and no body.
    const int fd = connect_local(at);
    ASSERT_GE(fd, 0);
    const std::string head =
        "HEAD /console/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(head.size()));
    std::string headers;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
        headers.append(buf, static_cast<std::size_t>(n));
    }
    close(fd);
    EXPECT_NE(headers.find("Content-Length: " + std::to_string(app.body.size()) + "\r\n"),
              std::string::npos)
        << headers;
    EXPECT_TRUE(headers.ends_with("\r\n\r\n")) << "no body: " << headers;

    handlers.files = {};
    metrics::http_endpoint off("127.0.0.1:0", handlers);
    EXPECT_EQ(http_get(off.address(), "/console/").status, 404);
    EXPECT_EQ(http_get(off.address(), "/console").status, 404);
}

}  // namespace wuhu::testing
