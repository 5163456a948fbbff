// The pure rules of approvals (session/approval.hpp): which calls wait, what a decision and a
// deadline record, and how the waiting calls show in the summary, the context and the codec.
#include "session/approval.hpp"
#include "session/codec.hpp"
#include "session/context.hpp"
#include "session/loop_policy.hpp"
#include "session/reducer.hpp"
#include "session/summary.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace json = boost::json;

namespace {

// A session whose newest response calls echo twice (c1, c2), c1 asked with a deadline at 5000.
session_state waiting() {
    session_state s =
        drained(enqueued({}, user_in(lane::follow_up, "f1", "go"), 10), checkpoint::follow_up);
    auto r = plan_response(
        s, reply("", {{"c1", "echo"}, {"c2", "echo"}}), {call_id("c2")}, true, unix_ms{100},
        {request_of(tool_call{call_id("c1"), "echo", "{}"},
                    tool_approval{approval_mode::always, 4900, decision::reject}, unix_ms{100})});
    apply_actions(r.value(), s);
    return s;
}

decision_input by_bea(const std::string& call, decision what, std::string message = {}) {
    return decision_input{call_id(call), what, human("u2", "Bea"), std::nullopt,
                          std::move(message)};
}

}  // namespace

TEST(ApprovalRules, TheSessionsRuleForAToolComesBeforeItsStarAndTheToolsFile) {
    const tool_approval file{approval_mode::always, 1000, decision::approve};
    EXPECT_EQ(approval_terms({}, "echo", file), file);
    EXPECT_FALSE(approval_terms({}, "echo", {}).has_value()) << "never by default";
    approval_settings s{{{"*", approval_mode::never}}, 0, std::nullopt};
    EXPECT_FALSE(approval_terms(s, "echo", file).has_value());
    s.tools["echo"] = approval_mode::always;
    s.deadline_ms = 50;
    s.on_deadline = decision::reject;
    EXPECT_EQ(approval_terms(s, "echo", {}),
              (tool_approval{approval_mode::always, 50, decision::reject}));
    EXPECT_FALSE(approval_terms(s, "clock", file).has_value()) << "the star";
}

TEST(ApprovalRules, AWaitingCallIsNotStartedAndHoldsTheSessionUntilItsDecision) {
    session_state s = waiting();
    const auto* c1 = s.find_tool_call("c1");
    ASSERT_NE(c1, nullptr);
    EXPECT_TRUE(awaits_decision(*c1));
    EXPECT_EQ(c1->deadline.value, 5000);
    EXPECT_FALSE(awaiting_approval(s)) << "c2 is started and may run";
    EXPECT_EQ(plan_tool_steps(s, {tool_started{call_id("c1"), ""}}, false, unix_ms{200}).error(),
              errc::not_awaiting_approval);
    apply_actions(plan_tool_steps(s, {result_of("c2", "two")}, false, unix_ms{200}).value(), s);
    EXPECT_TRUE(awaiting_approval(s));
    EXPECT_EQ(next_step(s, {}).kind, step_kind::await_approval);
    // has_work cleared: passivated like an idle session, due again at its deadline.
    apply_actions(plan_await_approval(s), s);
    EXPECT_FALSE(s.has_work);
    EXPECT_EQ(summarize(s).next_timer, unix_ms{5000});
    // Asking again records nothing.
    EXPECT_TRUE(plan_tool_steps(
                    s, {approval_requested{call_id("c1"), "", "", unix_ms{0}, decision::reject}},
                    false, unix_ms{300})
                    .value()
                    .empty());
}

TEST(ApprovalRules, ADecisionIsRecordedOnceWithItsAuthorAndARefusalsResult) {
    session_state s = waiting();
    EXPECT_EQ(plan_decide(s, by_bea("c2", decision::approve), unix_ms{1}).error(),
              errc::not_awaiting_approval);
    EXPECT_EQ(plan_decide(s, by_bea("zz", decision::approve), unix_ms{1}).error(),
              errc::unknown_tool_call);
    auto r = plan_decide(s, by_bea("c1", decision::respond, "42"), unix_ms{300}).value();
    EXPECT_FALSE(r.duplicate);
    ASSERT_EQ(r.actions.size(), 2u) << "has_work was set";
    const auto& result = std::get<entry_appended>(r.actions[1]).e.body;
    EXPECT_EQ(std::get<tool_result>(result).output, "42");
    EXPECT_FALSE(std::get<tool_result>(result).is_error);
    apply_actions(r.actions, s);
    EXPECT_EQ(s.find_tool_call("c1")->status, tool_status::finished);
    auto again = plan_decide(s, by_bea("c1", decision::respond, "43"), unix_ms{400}).value();
    EXPECT_TRUE(again.duplicate);
    EXPECT_TRUE(again.actions.empty());
    EXPECT_EQ(again.decided.message, "42") << "the decision on record";
    EXPECT_EQ(plan_decide(s, by_bea("c1", decision::approve), unix_ms{400}).error(),
              errc::already_decided);
}

