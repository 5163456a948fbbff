// The agent loop's policy (session/loop_policy.hpp), each row of docs/agent-loop.md's tables a
// script: the state a turn goes through, and what the policy says at each point.
#include "session/loop_policy.hpp"
#include "session/reducer.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace {

using std::chrono::milliseconds;

// A session driven by the plans the loop commits, asked for its next step as the loop asks.
struct script {
    session_state s;
    loop_position at;
    std::int64_t now = 100;

    loop_step next() const { return next_step(s, at); }
    void run(const result<action_list>& plan) {
        ASSERT_TRUE(plan.has_value());
        apply_actions(*plan, s);
    }
    void run(const action_list& plan) { apply_actions(plan, s); }
    void enqueue(enqueue_input in) { s = enqueued(std::move(s), std::move(in), ++now); }
    // The steps as the loop carries them out.
    void checkpoint() {
        run(plan_drain(s, current_checkpoint(s), unix_ms{++now}));
        at = after(step(step_kind::checkpoint), at);
    }
    void mark_idle() {
        run(plan_mark_idle(s));
        at = after(step(step_kind::mark_idle), at);
    }
    void respond(assistant_message m) {
        run(plan_append_assistant(s, std::move(m), unix_ms{++now}));
        at = after(step(step_kind::infer), at);
    }
    void finish_tool(const std::string& call) {
        run(plan_tool_will_execute(s, call_id(call), unix_ms{++now}));
        run(plan_tool_did_execute(s, result_of(call, "ok"), unix_ms{++now}));
    }
    void tools_done() { at = after(step(step_kind::run_tools), at); }
    static loop_step step(step_kind k, std::uint64_t upto = 0) {
        return loop_step{k, entry_seq{upto}};
    }
};

loop_step step(step_kind k, std::uint64_t upto = 0) {
    return script::step(k, upto);
}

}  // namespace

TEST(NextStep, ANewSessionHasNothingToDoAndIsIdle) {
    script t;
    EXPECT_EQ(t.next(), step(step_kind::checkpoint));
    t.checkpoint();
    EXPECT_EQ(t.next(), step(step_kind::idle));
}

TEST(NextStep, InputIsDrainedAtTheCheckpointThenInferredThenHasWorkIsCleared) {
    script t;
    t.enqueue(user_in(lane::follow_up, "a", "hello"));
    EXPECT_EQ(t.next(), step(step_kind::checkpoint));
    t.checkpoint();
    EXPECT_EQ(t.next(), step(step_kind::infer));
    t.respond(reply("hi"));
    EXPECT_EQ(t.next(), step(step_kind::checkpoint));  // a checkpoint after every step
    t.checkpoint();
    EXPECT_EQ(t.next(), step(step_kind::mark_idle));  // has_work is still set
    t.mark_idle();
    EXPECT_FALSE(t.s.has_work);
    EXPECT_EQ(t.next(), step(step_kind::idle));
}

TEST(NextStep, PauseComesFirstWhateverIsPending) {
    script t;
    t.enqueue(user_in(lane::steer, "a", "hello"));
    t.run(plan_set_paused(t.s, true));
    EXPECT_EQ(t.next(), step(step_kind::pause));
    t.checkpoint();
    EXPECT_EQ(t.next(), step(step_kind::pause));
    t.run(plan_set_paused(t.s, false));
    EXPECT_EQ(t.next(), step(step_kind::infer));
}

TEST(NextStep, ToolCallsOfTheNewestResponseRunBeforeTheCheckpoint) {
    script t;
    t.enqueue(user_in(lane::follow_up, "a", "list files"));
    t.checkpoint();
    t.respond(reply("", {{"c1", "echo"}, {"c2", "echo"}}));
    EXPECT_EQ(t.next(), step(step_kind::run_tools));
    t.finish_tool("c1");
    EXPECT_EQ(t.next(), step(step_kind::run_tools));  // c2 has no result yet
    t.finish_tool("c2");
    t.tools_done();
    EXPECT_EQ(t.next(), step(step_kind::checkpoint));
    t.checkpoint();
    EXPECT_EQ(t.next(), step(step_kind::infer));  // the results await a response
}

TEST(NextStep, ASteerDuringToolsJoinsTheTurnAtTheNextCheckpoint) {
    script t;
    t.enqueue(user_in(lane::follow_up, "a", "work"));
    t.checkpoint();
    t.respond(reply("", {{"c1", "sleep"}}));
    t.enqueue(user_in(lane::steer, "s", "use staging"));
    t.enqueue(user_in(lane::follow_up, "f", "later"));
    EXPECT_EQ(t.next(), step(step_kind::run_tools));
    t.finish_tool("c1");
    t.tools_done();
    t.checkpoint();  // the steer checkpoint: the follow-up waits for the turn to end
    EXPECT_TRUE(t.s.in(lane::steer).pending.empty());
    EXPECT_EQ(t.s.in(lane::follow_up).pending.size(), 1u);
    EXPECT_EQ(t.next(), step(step_kind::infer));
}

