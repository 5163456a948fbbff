// Approval of tool calls (issue 33, session/approval.hpp): a call that needs it is asked before
// anything of it runs, waits (the session passivable, the other calls running meanwhile), and
// runs once approved; reject and respond give the model a result without running it; a
// deadline applies its default decision; a crash or a takeover loses nothing and runs nothing
// twice.
#include "session/approval.hpp"
#include "session/loop_policy.hpp"
#include "session/reducer.hpp"
#include "tests/worker/loop_harness.hpp"

#include <gmock/gmock.h>

namespace wuhu::testing {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

session::tool_approval always(std::uint64_t deadline_ms = 0,
                              decision on_deadline = decision::reject) {
    return session::tool_approval{session::approval_mode::always, deadline_ms, on_deadline};
}

worker::decide_command decide(const std::string& call, decision what, std::string message = {},
                              std::optional<std::string> arguments = std::nullopt) {
    return worker::decide_command{session::decision_input{
        call_id(call), what, human("u2", "Bea"), std::move(arguments), std::move(message)}};
}

// The tool messages of a request's context, as "<call id>=<content>".
std::vector<std::string> tool_messages(const providers::inference_request& r) {
    std::vector<std::string> out;
    for (const auto& m : r.context) {
        if (m.role == llm_role::tool) {
            out.push_back(m.tool_call_id + "=" + m.content);
        }
    }
    return out;
}

const std::string one_echo = R"({"responses":[
    {"tool_calls":[{"id":"c1","name":"echo","arguments":{"text":"one"}}]},
    {"text":"done"}]})";

const std::string two_echoes = R"({"responses":[
    {"tool_calls":[{"id":"c1","name":"echo","arguments":{"text":"one"}},
                   {"id":"c2","name":"echo","arguments":{"text":"two"}}]},
    {"text":"done"}]})";

}  // namespace

TEST(Approval, ACallThatNeedsApprovalIsAskedBeforeItRunsAndRunsOnceApproved) {
    loop_harness h(one_echo);
    h.tools().set_approval("echo", always());
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    // Asked in the response's commit; nothing of it ran; the session waits, passivable.
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:go", "assistant:+echo", "asked:echo"));
    EXPECT_EQ(h.loop().current(), loop_state::awaiting_approval);
    EXPECT_FALSE(h.state().has_work);
    EXPECT_TRUE(h.loop().quiescent());
    EXPECT_TRUE(session::awaiting_approval(h.state()));

    auto r = h.send(decide("c1", decision::approve));
    ASSERT_TRUE(r) << r.error().message();
    ASSERT_TRUE(r->decided);
    EXPECT_EQ(r->decided->what, decision::approve);
    EXPECT_FALSE(r->duplicate);
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo", "asked:echo", "approve:echo",
                            "started:echo", "result:one", "assistant:done"));
    EXPECT_EQ(h.loop().current(), loop_state::idle);
    // The decision names its author.
    const auto& d = std::get<approval_decided>(h.state().transcript[3].body);
    EXPECT_EQ(std::get<participant>(d.by).name, "Bea");
    EXPECT_FALSE(d.by_deadline);

    // Idempotent by call id: the same decision again is a duplicate; another one is refused.
    auto again = h.send(decide("c1", decision::approve));
    ASSERT_TRUE(again);
    EXPECT_TRUE(again->duplicate);
    EXPECT_EQ(h.send(decide("c1", decision::reject)).error(), session::errc::already_decided);
    EXPECT_EQ(h.send(decide("nope", decision::approve)).error(), session::errc::unknown_tool_call);
}

TEST(Approval, ACallThatNeedsNoneIsNotAsked) {
    loop_harness h(one_echo);
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:go", "assistant:+echo", "started:echo",
                                                  "result:one", "assistant:done"));
    EXPECT_EQ(h.send(decide("c1", decision::approve)).error(), session::errc::unknown_tool_call)
        << "a call of an older response with no decision on record";
}

TEST(Approval, ParallelCallsApprovedInReverseOrderReachTheModelInTheOrderOfTheCalls) {
    loop_harness h(two_echoes);
    h.tools().set_approval("echo", always());
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo+echo", "asked:echo", "asked:echo"));
    ASSERT_TRUE(h.send(decide("c2", decision::approve)));
    h.settle();
    // The second ran; the first still waits, and the model has not been asked again.
    EXPECT_EQ(h.loop().current(), loop_state::awaiting_approval);
    EXPECT_EQ(h.provider().calls(), 1u);
    ASSERT_TRUE(h.send(decide("c1", decision::approve)));
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo+echo", "asked:echo", "asked:echo",
                            "approve:echo", "started:echo", "result:two", "approve:echo",
                            "started:echo", "result:one", "assistant:done"));
    ASSERT_EQ(h.provider().requests().size(), 2u);
    EXPECT_THAT(tool_messages(h.provider().requests()[1]), ElementsAre("c1=one", "c2=two"));
}

