// Issue 15: a wuhu-worker process serves /metrics, /healthz and /readyz on one port. Scraped
// during a scripted session, the output passes `promtool check metrics`, and the loop-state
// gauges follow the session (inferring, executing_tools, idle; the brief preparing and
// compacting show in the transitions); /readyz turns unready when nats-server stops and ready
// again when it is back.
#include "tests/support/http_get.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// Where the worker serves its metrics, from its log line.
std::string metrics_address(const worker_process& w) {
    const std::regex at(R"(metrics on http://([0-9.]+:[0-9]+)/metrics)");
    for (int i = 0; i < 100; ++i) {
        std::ifstream f(w.log());
        const std::string text((std::istreambuf_iterator<char>(f)),
                               std::istreambuf_iterator<char>());
        std::smatch m;
        if (std::regex_search(text, m, at)) {
            return m[1];
        }
        std::this_thread::sleep_for(100ms);
    }
    ADD_FAILURE() << "the worker logged no metrics address";
    return "127.0.0.1:1";
}

}  // namespace

TEST(Metrics, AScrapeDuringASessionPassesPromtoolAndTheStateGaugesFollowTheSession) {
    const std::string pad(120, '.');
    // Issue 33: the scripted model priced at $2 input, $10 output per million tokens.
    temp_dir files;
    const auto providers = files.path() / "providers.json";
    std::ofstream(providers) << R"({"endpoints": {}, "prices": {"scripted": {"input": 2, )"
                             << R"("output": 10}}})";
    worker_process::config c;
    c.args = {"--providers", providers.string()};
    worker_process w("metrics", R"({"responses":[
        {"text":"r0 )" + pad + R"(","delay_ms":1200,
         "tool_calls":[{"name":"sleep","arguments":{"ms":600}},
                       {"name":"sleep","arguments":{"ms":600}}],
         "usage":{"input":950,"cached_input":10,"output":30}},
        {"text":"r1","usage":{"input":400,"output":5}}],
        "summaries":["S1"]})",
                     c);
    w.start();
    const auto at = metrics_address(w);
    nats::connection nc(nats_url(), "metrics-client");
    const std::string s = w.prefix() + ".session.m1.";
    ASSERT_EQ(answer_when_up(nc, s + "configure",
                             R"({"context_limit":1000,"compaction_buffer":100,)"
                             R"("keep_recent_tokens":20})")
                  .at("ok"),
              true);
    ASSERT_EQ(answer_when_up(nc, s + "enqueue",
                             R"({"lane":"followUp","content":")" + std::string(200, 'a') + "\"}")
                  .at("ok"),
              true);
    // Scrape while the session runs: which loop states did the gauges show?
    std::set<std::string> seen;
    const std::vector<std::string> states = {"idle", "preparing", "inferring", "executing_tools",
                                             "compacting"};
    std::string scrape;
    for (int i = 0; i < 400; ++i) {
        auto m = http_get(at, "/metrics");
        ASSERT_EQ(m.status, 200);
        scrape = m.body;
        for (const auto& st : states) {
            if (metric_value(scrape, "wuhu_loop_sessions{state=\"" + st + "\"}") == 1) {
                seen.insert(st);
            }
        }
        if (seen.contains("executing_tools") &&
            metric_value(scrape, "wuhu_loop_sessions{state=\"idle\"}") == 1) {
            break;  // idle again after the tool
        }
        std::this_thread::sleep_for(25ms);
    }
    EXPECT_TRUE(seen.contains("inferring"));
    EXPECT_TRUE(seen.contains("executing_tools"));
    EXPECT_TRUE(seen.contains("idle"));
    ASSERT_TRUE(wait_idle(nc, s + "subscribe"));
    scrape = http_get(at, "/metrics").body;
    EXPECT_EQ(metric_value(scrape, "wuhu_sessions_loaded"), 1);
    EXPECT_EQ(metric_value(scrape, R"(wuhu_loop_sessions{state="idle"})"), 1);
    for (const auto& st : {"preparing", "inferring", "executing_tools", "compacting"}) {
        EXPECT_EQ(metric_value(scrape, "wuhu_loop_sessions{state=\"" + std::string(st) + "\"}"), 0)
            << st;
    }
    // The brief states show in the transitions.
    EXPECT_GE(metric_value(scrape, R"(wuhu_loop_transitions_total{from="idle",to="preparing"})"),
              1);
    double to_compacting = 0;
    for (const auto& from : states) {
        to_compacting =
            std::max(to_compacting, metric_value(scrape, "wuhu_loop_transitions_total{from=\"" +
                                                             from + "\",to=\"compacting\"}"));
    }
    EXPECT_GE(to_compacting, 1) << scrape;
    EXPECT_GE(metric_value(scrape, "wuhu_compactions_total"), 1);
    EXPECT_GE(metric_value(scrape, R"(wuhu_commands_total{result="ok",verb="enqueue"})"), 1)
        << scrape;
    EXPECT_GE(metric_value(scrape, R"(wuhu_commands_total{result="ok",verb="configure"})"), 1);
    // The two answers', and the compaction summary's (the scripted model estimates it: 60 tokens
    // of segment in, 1 out).
    EXPECT_EQ(metric_value(scrape, R"(wuhu_inference_tokens_total{kind="input",model="scripted"})"),
              950 + 400 + 60);
    EXPECT_EQ(
        metric_value(scrape, R"(wuhu_inference_tokens_total{kind="output",model="scripted"})"),
        30 + 5 + 1);
    // (950 + 400 + 60) * $2 + (30 + 5 + 1) * $10 per million tokens.
    EXPECT_NEAR(metric_value(scrape, R"(wuhu_cost_total{model="scripted"})"), 0.00318, 1e-12);
    // The session's ledger, in its status register.
    const auto st = answer_when_up(nc, s + "subscribe", "{}");
    const auto& usage = st.at("status").at("usage");
    EXPECT_EQ(usage.at("cost").to_number<std::uint64_t>(), 3'180'000u) << st;
    EXPECT_EQ(usage.at("turns").to_number<std::uint64_t>(), 2u);
    EXPECT_EQ(usage.at("tool_calls").to_number<std::uint64_t>(), 2u);
    EXPECT_EQ(usage.at("input").to_number<std::uint64_t>(), 1410u);
    // Issue 31, defect 8: each call of a response with several (the fused commit starts them
    // all at once: only the first was counted).
    EXPECT_EQ(metric_value(scrape, R"(wuhu_tool_duration_seconds_count{tool="sleep"})"), 2);
    EXPECT_GE(metric_value(scrape, R"(wuhu_tool_duration_seconds_sum{tool="sleep"})"), 1.15);
    EXPECT_GE(metric_value(scrape, R"(wuhu_inference_duration_seconds_count)"), 2);
    EXPECT_GE(metric_value(scrape, R"(wuhu_store_commit_duration_seconds_count{backend="sqlite"})"),
              5);
    EXPECT_GE(metric_value(scrape, R"(wuhu_lease_events_total{event="acquired"})"), 1);
    EXPECT_EQ(metric_value(scrape, "wuhu_leases_held"), 1);
    EXPECT_GE(metric_value(scrape, R"(wuhu_events_published_total{kind="patch"})"), 1);
    EXPECT_EQ(metric_value(scrape, "wuhu_loop_stuck_sessions"), 0);
    EXPECT_EQ(metric_value(scrape, "wuhu_store_index_write_failures_total"), 0);
    EXPECT_EQ(scrape.find("m1"), std::string::npos) << "no session id is a label";
    // promtool (Debian's prometheus package) accepts the exposition.
    temp_dir dir;
    const auto file = dir.path() / "scrape.txt";
    std::ofstream(file) << scrape;
    const int rc = std::system(("promtool check metrics < " + file.string() + " > " +
                                (dir.path() / "promtool.out").string() + " 2>&1")
                                   .c_str());
    std::ifstream said(dir.path() / "promtool.out");
    EXPECT_EQ(rc, 0) << std::string((std::istreambuf_iterator<char>(said)),
                                    std::istreambuf_iterator<char>());
    EXPECT_EQ(http_get(at, "/healthz").status, 200);
    auto ready = http_get(at, "/readyz");
    EXPECT_EQ(ready.status, 200) << ready.body;
    EXPECT_EQ(http_get(at, "/nothing").status, 404);
    EXPECT_EQ(w.stop(), 0);
}

TEST(Metrics, ReadyzIsUnreadyWhileNatsIsDownAndReadyWhenItIsBack) {
    own_nats server;
    ASSERT_TRUE(server.up());
    worker_process w("readyz", R"({"responses":[]})");
    w.start(server.url());
    const auto at = metrics_address(w);
    auto ready_is = [&](int status) {
        for (int i = 0; i < 100; ++i) {
            if (http_get(at, "/readyz").status == status) {
                return true;
            }
            std::this_thread::sleep_for(100ms);
        }
        return false;
    };
    EXPECT_TRUE(ready_is(200));
    server.stop();
    EXPECT_TRUE(ready_is(503));
    EXPECT_NE(http_get(at, "/readyz").body.find("not connected to NATS"), std::string::npos);
    EXPECT_EQ(http_get(at, "/healthz").status, 200) << "alive all the same";
    ASSERT_TRUE(server.start());
    EXPECT_TRUE(ready_is(200));
    EXPECT_EQ(w.stop(), 0);
}

}  // namespace wuhu::testing
