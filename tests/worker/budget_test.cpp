// Budgets (issue 33, session/settings.hpp `budget`): the loop stops before the inference past a
// limit with a budget_exhausted diagnostic, pauses the session with its queued input kept, and
// goes on when a configure changes the budget; near a limit the model gets one notice.
#include "session/ledger.hpp"
#include "session/loop_policy.hpp"
#include "session/rules.hpp"
#include "tests/worker/loop_harness.hpp"

#include <gmock/gmock.h>

namespace wuhu::testing {

using ::testing::HasSubstr;

namespace {

worker::configure_command with_budget(session::budget b) {
    session::settings_update u;
    u.limits = b;
    return worker::configure_command{u};
}

session::budget turns(std::uint64_t n, std::uint32_t soft_percent = 100) {
    session::budget b;
    b.turns = n;
    b.soft_percent = soft_percent;
    return b;
}

int count_entries(const session_state& s, std::string_view type) {
    int n = 0;
    for (const auto& e : s.transcript) {
        n += type_name(e.body) == type ? 1 : 0;
    }
    return n;
}

const std::string three_answers =
    R"({"responses":[{"text":"a1","usage":{"input":1000,"output":0}},
                     {"text":"a2","usage":{"input":1000,"output":0}},
                     {"text":"a3","usage":{"input":1000,"output":0}},
                     {"text":"a4","usage":{"input":1000,"output":0}},
                     {"text":"a5","usage":{"input":1000,"output":0}},
                     {"text":"a6","usage":{"input":1000,"output":0}}]})";

}  // namespace

TEST(Budget, ABudgetOfNTurnsStopsExactlyBeforeTurnNPlusOneAndKeepsTheQueuedInput) {
    loop_harness h(three_answers);
    h.start();
    ASSERT_TRUE(h.send(with_budget(turns(2))));
    h.follow_up("f1", "one");
    h.settle();
    h.follow_up("f2", "two");
    h.settle();
    h.follow_up("f3", "three");
    h.settle();
    EXPECT_EQ(h.provider().calls(), 2u) << "no third inference";
    EXPECT_EQ(h.state().usage.turns, 2u);
    const auto& last = h.state().transcript.back();
    ASSERT_TRUE(std::holds_alternative<diagnostic>(last.body));
    EXPECT_EQ(std::get<diagnostic>(last.body).code, "budget_exhausted");
    EXPECT_THAT(std::get<diagnostic>(last.body).message, HasSubstr("2 turns"));
    EXPECT_TRUE(h.state().paused);
    EXPECT_TRUE(h.state().has_pending()) << "the third input waits";
    EXPECT_EQ(h.state().in(lane::follow_up).pending.size(), 1u);

    // A higher budget: the session goes on by the normal sequence.
    ASSERT_TRUE(h.send(with_budget(turns(3))));
    h.settle();
    EXPECT_EQ(h.provider().calls(), 3u);
    EXPECT_FALSE(h.state().paused);
    EXPECT_EQ(h.transcript_texts().back(), "assistant:a3");
    EXPECT_EQ(count_entries(h.state(), "assistant_message"), 3);
    EXPECT_FALSE(h.state().has_pending());
    // And the next input stops again, at the new limit, with a new entry.
    h.follow_up("f4", "four");
    h.settle();
    EXPECT_EQ(h.provider().calls(), 3u);
    EXPECT_TRUE(h.state().paused);
    EXPECT_EQ(count_entries(h.state(), "diagnostic"), 2);
}

