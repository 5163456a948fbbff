// The metrics' watchdog (app/node_metrics.cpp): a session in one loop state longer than that state's
// timeout is counted in wuhu_loop_stuck_sessions and logged once; it is no longer counted once
// it moves on. A worker in-process against a real nats-server (scripts/test starts it).
#include "metrics/http_endpoint.hpp"
#include "tests/broker/worker_node.hpp"
#include "tests/support/env.hpp"
#include "tests/support/http_get.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

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
