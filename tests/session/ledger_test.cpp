// The usage ledger (session/ledger.hpp, issue 33): totals folded from the transcript, prices
// per million tokens in nano-dollars, and the status register that carries the totals.
#include "session/ledger.hpp"
#include "session/codec.hpp"
#include "session/patch.hpp"
#include "session/reducer.hpp"
#include "session/rules.hpp"
#include "session/summary.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>
#include <boost/json.hpp>

namespace wuhu::testing {

namespace json = boost::json;

namespace {

assistant_message priced(const std::string& text, token_usage u, std::uint64_t cost,
                         std::vector<std::pair<std::string, std::string>> calls = {}) {
    auto m = reply(text, std::move(calls));
    m.usage = u;
    m.cost = cost;
    return m;
}

}  // namespace

TEST(Ledger, TotalsAreTheSumOverTheTranscriptOfAnswersAndStartedToolCalls) {
    session_state s = enqueued({}, user_in(lane::follow_up, "f1", "hi"), 1);
    s = drained(s, checkpoint::follow_up, 2);
    const auto first = priced("", token_usage{100, 20, 10, 5, 4}, 1'000, {{"c1", "echo"}});
    apply_actions(plan_append_assistant(s, first, unix_ms{3}).value(), s);
    apply_actions(
        plan_tool_steps(s, {tool_started{call_id("c1"), "echo"}}, false, unix_ms{4}).value(), s);
    apply_actions(plan_tool_steps(s, {result_of("c1", "ok")}, false, unix_ms{5}).value(), s);
    const auto second = priced("done", token_usage{200, 0, 30, 0, 0}, 2'500);
    apply_actions(plan_append_assistant(s, second, unix_ms{6}).value(), s);

    EXPECT_EQ(s.usage, (usage_totals{token_usage{300, 20, 40, 5, 4}, 3'500, 2, 1}));
    // The same as folding the transcript by hand.
    usage_totals folded;
    for (const auto& e : s.transcript) {
        count(folded, e.body);
    }
    EXPECT_EQ(folded, s.usage);
}

TEST(Ledger, AStoreFoldsTheSameTotalsFromTheActionsItCommits) {
    session_state s = enqueued({}, user_in(lane::follow_up, "f1", "hi"), 1);
    s = drained(s, checkpoint::follow_up, 2);
    const auto before = s;
    auto actions =
        plan_append_assistant(s, priced("x", token_usage{7, 0, 3}, 9), unix_ms{3}).value();
    apply_actions(actions, s);
    EXPECT_EQ(counted(before.usage, actions), s.usage);
}

TEST(Ledger, CostIsPricePerMillionTokensOfEachKindRoundedOnce) {
    // $2.50 input, $1.25 cached, $3.75 cache writes, $10 output per million tokens.
    const model_prices p{2'500'000'000, 1'250'000'000, 3'750'000'000, 10'000'000'000};
    EXPECT_EQ(cost_of(token_usage{1'000'000, 0, 0, 0, 0}, p), 2'500'000'000u);
    EXPECT_EQ(cost_of(token_usage{1, 0, 0, 0, 0}, p), 2'500u);  // 2.5 micro-dollars
    EXPECT_EQ(cost_of(token_usage{176, 1024, 5, 0, 0}, p), 440'000u + 1'280'000u + 50'000u);
    EXPECT_EQ(cost_of(token_usage{0, 0, 0, 10, 0}, p), 37'500u);
    // Reasoning tokens are a part of the output: they cost nothing more.
    EXPECT_EQ(cost_of(token_usage{0, 0, 5, 0, 5}, p), cost_of(token_usage{0, 0, 5, 0, 0}, p));
    // $0.075 per million: 75 nano-dollars a token.
    EXPECT_EQ(cost_of(token_usage{6, 0, 0, 0, 0}, model_prices{75'000'000, 0, 0, 0}), 450u);
    // $0.0004 per million: 0.4 nano-dollars a token, rounded once over the sum of the kinds.
    const model_prices cheap{400'000, 400'000, 0, 0};
    EXPECT_EQ(cost_of(token_usage{1, 0, 0, 0, 0}, cheap), 0u);
    EXPECT_EQ(cost_of(token_usage{1, 1, 0, 0, 0}, cheap), 1u);
    EXPECT_EQ(cost_of(token_usage{5, 0, 0, 0, 0}, cheap), 2u);
    // No overflow for a session's worth of tokens at a high price.
    EXPECT_EQ(cost_of(token_usage{0, 0, 4'000'000'000'000, 0, 0}, p), 40'000'000'000'000'000u);
}

TEST(Ledger, DollarsAreWrittenForPeople) {
    EXPECT_EQ(dollars(0), "0.00");
    EXPECT_EQ(dollars(1'500'000'000), "1.50");
    EXPECT_EQ(dollars(3'500), "0.0000035");
    EXPECT_EQ(dollars(12'000'000'001), "12.000000001");
}

TEST(Ledger, TheStatusRegisterCarriesTheTotalsAndACommitThatChangesThemPublishesIt) {
    session_state s = enqueued({}, user_in(lane::follow_up, "f1", "hi"), 1);
    s = drained(s, checkpoint::follow_up, 2);
    const auto from = s.version();
    auto actions =
        plan_append_assistant(s, priced("x", token_usage{7, 0, 3}, 9), unix_ms{3}).value();
    apply_actions(actions, s);
    const auto p = patch_of(from, actions, s, loop_state::inferring);
    ASSERT_TRUE(p.state.has_value()) << "the ledger changed: the status goes with the commit";
    EXPECT_EQ(p.state->usage, s.usage);
    EXPECT_EQ(p.state->usage.turns, 1u);
    // On the wire, and read back.
    const auto v = to_json(*p.state);
    EXPECT_EQ(json::serialize(v.at("usage")),
              R"({"input":7,"cached_input":0,"output":3,"cost":9,"turns":1,"tool_calls":0})");
    EXPECT_EQ(status_from_json(v).value(), *p.state);
    // A status written before issue 33 (no usage) reads as no usage.
    auto old = v.as_object();
    old.erase("usage");
    EXPECT_EQ(status_from_json(old).value().usage, usage_totals{});
}

TEST(Ledger, AnEntryCarriesItsCostAndReasoningTokensOnlyWhenThereAreSome) {
    entry e{entry_seq{1}, unix_ms{2}, priced("hi", token_usage{10, 0, 8, 0, 6}, 77)};
    const auto written = json::serialize(to_json(e));
    EXPECT_NE(written.find(R"("usage":{"input":10,"cached_input":0,"output":8,"reasoning":6})"),
              std::string::npos)
        << written;
    EXPECT_NE(written.find(R"("cost":77)"), std::string::npos) << written;
    EXPECT_EQ(entry_from_json(json::parse(written)).value(), e);
    entry plain{entry_seq{1}, unix_ms{2}, priced("hi", token_usage{10, 0, 8}, 0)};
    const auto w2 = json::serialize(to_json(plain));
    EXPECT_EQ(w2.find("cost"), std::string::npos) << w2;
    EXPECT_EQ(w2.find("reasoning"), std::string::npos) << w2;
    EXPECT_EQ(entry_from_json(json::parse(w2)).value(), plain);
}

// Every inference counts, not only the answers: a compaction's summary and an attempt the
// provider billed without giving an answer (a failure, an abort) add their tokens and cost,
// and neither is a turn. A billed attempt does not end the turn: the loop retries.
TEST(Ledger, SummariesAndBilledAttemptsCountTheirTokensAndCostButNoTurn) {
    session_state s = enqueued({}, user_in(lane::follow_up, "f1", "hi"), 1);
    s = drained(s, checkpoint::follow_up, 2);
    const auto billed = billed_attempt(token_usage{40, 0, 2}, "claude-x", 120, "overloaded");
    EXPECT_EQ(billed.code, "billed_attempt");
    EXPECT_EQ(billed.message,
              "an inference that gave no answer (overloaded) was billed 42 tokens ($0.00000012)");
    apply_actions(plan_append_marker(s, billed, unix_ms{3}), s);
    EXPECT_TRUE(needs_inference(s)) << "the input still awaits its answer";
    EXPECT_TRUE(is_billed_attempt(s.transcript.back().body));
    apply_actions(
        plan_append_assistant(s, priced("a", token_usage{50, 0, 5}, 300), unix_ms{4}).value(), s);
    compaction c{"sum", entry_seq{3}, 90, token_usage{80, 0, 10}, "claude-x", 1'000};
    const auto before = s;
    const auto actions = plan_append_compaction(s, c, unix_ms{5}).value();
    apply_actions(actions, s);
    EXPECT_EQ(counted(before.usage, actions), s.usage) << "a store folds the same";
    EXPECT_EQ(s.usage, (usage_totals{token_usage{170, 0, 17}, 1'420, 1, 0}));
    usage_totals folded;
    for (const auto& e : s.transcript) {
        count(folded, e.body);
    }
    EXPECT_EQ(folded, s.usage);
    EXPECT_TRUE(counts(billed));
    EXPECT_FALSE(counts(diagnostic{"inference_failed", "x"}));
    EXPECT_FALSE(counts(compaction{"old", entry_seq{1}, 5}));
}

TEST(Ledger, ASummarysAndABilledAttemptsUsageIsWrittenOnlyWhenThereIsSome) {
    for (const entry_body& b :
         {entry_body{compaction{"sum", entry_seq{3}, 90, token_usage{80, 1, 10}, "m", 7}},
          entry_body{billed_attempt(token_usage{4, 0, 0}, "m", 0, "aborted")}}) {
        entry e{entry_seq{1}, unix_ms{2}, b};
        const auto written = json::serialize(to_json(e));
        EXPECT_NE(written.find(R"("usage":{"input":)"), std::string::npos) << written;
        EXPECT_NE(written.find(R"("model":"m")"), std::string::npos) << written;
        EXPECT_EQ(entry_from_json(json::parse(written)).value(), e);
    }
    for (const entry_body& b : {entry_body{compaction{"sum", entry_seq{3}, 90}},
                                entry_body{diagnostic{"input_too_large", "too big"}}}) {
        entry e{entry_seq{1}, unix_ms{2}, b};
        const auto written = json::serialize(to_json(e));
        EXPECT_EQ(written.find("usage"), std::string::npos) << written << ": as before";
        EXPECT_EQ(written.find("model"), std::string::npos) << written;
        EXPECT_EQ(entry_from_json(json::parse(written)).value(), e);
    }
}

}  // namespace wuhu::testing
