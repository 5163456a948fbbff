// Issue 33: a cost budget, set over NATS, stops a real worker's session within one inference of
// its limit, priced by the providers file; the stop is durable across a SIGKILL of the owner,
// and a configure with a higher budget goes on with the input that waited. And the ledger, on
// each backend, is the sum over the transcript after a SIGKILL in the middle of a retry.
#include "tests/support/pg_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// The session's state from scratch (a subscribe from zero).
json::value state_of(nats::connection& nc, const std::string& s) {
    return answer_when_up(nc, s + "subscribe", "{}");
}

int answers(const json::value& st) {
    int n = 0;
    for (const auto& e : st.at("patch").at("transcript").as_array()) {
        n += e.at("type") == "assistant_message" ? 1 : 0;
    }
    return n;
}

// Waits (bounded) until the session's status says `paused`, or it is idle with nothing to do.
json::value settled(nats::connection& nc, const std::string& s) {
    json::value st;
    for (int i = 0; i < 300; ++i) {
        st = state_of(nc, s);
        const auto& status = st.at("status");
        if (status.at("state") == "idle" &&
            (status.at("paused") == true || status.at("has_work") == false)) {
            return st;
        }
        std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << "the session did not settle: " << st;
    return st;
}

}  // namespace

TEST(BudgetProcess, ACostBudgetStopsWithinOneInferenceSurvivesACrashAndGoesOnWhenRaised) {
    temp_dir files;
    const auto providers = files.path() / "providers.json";
    // $10 per million input tokens: 100,000 tokens are $1 an answer.
    std::ofstream(providers) << R"({"endpoints": {}, "prices": {"scripted": {"input": 10}}})";
    std::string responses;
    for (int i = 1; i <= 5; ++i) {
        responses += std::string(i > 1 ? "," : "") + R"({"text":"a)" + std::to_string(i) +
                     R"(","usage":{"input":100000,"output":0}})";
    }
    worker_process::config c;
    c.args = {"--providers", providers.string()};
    worker_process w("budget", R"({"responses":[)" + responses + "]}", c);
    w.start();
    nats::connection nc(nats_url(), "budget-client");
    const std::string s = w.prefix() + ".session.b1.";
    auto r = answer_when_up(nc, s + "configure", R"({"budget":{"cost_usd":"2.5"}})");
    ASSERT_EQ(r.at("ok"), true) << r;
    EXPECT_EQ(r.at("settings").at("budget").at("cost_usd"), "2.50");
    for (int i = 1; i <= 4; ++i) {
        ASSERT_EQ(answer_when_up(nc, s + "enqueue",
                                 R"({"lane":"followUp","id":"f)" + std::to_string(i) +
                                     R"(","content":"question )" + std::to_string(i) + "\"}")
                      .at("ok"),
                  true);
        settled(nc, s);
    }
    auto st = settled(nc, s);
    // $1, $2, $3: the third crossed $2.50, and no inference ran after it.
    EXPECT_EQ(answers(st), 3) << st;
    EXPECT_EQ(st.at("status").at("paused"), true);
    EXPECT_EQ(st.at("status").at("usage").at("cost").to_number<std::uint64_t>(), 3'000'000'000u);
    const auto& transcript = st.at("patch").at("transcript").as_array();
    EXPECT_EQ(transcript.back().at("type"), "diagnostic");
    EXPECT_EQ(transcript.back().at("code"), "budget_exhausted");
    EXPECT_NE(json::serialize(transcript.back()).find("$2.50 cost"), std::string::npos);

    // The owner dies; the next one finds the session stopped, and its input still queued.
    w.crash();
    w.start();
    st = settled(nc, s);
    EXPECT_EQ(st.at("status").at("paused"), true);
    EXPECT_EQ(answers(st), 3);

    r = answer_when_up(nc, s + "configure", R"({"budget":{"cost_usd":10}})");
    ASSERT_EQ(r.at("ok"), true) << r;
    st = settled(nc, s);
    EXPECT_EQ(st.at("status").at("paused"), false);
    EXPECT_EQ(answers(st), 4) << "the question that waited is answered";
    EXPECT_EQ(st.at("status").at("usage").at("cost").to_number<std::uint64_t>(), 4'000'000'000u);
}

namespace {

// Answers, a compaction's summary, and an attempt the provider billed without an answer (the
// owner is killed in the backoff before its retry; the next owner is billed again): the
// status's totals are the sum over the transcript's entries, and the cost the prices give.
void ledger_survives_a_sigkill(const std::string& store) {
    temp_dir files;
    const auto providers = files.path() / "providers.json";
    // $10 per million input tokens: 10,000 nano-dollars a token.
    std::ofstream(providers) << R"({"endpoints": {}, "prices": {"scripted": {"input": 10}}})";
    worker_process::config c;
    c.store = store;
    c.args = {"--providers", providers.string(),   "--lease-ttl-ms",
              "2000",        "--retry-base-delay", "4000"};
    const std::string pad(120, '.');
    worker_process w("ledger", R"({"responses":[
        {"text":"r0 )" + pad + R"(","usage":{"input":950,"output":30},
         "fail_first":[{"kind":"transient","message":"overloaded","usage":{"input":700}}]},
        {"text":"r1","usage":{"input":400,"output":5}}],
        "summaries":["S1"]})",
                     c);
    w.start();
    nats::connection nc(nats_url(), "ledger-client");
    const std::string s = w.prefix() + ".session.l1.";
    ASSERT_EQ(answer_when_up(nc, s + "configure",
                             R"({"context_limit":1000,"compaction_buffer":100,)"
                             R"("keep_recent_tokens":20})")
                  .at("ok"),
              true);
    ASSERT_EQ(answer_when_up(nc, s + "enqueue",
                             R"({"lane":"followUp","content":")" + std::string(200, 'a') + "\"}")
                  .at("ok"),
              true);
    auto billed = [](const json::value& st) {
        int n = 0;
        for (const auto& e : st.at("patch").at("transcript").as_array()) {
            n += e.at("type") == "diagnostic" && e.at("code") == "billed_attempt" ? 1 : 0;
        }
        return n;
    };
    json::value st;
    for (int i = 0; i < 200 && billed(st = state_of(nc, s)) == 0; ++i) {
        std::this_thread::sleep_for(10ms);
    }
    ASSERT_EQ(billed(st), 1) << st;
    EXPECT_EQ(answers(st), 0) << "killed in the backoff, before the retry";
    w.crash();
    w.start();
    ASSERT_EQ(answer_when_up(nc, s + "enqueue", R"({"lane":"followUp","content":"more"})").at("ok"),
              true);
    for (int i = 0; i < 400 && answers(st = settled(nc, s)) < 2; ++i) {
        std::this_thread::sleep_for(50ms);
    }
    ASSERT_EQ(answers(st), 2) << st;
    EXPECT_EQ(billed(st), 2) << "the next owner's attempt was billed too";
    std::uint64_t input = 0;
    std::uint64_t output = 0;
    std::uint64_t cost = 0;
    int summaries = 0;
    for (const auto& e : st.at("patch").at("transcript").as_array()) {
        if (const auto* u = e.as_object().if_contains("usage")) {
            input += u->at("input").to_number<std::uint64_t>();
            output += u->at("output").to_number<std::uint64_t>();
            if (const auto* k = e.as_object().if_contains("cost")) {
                cost += k->to_number<std::uint64_t>();
            }
            summaries += e.at("type") == "compaction" ? 1 : 0;
        }
    }
    EXPECT_EQ(summaries, 1) << "the summary's usage is on its entry";
    const auto& usage = st.at("status").at("usage");
    EXPECT_EQ(usage.at("input").to_number<std::uint64_t>(), input) << st;
    EXPECT_GT(input, 700u + 700u + 950u + 400u) << "both billed attempts, answers and the summary";
    EXPECT_EQ(usage.at("output").to_number<std::uint64_t>(), output);
    EXPECT_EQ(usage.at("cost").to_number<std::uint64_t>(), cost);
    EXPECT_EQ(cost, input * 10'000) << "priced by the table";
    EXPECT_EQ(usage.at("turns").to_number<std::uint64_t>(), 2u);
    EXPECT_EQ(w.stop(), 0);
}

}  // namespace

TEST(BudgetProcess, TheLedgerIsTheSumOverTheTranscriptAfterASigkillOnSqlite) {
    temp_dir data;
    ledger_survives_a_sigkill("sqlite://" + (data.path() / "data").string());
}

TEST(BudgetProcess, TheLedgerIsTheSumOverTheTranscriptAfterASigkillOnPostgres) {
    scratch_database db("wuhu_ledger");
    ledger_survives_a_sigkill(db.url());
}

}  // namespace wuhu::testing