TEST(Budget, ABudgetSpentMidTurnStopsBeforeTheInferenceAfterTheToolsAndTheTurnGoesOnWhenRaised) {
    loop_harness h(R"({"responses":[
        {"text":"calling","tool_calls":[{"name":"echo","arguments":{"text":"hi"}}]},
        {"text":"done"}]})");
    h.start();
    ASSERT_TRUE(h.send(with_budget(turns(1))));
    h.follow_up("f1", "go");
    h.settle();
    EXPECT_EQ(h.provider().calls(), 1u);
    EXPECT_EQ(h.state().usage.tool_calls, 0u) << "the answer that spent it starts no call";
    EXPECT_TRUE(h.state().paused);
    EXPECT_EQ(h.diagnostic_message().empty(), false);
    ASSERT_TRUE(h.send(with_budget(turns(2))));
    h.settle();
    EXPECT_EQ(h.state().usage.tool_calls, 1u) << "the call ran once raised";
    EXPECT_EQ(h.provider().calls(), 2u);
    EXPECT_EQ(h.transcript_texts().back(), "assistant:done") << "the turn went on";
}

TEST(Budget, AToolCallsBudgetStopsBetweenTheCallsOfOneAnswer) {
    loop_harness h(R"({"responses":[
        {"text":"calling","tool_calls":[{"name":"echo","arguments":{"text":"1"}},
                                        {"name":"echo","arguments":{"text":"2"}},
                                        {"name":"echo","arguments":{"text":"3"}}]},
        {"text":"done"}]})");
    h.start();
    budget b;
    b.tool_calls = 2;
    b.soft_percent = 100;
    ASSERT_TRUE(h.send(with_budget(b)));
    h.follow_up("f1", "go");
    h.settle();
    EXPECT_EQ(h.state().usage.tool_calls, 2u) << "exactly its limit";
    EXPECT_TRUE(h.state().paused);
    EXPECT_EQ(h.transcript_texts().back(), "diagnostic:budget_exhausted");
    EXPECT_EQ(h.provider().calls(), 1u);
    b.tool_calls = 4;  // 3 would stop again before the inference: that many are used
    ASSERT_TRUE(h.send(with_budget(b)));
    h.settle();
    EXPECT_EQ(h.state().usage.tool_calls, 3u);
    EXPECT_EQ(h.transcript_texts().back(), "assistant:done");
    const auto texts = h.transcript_texts();
    EXPECT_EQ(std::count(texts.begin(), texts.end(), "result:3"), 1);
}

// Input that arrives while the tools of the answer that spent the budget run is not taken by
// the commit of their results: it waits in its lane.
TEST(Budget, InputArrivingWhileTheLastToolsRunStaysQueued) {
    loop_harness h(R"({"responses":[
        {"text":"calling","tool_calls":[{"name":"sleep","arguments":{"ms":1000}}]},
        {"text":"done"}]})");
    h.start();
    budget one_call;
    one_call.tool_calls = 1;
    one_call.soft_percent = 100;
    ASSERT_TRUE(h.send(with_budget(one_call)));  // spent once its one call starts
    h.follow_up("f1", "go");
    ASSERT_TRUE(h.run_until([&] { return h.state().usage.tool_calls == 1; }));
    h.steer("s1", "also this");
    h.settle();
    EXPECT_TRUE(h.state().paused);
    EXPECT_EQ(h.state().in(lane::steer).pending.size(), 1u) << "the steer waits";
    EXPECT_EQ(h.provider().calls(), 1u);
}

TEST(Budget, NearALimitTheModelGetsOneNoticeInTheSystemLane) {
    loop_harness h(three_answers);
    h.start();
    ASSERT_TRUE(h.send(with_budget(turns(5, 60))));  // a notice from 3 answers on
    for (int i = 1; i <= 5; ++i) {
        h.follow_up("f" + std::to_string(i), "input " + std::to_string(i));
        h.settle();
    }
    EXPECT_EQ(h.provider().calls(), 5u);
    int notices = 0;
    for (const auto& e : h.state().transcript) {
        if (const auto* m = std::get_if<system_message>(&e.body);
            m != nullptr && m->source.str() == "budgetNotice") {
            ++notices;
            EXPECT_THAT(m->content, HasSubstr("3 of its 5 turns"));
        }
    }
    EXPECT_EQ(notices, 1) << "once, however many answers follow";
    // The fourth inference saw it.
    EXPECT_TRUE(context_mentions(h.provider().requests()[3], "Budget notice"));
    EXPECT_FALSE(context_mentions(h.provider().requests()[2], "Budget notice"));
}

