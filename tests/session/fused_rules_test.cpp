// The fused operations of the session's rules (session/rules.hpp): each equals its steps applied
// one after the other.
#include "session/reducer.hpp"
#include "session/rules.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace {

session_state applied_to(session_state s, const action_list& actions) {
    apply_actions(actions, s);
    return s;
}

// A session that answered one turn: idle, nothing pending, has_work clear.
session_state answered() {
    session_state s = enqueued({}, user_in(lane::follow_up, "f0", "hello"), 1);
    s = drained(s, checkpoint::follow_up, 2);
    apply_actions(plan_append_assistant(s, reply("hi"), unix_ms{3}).value(), s);
    apply_actions(plan_mark_idle(s), s);
    return s;
}

}  // namespace

TEST(FusedCommits, AnEnqueueIntoAnIdleSessionIsMaterializedAsItsCheckpointWould) {
    for (auto in : {user_in(lane::follow_up, "f1", "next"), user_in(lane::steer, "s1", "steer"),
                    system_in("y1", "callback")}) {
        const session_state s = answered();
        auto fused = plan_enqueue_and_drain(s, in, unix_ms{10});
        ASSERT_TRUE(fused.has_value());
        auto one = plan_enqueue(s, in, unix_ms{10}).value();
        session_state stepwise = applied_to(s, one.actions);
        stepwise = drained(stepwise, current_checkpoint(s), 10);
        EXPECT_EQ(applied_to(s, fused->actions), stepwise) << in.id.str();
        EXPECT_EQ(fused->id, one.id);
        EXPECT_EQ(applied_to(s, fused->actions).find_item(in.id.str())->status,
                  item_status::materialized);
    }
}

TEST(FusedCommits, AnEnqueueIsNotMaterializedWhereTheCheckpointWouldNotTakeIt) {
    // Something pending already, or paused: the plain enqueue.
    session_state pending = enqueued(answered(), user_in(lane::follow_up, "f1", "a"), 5);
    auto out = plan_enqueue_and_drain(pending, user_in(lane::follow_up, "f2", "b"), unix_ms{6});
    EXPECT_EQ(out->actions, plan_enqueue(pending, user_in(lane::follow_up, "f2", "b"),
                                         unix_ms{6})->actions);
    session_state paused = applied_to(answered(), plan_set_paused(answered(), true));
    out = plan_enqueue_and_drain(paused, user_in(lane::follow_up, "f2", "b"), unix_ms{6});
    EXPECT_EQ(applied_to(paused, out->actions).find_item("f2")->status, item_status::pending);
    // Input awaiting a response (a crash between drain and inference): the steer checkpoint
    // applies, and it does not take a follow-up.
    session_state awaiting = drained(enqueued({}, user_in(lane::follow_up, "f0", "x"), 1),
                                     checkpoint::follow_up, 2);
    out = plan_enqueue_and_drain(awaiting, user_in(lane::follow_up, "f1", "y"), unix_ms{3});
    EXPECT_EQ(applied_to(awaiting, out->actions).find_item("f1")->status, item_status::pending);
    out = plan_enqueue_and_drain(awaiting, user_in(lane::steer, "s1", "z"), unix_ms{3});
    EXPECT_EQ(applied_to(awaiting, out->actions).find_item("s1")->status,
              item_status::materialized);
    // A duplicate changes nothing.
    out = plan_enqueue_and_drain(answered(), user_in(lane::follow_up, "f0", "again"), unix_ms{4});
    EXPECT_TRUE(out->duplicate);
    EXPECT_TRUE(out->actions.empty());
}