TEST(Approval, CallsThatNeedNoApprovalRunWhileAnotherWaits) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"id":"c1","name":"echo","arguments":{"text":"one"}},
                       {"id":"c2","name":"clock","arguments":{}}]},
        {"text":"done"}]})");
    h.tools().set_approval("echo", always());
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    const auto texts = h.transcript_texts();
    ASSERT_EQ(texts.size(), 5u);
    EXPECT_EQ(texts[2], "started:clock");
    EXPECT_EQ(texts[3], "asked:echo");
    EXPECT_THAT(texts[4], HasSubstr("result:"));
    EXPECT_EQ(h.loop().current(), loop_state::awaiting_approval);
    ASSERT_TRUE(h.send(decide("c1", decision::approve)));
    h.settle();
    EXPECT_EQ(h.transcript_texts().back(), "assistant:done");
}

TEST(Approval, RejectAndRespondReachTheModelWithoutRunningTheTool) {
    loop_harness h(two_echoes);
    h.tools().set_approval("echo", always());
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    ASSERT_TRUE(h.send(decide("c1", decision::reject, "not today")));
    ASSERT_TRUE(h.send(decide("c2", decision::respond, "the answer is 42")));
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo+echo", "asked:echo", "asked:echo",
                            "reject:echo", "error:" + session::rejected_result("not today"),
                            "respond:echo", "result:the answer is 42", "assistant:done"));
    ASSERT_EQ(h.provider().requests().size(), 2u);
    EXPECT_THAT(tool_messages(h.provider().requests()[1]),
                ElementsAre("c1=" + session::rejected_result("not today"), "c2=the answer is 42"));
    EXPECT_EQ(h.state().usage.tool_calls, 0u) << "neither call started";
}

TEST(Approval, ApproveWithArgumentsThatFailTheSchemaIsRefusedAndTheCallWaitsOn) {
    loop_harness h(one_echo);
    h.tools().set_approval("echo", always());
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    EXPECT_EQ(h.send(decide("c1", decision::approve, {}, R"({"text":5})")).error(),
              session::errc::invalid_arguments);
    EXPECT_EQ(h.send(decide("c1", decision::approve, {}, "not json")).error(),
              session::errc::invalid_arguments);
    EXPECT_TRUE(session::awaiting_approval(h.state()));
    ASSERT_TRUE(h.send(decide("c1", decision::approve, {}, R"({"text":"edited"})")));
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo", "asked:echo", "approve:echo",
                            "started:echo", "result:edited", "assistant:done"));
}

TEST(Approval, TheDeadlineAppliesItsDefaultDecisionOnTime) {
    loop_harness h(two_echoes);
    h.tools().set_approval("echo", always(60'000));
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    const auto asked_at = h.clock().now().value;
    ASSERT_TRUE(h.run_until([&] { return !session::awaiting_approval(h.state()); }));
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo+echo", "asked:echo", "asked:echo",
                            "reject:echo", "error:" + session::expired_result(), "reject:echo",
                            "error:" + session::expired_result(), "assistant:done"));
    const auto& d = h.state().transcript[4];
    EXPECT_EQ(d.at.value, asked_at + 60'000) << "on time, not before";
    EXPECT_TRUE(std::get<approval_decided>(d.body).by_deadline);
    EXPECT_TRUE(std::holds_alternative<system_author>(std::get<approval_decided>(d.body).by));
}

TEST(Approval, ADeadlineThatApprovesRunsTheCall) {
    loop_harness h(one_echo);
    h.tools().set_approval("echo", always(1'000, decision::approve));
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    ASSERT_TRUE(h.run_until([&] { return h.transcript_texts().back() == "assistant:done"; }));
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo", "asked:echo", "approve:echo",
                            "started:echo", "result:one", "assistant:done"));
}

TEST(Approval, TheSessionsRulesOverrideTheToolsFile) {
    loop_harness h(one_echo);
    h.start();
    session::settings_update u;
    u.approval = session::approval_settings{
        {{"*", session::approval_mode::always}}, 5'000, decision::approve};
    ASSERT_TRUE(h.send(worker::configure_command{u}));
    h.follow_up("f1", "go");
    h.settle();
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:go", "assistant:+echo", "asked:echo"));
    const auto* c = h.state().find_tool_call("c1");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->deadline.value, h.clock().now().value + 5'000);
    EXPECT_EQ(c->on_deadline, decision::approve);

    // And a session may turn a tools file's approval off.
    loop_harness g(one_echo);
    g.tools().set_approval("echo", always());
    g.start();
    u.approval = session::approval_settings{{{"echo", session::approval_mode::never}}, 0, {}};
    ASSERT_TRUE(g.send(worker::configure_command{u}));
    g.follow_up("f1", "go");
    g.settle();
    EXPECT_EQ(g.transcript_texts().back(), "assistant:done");
}

TEST(Approval, SteerAndFollowUpWaitForTheDecisionAndJoinAfterTheResults) {
    loop_harness h(one_echo);
    h.tools().set_approval("echo", always());
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    ASSERT_TRUE(h.steer("s1", "also this"));
    h.settle();
    EXPECT_TRUE(h.state().has_pending()) << "no inference while a call waits";
    EXPECT_EQ(h.loop().current(), loop_state::awaiting_approval);
    EXPECT_TRUE(h.state().has_work) << "queued input keeps has_work";
    EXPECT_TRUE(h.loop().quiescent());
    ASSERT_TRUE(h.send(decide("c1", decision::approve)));
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo", "asked:echo", "approve:echo",
                            "started:echo", "result:one", "party:also this", "assistant:done"));
}