TEST(NextStep, AResponseOverTheThresholdIsCompactedOnceBeforeAnythingElse) {
    script t;
    t.s.config.context_limit = 1000;
    t.s.config.compaction_buffer = 100;
    t.s.config.keep_recent_tokens = 10;
    t.enqueue(user_in(lane::follow_up, "a", "hello"));
    t.checkpoint();
    auto big = reply("long answer", {{"c1", "echo"}});
    big.usage.input = 950;
    t.respond(big);
    const auto response = t.s.transcript.back().id;
    EXPECT_EQ(t.next(), step(step_kind::compact, response.value));  // before its tool calls
    t.at = after(t.next(), t.at);  // tried (the summary may have failed): not again
    EXPECT_EQ(t.at.compaction_tried, response);
    EXPECT_EQ(t.next(), step(step_kind::run_tools));
}

TEST(NextStep, InputThatArrivesBeforeMarkIdleIsDrainedByAnotherCheckpoint) {
    script t;
    t.enqueue(user_in(lane::follow_up, "a", "hello"));
    t.checkpoint();
    t.respond(reply("hi"));
    t.checkpoint();
    EXPECT_EQ(t.next(), step(step_kind::mark_idle));
    t.enqueue(user_in(lane::follow_up, "b", "one more"));  // arrives before mark_idle commits
    t.mark_idle();
    EXPECT_TRUE(t.s.has_work);  // the lanes were not empty: has_work stays
    EXPECT_EQ(t.next(), step(step_kind::checkpoint));
    t.checkpoint();
    EXPECT_EQ(t.next(), step(step_kind::infer));
}

TEST(NextStep, AStepEndsTheCheckpointAndAPauseOrIdleChangesNoPosition) {
    const loop_position at{entry_seq{4}, true, true};
    EXPECT_EQ(after(step(step_kind::infer), at), (loop_position{entry_seq{4}, false, false}));
    EXPECT_EQ(after(step(step_kind::run_tools), at), (loop_position{entry_seq{4}, false, false}));
    EXPECT_EQ(after(step(step_kind::compact, 9), at), (loop_position{entry_seq{9}, false, false}));
    EXPECT_EQ(after(step(step_kind::pause), at), at);
    EXPECT_EQ(after(step(step_kind::idle), at), at);
    EXPECT_EQ(step_name(step_kind::mark_idle), "mark_idle");
}

TEST(InferenceError, TransientErrorsBackOffWithJitterThenGiveUp) {
    retry_policy p;  // base 500 ms, cap 30 s, 6 attempts
    inference_attempts a;
    const inference_error e{inference_error_kind::transient, "503"};
    int draws = 0;
    auto unit = [&draws](double u) {
        return std::function<double()>([&draws, u] {
            ++draws;
            return u;
        });
    };
    EXPECT_EQ(on_inference_error(e, a, p, unit(0.0)),
              inference_decision{retry_after{milliseconds(250)}});
    EXPECT_EQ(on_inference_error(e, a, p, unit(0.999)),
              inference_decision{retry_after{milliseconds(999)}});
    for (int i = 3; i < p.max_attempts; ++i) {
        EXPECT_TRUE(std::holds_alternative<retry_after>(on_inference_error(e, a, p, unit(0.5))));
    }
    EXPECT_EQ(draws, p.max_attempts - 1);
    EXPECT_EQ(on_inference_error(e, a, p, unit(0.5)),
              (inference_decision{
                  give_up{diagnostic{"inference_failed", "gave up after 6 attempts: 503"}}}));
    EXPECT_EQ(a.transient_failures, 6);
    EXPECT_EQ(draws, p.max_attempts - 1) << "no jitter is drawn for a wait that never comes";
}

// Issue 14: a 429's Retry-After is honoured: the wait is at least what the server asked (up to
// max_server_wait), and never shorter than the backoff.
TEST(InferenceError, ATransientErrorWaitsAtLeastWhatTheServerAskedFor) {
    retry_policy p;  // base 500 ms; the first retry waits 250-500 ms
    inference_attempts a;
    const auto half = [] { return 0.5; };
    inference_error e{inference_error_kind::transient, "429", milliseconds(7000)};
    EXPECT_EQ(on_inference_error(e, a, p, half), inference_decision{retry_after{milliseconds(7000)}});
    e.retry_after = milliseconds(1);
    EXPECT_EQ(on_inference_error(e, a, p, half), inference_decision{retry_after{milliseconds(750)}})
        << "the backoff is longer";
    e.retry_after = std::chrono::hours(2);
    EXPECT_EQ(on_inference_error(e, a, p, half), inference_decision{retry_after{p.max_server_wait}});
    EXPECT_EQ(a.transient_failures, 3);
}