TEST(Budget, ATokenBudgetStopsWithinOneInferenceOfItsLimit) {
    loop_harness h(three_answers);
    h.start();
    session::budget b;
    b.tokens = 2'500;
    b.soft_percent = 100;
    ASSERT_TRUE(h.send(with_budget(b)));
    for (int i = 1; i <= 4; ++i) {
        h.follow_up("f" + std::to_string(i), "input");
        h.settle();
    }
    // 1000 tokens an answer: the third crosses 2500, and nothing runs after it.
    EXPECT_EQ(h.provider().calls(), 3u);
    EXPECT_EQ(h.state().usage.tokens.total(), 3'000u);
    EXPECT_LT(h.state().usage.tokens.total(), b.tokens + 1'000) << "one inference over at most";
    EXPECT_EQ(h.diagnostic_message().find("tokens") != std::string::npos, true);
}

TEST(Budget, TheFleetsDefaultAppliesWhereTheSessionSetsNoLimit) {
    auto opts = loop_harness::default_options();
    opts.budget.turns = 1;
    opts.budget.soft_percent = 100;
    loop_harness h(three_answers, nullptr, 1, opts);
    h.start();
    h.follow_up("f1", "one");
    h.settle();
    h.follow_up("f2", "two");
    h.settle();
    EXPECT_EQ(h.provider().calls(), 1u);
    EXPECT_TRUE(h.state().paused);
    // The session's own limit replaces the fleet's (and resumes it).
    ASSERT_TRUE(h.send(with_budget(turns(2))));
    h.settle();
    EXPECT_EQ(h.provider().calls(), 2u);
}

TEST(Budget, AConfigureResumesOnlyASessionItsBudgetPaused) {
    loop_harness h(three_answers);
    h.start();
    h.follow_up("f1", "one");
    h.settle();
    ASSERT_TRUE(h.send(worker::pause_command{}));
    h.follow_up("f2", "two");
    ASSERT_TRUE(h.send(with_budget(turns(5))));
    h.settle();
    EXPECT_TRUE(h.state().paused) << "paused by a person: a budget does not resume it";
    EXPECT_EQ(h.provider().calls(), 1u);
}

// The pure rules behind the loop: what is spent, what is near, and the settings' JSON.
TEST(Budget, LimitsAreCheckedInTheOrderTurnsToolCallsTokensCost) {
    usage_totals t{token_usage{900, 0, 100, 0, 0}, 4'000'000'000, 3, 7};
    budget b;
    b.cost = 5'000'000'000;  // $5
    b.soft_percent = 80;
    EXPECT_FALSE(exhausted(t, b));
    ASSERT_EQ(nearly_exhausted(t, b).size(), 1u);
    EXPECT_EQ(nearly_exhausted(t, b)[0].name, "cost");
    EXPECT_EQ(budget_notice_id(nearly_exhausted(t, b)[0]), "budget-cost-5000000000");
    // Every limit near its end is listed (each gets its notice, in order).
    b.turns = 4;
    b.soft_percent = 75;  // 3 of 4 turns, $4 of $5
    ASSERT_EQ(nearly_exhausted(t, b).size(), 2u);
    EXPECT_EQ(nearly_exhausted(t, b)[0].name, "turns");
    b.turns = 0;
    b.soft_percent = 80;
    b.tool_calls = 7;
    EXPECT_EQ(exhausted(t, b)->name, "tool_calls");
    EXPECT_THAT(budget_exhausted_report(*exhausted(t, b)).message, HasSubstr("7 tool_calls"));
    b.tool_calls = 0;
    b.cost = 4'000'000'000;
    EXPECT_THAT(budget_exhausted_report(*exhausted(t, b)).message, HasSubstr("$4.00 cost"));
    // The fleet's defaults fill what the session leaves at 0.
    budget fleet;
    fleet.turns = 10;
    const auto e = effective(b, fleet);
    EXPECT_EQ(e.turns, 10u);
    EXPECT_EQ(e.cost, 4'000'000'000u);
    EXPECT_EQ(e.soft_percent, 80u);
    EXPECT_EQ(effective(budget{}, budget{}).soft_percent, 80u);
    // Totals saturate rather than wrap: a provider's absurd count still reaches a budget.
    usage_totals huge;
    assistant_message m;
    m.usage = token_usage{UINT64_MAX - 1, 0, 0, 0, 0};
    m.cost = UINT64_MAX - 1;
    count(huge, m);
    count(huge, m);
    EXPECT_EQ(huge.tokens.input, UINT64_MAX);
    EXPECT_EQ(huge.cost, UINT64_MAX);
    budget tiny;
    tiny.cost = 1;
    EXPECT_TRUE(exhausted(huge, tiny));
    EXPECT_EQ(cost_of(token_usage{UINT64_MAX, 0, 0, 0, 0}, model_prices{UINT64_MAX, 0, 0, 0}),
              UINT64_MAX);
}

TEST(Budget, IsPartOfTheSettingsAndItsCostIsExactDollars) {
    settings s;
    s.limits.turns = 10;
    s.limits.cost = 1'500'000'000;
    const auto v = to_json(s);
    EXPECT_EQ(boost::json::serialize(v.at("budget")), R"({"cost_usd":"1.50","turns":10})");
    EXPECT_EQ(settings_from_json(v).value(), s);
    // Without a budget (and as stored before issue 33): no field, the fleet's budget.
    EXPECT_FALSE(to_json(settings{}).as_object().contains("budget"));
    EXPECT_EQ(budget_from_json(boost::json::parse(R"({"cost_usd":0.25})"), "").value().cost,
              250'000'000u);
    EXPECT_EQ(
        budget_from_json(boost::json::parse(R"({"cost_usd":"0.000000001"})"), "").value().cost, 1u);
    for (const char* bad :
         {R"({"cost_usd":"1.2.3"})", R"({"cost_usd":"-1"})", R"({"cost_usd":"0.0000000001"})",
          R"({"cost_usd":-1})", R"({"soft_percent":101})", R"({"turns":-1})", R"({"minutes":5})"}) {
        EXPECT_FALSE(budget_from_json(boost::json::parse(bad), "budget")) << bad;
    }
}

TEST(Budget, ATenantsDefaultsComeBetweenTheSessionsBudgetAndTheFleets) {
    auto opts = loop_harness::default_options();
    opts.budget.turns = 10;
    opts.budget.soft_percent = 100;
    budget acme;
    acme.turns = 1;
    opts.tenant_budgets["acme"] = acme;
    EXPECT_EQ(opts.defaults_for("acme").turns, 1u);
    EXPECT_EQ(opts.defaults_for("acme").soft_percent, 100u) << "the fleet's, where it says none";
    EXPECT_EQ(opts.defaults_for("globex").turns, 10u);
    // A session of acme stops after its tenant's one turn; one of another tenant goes on.
    loop_harness a(three_answers, nullptr, 1, opts, "acme.s1");
    a.start();
    a.follow_up("f1", "one");
    a.settle();
    a.follow_up("f2", "two");
    a.settle();
    EXPECT_EQ(a.provider().calls(), 1u);
    EXPECT_TRUE(a.state().paused);
    EXPECT_EQ(a.loop().limits().turns, 1u);
    loop_harness g(three_answers, nullptr, 1, opts, "globex.s1");
    g.start();
    g.follow_up("f1", "one");
    g.settle();
    g.follow_up("f2", "two");
    g.settle();
    EXPECT_EQ(g.provider().calls(), 2u);
    // The session's own budget comes first.
    ASSERT_TRUE(a.send(with_budget(turns(2))));
    a.settle();
    EXPECT_EQ(a.provider().calls(), 2u);
}

}  // namespace wuhu::testing