TEST(FusedCommits, AResponseAndTheStartOfItsCallsAreOneOperation) {
    const session_state s = drained(enqueued({}, user_in(lane::follow_up, "f", "x"), 1),
                                    checkpoint::follow_up, 2);
    const auto m = reply("calling", {{"c1", "echo"}, {"c2", "mystery"}, {"c3", "clock"}});
    auto fused = plan_response(s, m, {call_id("c1"), call_id("c3")}, true, unix_ms{5});
    ASSERT_TRUE(fused.has_value());
    session_state stepwise = applied_to(s, plan_append_assistant(s, m, unix_ms{5}).value());
    stepwise = applied_to(stepwise, plan_tool_will_execute(stepwise, call_id("c1"), unix_ms{5}).value());
    stepwise = applied_to(stepwise, plan_tool_will_execute(stepwise, call_id("c3"), unix_ms{5}).value());
    EXPECT_EQ(applied_to(s, *fused), stepwise);
    EXPECT_TRUE(stepwise.has_work) << "a response with calls never settles";
    EXPECT_EQ(plan_response(s, m, {call_id("zz")}, false, unix_ms{5}).error(),
              make_error_code(errc::unknown_tool_call));
    // Paused, or with a compaction due, the calls do not run next: no markers (the loop
    // starts each call when it runs it).
    session_state paused = applied_to(s, plan_set_paused(s, true));
    EXPECT_EQ(plan_response(paused, m, {call_id("c1")}, true, unix_ms{5})->size(), 1u);
    session_state small = s;
    small.config.context_limit = 1000;
    small.config.compaction_buffer = 100;
    auto big = m;
    big.usage.input = 950;
    EXPECT_EQ(plan_response(small, big, {call_id("c1")}, true, unix_ms{5})->size(), 1u);
    EXPECT_EQ(plan_response(s, m, {call_id("c1"), call_id("c1")}, false, unix_ms{5}).error(),
              make_error_code(errc::invalid_entry));
}

TEST(FusedCommits, AFinalAnswerClearsHasWorkAsTheMarkIdleAfterItWould) {
    const session_state s = drained(enqueued({}, user_in(lane::follow_up, "f", "x"), 1),
                                    checkpoint::follow_up, 2);
    auto fused = plan_response(s, reply("done"), {}, true, unix_ms{5});
    session_state stepwise = applied_to(s, plan_append_assistant(s, reply("done"), unix_ms{5}).value());
    stepwise = applied_to(stepwise, plan_mark_idle(stepwise));
    EXPECT_EQ(applied_to(s, fused.value()), stepwise);
    EXPECT_FALSE(stepwise.has_work);
    // Not while input is pending (the loop drains it next), paused, or when the answer calls
    // for a compaction (the loop compacts next).
    session_state pending = enqueued(s, user_in(lane::follow_up, "f2", "y"), 3);
    EXPECT_TRUE(applied_to(pending, plan_response(pending, reply("done"), {}, true, unix_ms{5})
                                        .value())
                    .has_work);
    session_state paused = applied_to(s, plan_set_paused(s, true));
    EXPECT_TRUE(
        applied_to(paused, plan_response(paused, reply("done"), {}, true, unix_ms{5}).value())
            .has_work);
    session_state small = s;
    small.config.context_limit = 1000;
    small.config.compaction_buffer = 100;
    auto big = reply("done");
    big.usage.input = 950;
    EXPECT_TRUE(applied_to(small, plan_response(small, big, {}, true, unix_ms{5}).value())
                    .has_work);
    // Without settle, the answer alone.
    EXPECT_TRUE(applied_to(s, plan_response(s, reply("done"), {}, false, unix_ms{5}).value())
                    .has_work);
}