TEST(InferenceError, ContextOverflowCompactsThenRetriesOnceThenReportsInputTooLarge) {
    retry_policy p;
    inference_attempts a;
    const inference_error e{inference_error_kind::context_overflow, "too long"};
    const std::function<double()> never = [] {
        ADD_FAILURE() << "an overflow draws no jitter";
        return 0.5;
    };
    EXPECT_EQ(on_inference_error(e, a, p, never), inference_decision{compact_then_retry{}});
    EXPECT_TRUE(a.overflow_retried);
    EXPECT_EQ(on_inference_error(e, a, p, never),
              (inference_decision{give_up{diagnostic{
                  "input_too_large", "the context overflowed even after compaction: too long"}}}));
}

TEST(InferenceError, FatalErrorsAreReportedAtOnce) {
    inference_attempts a;
    const std::function<double()> never = [] {
        ADD_FAILURE() << "a fatal error draws no jitter";
        return 0.5;
    };
    EXPECT_EQ(on_inference_error({inference_error_kind::fatal, "401 bad key"}, a, {}, never),
              (inference_decision{give_up{diagnostic{"inference_failed", "401 bad key"}}}));
    EXPECT_EQ(a, inference_attempts{});
}

TEST(InferenceError, BackoffDoublesUpToTheCapWithEqualJitter) {
    EXPECT_EQ(backoff({}, 1, 0.0), milliseconds(250));
    EXPECT_EQ(backoff({}, 2, 0.0), milliseconds(500));
    EXPECT_EQ(backoff({}, 3, 0.5), milliseconds(1500));
    EXPECT_EQ(backoff({}, 30, 0.999), milliseconds(29985));  // capped at 30 s
    EXPECT_EQ(kind_name(inference_error_kind::context_overflow), "context_overflow");
}

TEST(Takeover, ACutOffTurnIsRecordedAndASessionBetweenTurnsIsNot) {
    script t;
    EXPECT_FALSE(takeover_interruption(t.s).has_value());
    t.enqueue(user_in(lane::follow_up, "a", "work"));
    t.checkpoint();  // the owner stops while streaming the answer
    auto streaming = takeover_interruption(t.s);
    ASSERT_TRUE(streaming.has_value());
    EXPECT_EQ(streaming->kind, interruption_kind::owner_lost);
    EXPECT_EQ(streaming->reason, "the previous owner stopped while this turn was in progress");
    t.respond(reply("", {{"c1", "echo"}, {"c2", "charge"}}));
    EXPECT_FALSE(takeover_interruption(t.s).has_value()) << "no call had started";
    t.run(plan_tool_will_execute(t.s, call_id("c1"), unix_ms{++t.now}));
    auto mid_tool = takeover_interruption(t.s);
    ASSERT_TRUE(mid_tool.has_value());
    EXPECT_EQ(mid_tool->reason, "the previous owner stopped while running tool calls c1 (echo)");
    t.run(plan_tool_did_execute(t.s, result_of("c1", "ok"), unix_ms{++t.now}));
    t.run(plan_tool_will_execute(t.s, call_id("c2"), unix_ms{++t.now}));
    EXPECT_EQ(takeover_interruption(t.s)->reason,
              "the previous owner stopped while running tool calls c2 (charge)");
    t.run(plan_tool_did_execute(t.s, result_of("c2", "ok"), unix_ms{++t.now}));
    EXPECT_TRUE(takeover_interruption(t.s).has_value()) << "the results await a response";
    t.checkpoint();
    t.respond(reply("done"));
    EXPECT_FALSE(takeover_interruption(t.s).has_value());
}

TEST(ToolPolicy, FinishedCallsAreSkippedAndNewOnesRun) {
    tool_call_state c{tool_call{call_id("c1"), "echo", "{}"},
                      tool_status::finished,
                      approval_status::none,
                      {},
                      decision::reject,
                      {}};
    EXPECT_EQ(next_tool_action(c, tool_kind::idempotent), tool_action::skip);
    c.status = tool_status::not_started;
    EXPECT_EQ(next_tool_action(c, tool_kind::not_idempotent), tool_action::run);
}

TEST(ToolPolicy, AnUnknownOrDisabledToolGetsAnErrorResult) {
    tool_call_state c{tool_call{call_id("c1"), "rm", "{}"},
                      tool_status::not_started,
                      approval_status::none,
                      {},
                      decision::reject,
                      {}};
    EXPECT_EQ(next_tool_action(c, tool_kind::unavailable), tool_action::unknown);
    EXPECT_EQ(unknown_tool_result("rm"), "unknown tool: rm");
}

TEST(ToolPolicy, AStartedCallRunsAgainOnlyWhenIdempotent) {
    tool_call_state c{tool_call{call_id("c1"), "clock", "{}"},
                      tool_status::started,
                      approval_status::none,
                      {},
                      decision::reject,
                      {}};
    EXPECT_EQ(next_tool_action(c, tool_kind::idempotent), tool_action::run);
    EXPECT_EQ(next_tool_action(c, tool_kind::not_idempotent), tool_action::interrupted);
    EXPECT_NE(interrupted_tool_result().find("not run again"), std::string::npos);
}

}  // namespace wuhu::testing