TEST(Approval, AnAbortWhileACallWaitsGivesItAnErrorAndEndsTheTurn) {
    loop_harness h(one_echo);
    h.tools().set_approval("echo", always());
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    auto r = h.send(worker::abort_command{"stop", "a1"});
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_NE(r->aborted.entry.value, 0u) << "the abort stopped the turn";
    h.settle();
    const auto texts = h.transcript_texts();
    ASSERT_EQ(texts.size(), 5u);
    EXPECT_THAT(texts[3], HasSubstr("error:"));
    EXPECT_EQ(texts[4], "aborted:stop");
    EXPECT_FALSE(session::awaiting_approval(h.state()));
    EXPECT_EQ(h.send(decide("c1", decision::approve)).error(),
              session::errc::not_awaiting_approval);
}

TEST(Approval, APendingApprovalSurvivesATakeoverAndTheCallRunsExactlyOnce) {
    storage::memory_store store;
    std::map<std::string, int> runs;
    const std::string script = R"({"responses":[
        {"tool_calls":[{"id":"c1","name":"charge","arguments":{}}]},
        {"text":"done"}]})";
    {
        loop_harness first(script, &store, 1);
        first.tools().add(std::make_shared<counting_tool>(runs));
        first.tools().set_approval("charge", always());
        first.start();
        first.follow_up("f1", "go");
        first.settle();
        EXPECT_EQ(first.loop().current(), loop_state::awaiting_approval);
    }  // the owner goes away
    loop_harness next(script, &store, 2);
    next.tools().add(std::make_shared<counting_tool>(runs));
    next.tools().set_approval("charge", always());
    next.start();
    next.settle();
    EXPECT_THAT(next.transcript_texts(),
                ElementsAre("party:go", "assistant:+charge", "asked:charge"))
        << "no interruption: nothing of the call was running";
    EXPECT_EQ(next.loop().current(), loop_state::awaiting_approval) << "loaded, it says it waits";
    EXPECT_TRUE(runs.empty());
    ASSERT_TRUE(next.send(decide("c1", decision::approve)));
    next.settle();
    EXPECT_EQ(runs["c1"], 1);
    EXPECT_EQ(next.transcript_texts().back(), "assistant:done");
    auto log = store.open(session_id::parse("s1").value(), lease_epoch{3}).value();
    EXPECT_EQ(log->load().value(), next.state());
}

// Regression: a call approved while the budget's tool_calls were spent by the calls started
// with it, before the runner reached it, stopped the runner at that call every time: the calls
// started after it never ran, and the loop asked the runner again forever. Now the call waits
// for a raise and the started calls run.
TEST(Approval, AnApprovedCallPastTheBudgetWaitsWhileTheCallsStartedBeforeItRun) {
    storage::memory_store store;
    {
        auto log = store.open(session_id::parse("s1").value(), lease_epoch{1}).value();
        session_state st = log->load().value();
        auto commit = [&](const action_list& a) {
            ASSERT_TRUE(log->commit(st, a));
            apply_actions(a, st);
        };
        settings cfg = st.config;
        cfg.limits.tool_calls = 2;
        cfg.limits.soft_percent = 100;
        commit(plan_set_settings(st, cfg).value());
        commit(plan_enqueue(st, user_in(lane::follow_up, "f1", "go", human("u1", "Ann")),
                            unix_ms{harness_t0})
                   ->actions);
        commit(plan_drain(st, checkpoint::follow_up, unix_ms{harness_t0}));
        auto m = reply("", {{"a", "clock"}, {"b", "echo"}, {"c", "echo"}});
        m.tool_calls[1].arguments = R"({"text":"b"})";
        m.tool_calls[2].arguments = R"({"text":"c"})";
        // a asked; b and c started with the answer (the two calls the budget allows).
        commit(plan_response(st, m, {call_id("b"), call_id("c")}, false, unix_ms{harness_t0},
                             {request_of(m.tool_calls[0], always(), unix_ms{harness_t0})})
                   .value());
    }  // the owner goes away before running b and c
    loop_harness next(R"({"responses":[{"text":"unused"}]})", &store, 2);
    next.tools().set_approval("clock", always());
    ASSERT_TRUE(next.send(decide("a", decision::approve)));  // before the loop runs
    next.start();
    next.settle();
    const auto texts = next.transcript_texts();
    EXPECT_EQ(std::count(texts.begin(), texts.end(), "result:b"), 1) << "b ran";
    EXPECT_EQ(std::count(texts.begin(), texts.end(), "result:c"), 1) << "c ran";
    EXPECT_EQ(next.state().find_tool_call("a")->status, tool_status::not_started);
    EXPECT_TRUE(next.state().paused) << "a waits for a raise";
    EXPECT_EQ(texts.back(), "diagnostic:budget_exhausted");
}

}  // namespace wuhu::testing