TEST(FusedCommits, ToolResultsThatFinishTogetherAndTheDrainAfterThemAreOneOperation) {
    session_state s = drained(enqueued({}, user_in(lane::follow_up, "f", "x"), 1),
                              checkpoint::follow_up, 2);
    s = applied_to(s, plan_response(s, reply("", {{"c1", "echo"}, {"c2", "charge"}, {"c3", "x"}}),
                                    {call_id("c1"), call_id("c2")}, true, unix_ms{3})
                          .value());
    s = enqueued(s, user_in(lane::steer, "s1", "careful"), 4);
    s = enqueued(s, user_in(lane::follow_up, "f2", "later"), 4);
    const std::vector<entry_body> steps{result_of("c1", "e1"), result_of("c2", "ok"),
                                        result_of("c3", "unknown tool", true)};
    auto fused = plan_tool_steps(s, steps, true, unix_ms{5});
    ASSERT_TRUE(fused.has_value());
    session_state stepwise = s;
    for (const auto& r : steps) {
        stepwise = applied_to(
            stepwise,
            plan_tool_did_execute(stepwise, std::get<tool_result>(r), unix_ms{5}).value());
    }
    stepwise = drained(stepwise, current_checkpoint(stepwise), 5);
    EXPECT_EQ(applied_to(s, *fused), stepwise);
    EXPECT_EQ(stepwise.find_item("s1")->status, item_status::materialized);
    EXPECT_EQ(stepwise.find_item("f2")->status, item_status::pending)
        << "the steer checkpoint after a result leaves follow-ups";
    // Each step is checked on the state the ones before it leave.
    EXPECT_EQ(plan_tool_steps(s, {result_of("c1", "a"), result_of("c1", "b")}, false, unix_ms{5})
                  .error(),
              make_error_code(errc::tool_call_finished));
    EXPECT_EQ(plan_tool_steps(s, {result_of("c3", "ran?")}, false, unix_ms{5}).error(),
              make_error_code(errc::tool_call_not_started));
    EXPECT_EQ(plan_tool_steps(s, {reply("no")}, false, unix_ms{5}).error(),
              make_error_code(errc::invalid_entry));
    // A start and its result in one operation (a call started late, then finished at once);
    // a start of a started call records nothing.
    auto started = plan_tool_steps(
        s, {tool_started{call_id("c3"), ""}, result_of("c3", "x"), tool_started{call_id("c1"), ""}},
        false, unix_ms{5});
    ASSERT_TRUE(started.has_value());
    EXPECT_EQ(started->size(), 2u);
    EXPECT_EQ(std::get<tool_started>(std::get<entry_appended>(started->front()).e.body).tool, "x");
}

TEST(FusedCommits, AnAbortsResultsAndInterruptionEndTheTurnAndTheFollowUpCheckpointFollows) {
    session_state s = drained(enqueued({}, user_in(lane::follow_up, "f", "x"), 1),
                              checkpoint::follow_up, 2);
    s = applied_to(s, plan_response(s, reply("", {{"c1", "echo"}, {"c2", "echo"}}),
                                    {call_id("c1"), call_id("c2")}, true, unix_ms{3})
                          .value());
    s = enqueued(s, user_in(lane::follow_up, "f2", "next"), 4);
    const std::vector<entry_body> steps{result_of("c1", "aborted: stop", true),
                                        result_of("c2", "not run", true),
                                        interruption{"stop", interruption_kind::aborted}};
    session_state stepwise = s;
    for (const auto& b : steps) {
        if (const auto* r = std::get_if<tool_result>(&b)) {
            stepwise = applied_to(stepwise, plan_tool_did_execute(stepwise, *r, unix_ms{5}).value());
        } else {
            stepwise = applied_to(stepwise,
                                  plan_append_marker(stepwise, std::get<interruption>(b), unix_ms{5}));
        }
    }
    EXPECT_EQ(current_checkpoint(stepwise), checkpoint::follow_up);
    stepwise = drained(stepwise, checkpoint::follow_up, 5);
    EXPECT_EQ(applied_to(s, plan_tool_steps(s, steps, true, unix_ms{5}).value()), stepwise);
    EXPECT_EQ(stepwise.find_item("f2")->status, item_status::materialized);
    // Paused: no drain.
    session_state paused = applied_to(s, plan_set_paused(s, true));
    EXPECT_EQ(applied_to(paused, plan_tool_steps(paused, steps, true, unix_ms{5}).value())
                  .find_item("f2")
                  ->status,
              item_status::pending);
}

}  // namespace wuhu::testing