TEST(ApprovalRules, TheDeadlineDecidesByTheSystemAuthorAtItsTimeAndNotBefore) {
    session_state s = waiting();
    EXPECT_TRUE(plan_deadline(s, call_id("c1"), unix_ms{4999}).empty());
    auto actions = plan_deadline(s, call_id("c1"), unix_ms{5000});
    ASSERT_GE(actions.size(), 2u);
    const auto& d = std::get<approval_decided>(std::get<entry_appended>(actions[0]).e.body);
    EXPECT_EQ(d.what, decision::reject);
    EXPECT_TRUE(d.by_deadline);
    EXPECT_TRUE(std::holds_alternative<system_author>(d.by));
    EXPECT_EQ(std::get<tool_result>(std::get<entry_appended>(actions[1]).e.body).output,
              expired_result());
    apply_actions(actions, s);
    EXPECT_FALSE(summarize(s).next_timer.has_value());
    EXPECT_TRUE(plan_deadline(s, call_id("c1"), unix_ms{6000}).empty()) << "decided";
}

TEST(ApprovalRules, ToolResultsReachTheModelInTheOrderOfTheCalls) {
    session_state s = waiting();
    apply_actions(plan_tool_steps(s, {result_of("c2", "two")}, false, unix_ms{200}).value(), s);
    apply_actions(plan_decide(s, by_bea("c1", decision::respond, "one"), unix_ms{300})->actions, s);
    const auto ctx = project_context(s, role_mapping{});
    std::vector<std::string> tools;
    for (const auto& m : ctx) {
        if (m.role == llm_role::tool) {
            tools.push_back(m.tool_call_id + "=" + m.content);
        }
    }
    EXPECT_EQ(tools, (std::vector<std::string>{"c1=one", "c2=two"}));
}

TEST(ApprovalRules, EntriesAndSettingsHaveStableWireShapes) {
    entry asked{entry_seq{3}, unix_ms{9},
                approval_requested{call_id("c1"), "echo", R"({"text":"hi"})", unix_ms{60009},
                                   decision::approve}};
    EXPECT_EQ(
        json::serialize(to_json(asked)),
        R"({"id":3,"at":9,"type":"approval_requested","call":"c1","tool":"echo","arguments":"{\"text\":\"hi\"}","deadline":60009,"on_deadline":"approve"})");
    entry decided{entry_seq{4}, unix_ms{10},
                  approval_decided{call_id("c1"), "echo", decision::reject, human("u2", "Bea"), "",
                                   "no", false}};
    EXPECT_EQ(
        json::serialize(to_json(decided)),
        R"({"id":4,"at":10,"type":"approval_decided","call":"c1","tool":"echo","decision":"reject","by":{"kind":"human","id":"u2","name":"Bea"},"message":"no"})");
    EXPECT_EQ(entry_from_json(json::parse(json::serialize(to_json(asked)))).value(), asked);
    EXPECT_EQ(entry_from_json(json::parse(json::serialize(to_json(decided)))).value(), decided);

    settings st;
    st.approval = approval_settings{{{"*", approval_mode::always}}, 600000, decision::reject};
    EXPECT_EQ(json::serialize(to_json(st.approval)),
              R"({"tools":{"*":"always"},"deadline_ms":600000,"on_deadline":"reject"})");
    EXPECT_EQ(settings_from_json(json::parse(json::serialize(to_json(st)))).value(), st);
    EXPECT_FALSE(approval_from_json(json::parse(R"({"on_deadline":"respond"})"), "a"));
    EXPECT_FALSE(approval_from_json(json::parse(R"({"tools":{"echo":"sometimes"}})"), "a"));
    st.approval.tools["bad name"] = approval_mode::always;
    EXPECT_EQ(validate(st).error(), errc::invalid_settings);
}

}  // namespace wuhu::testing
