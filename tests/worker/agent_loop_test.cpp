// The agent loop's rules (agent-loop.md, agentic-loop-contracts.md, session-contracts.md), each
// a deterministic test: in-memory store, scripted provider, manual clock. Here: the lanes and
// their checkpoints, cancel, order across lanes, compaction, abort.
#include "session/context.hpp"
#include "session/reducer.hpp"
#include "session/text.hpp"
#include "storage/faulty_store.hpp"
#include "tests/worker/loop_harness.hpp"

#include <gmock/gmock.h>
#include <boost/asio/detached.hpp>
#include <boost/asio/thread_pool.hpp>

#include <future>

namespace wuhu::testing {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(AgentLoop, AFollowUpRunsOneTurnAndGoesIdle) {
    loop_harness h(R"({"responses":[{"text":"hello there"}]})");
    h.start();
    auto r = h.follow_up("f1", "hi");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->id->str(), "f1");
    h.settle();
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:hi", "assistant:hello there"));
    EXPECT_FALSE(h.state().has_work);
    EXPECT_EQ(h.loop().current(), loop_state::idle);
    // The store holds exactly what the loop holds (persist first).
    auto log = h.store().open(session_id::parse("s1").value(), lease_epoch{1}).value();
    EXPECT_EQ(log->load().value(), h.state());
}

TEST(AgentLoop, ToolCallsRunInOrderBetweenWillAndDidExecute) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"echo","arguments":{"text":"one"}},
                       {"name":"echo","arguments":{"text":"two"}}]},
        {"text":"done"}]})");
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    // Both calls are started with the response (one commit), run in order, and their results
    // committed together.
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo+echo", "started:echo", "started:echo",
                            "result:one", "result:two", "assistant:done"));
    // The second inference saw both results.
    ASSERT_EQ(h.provider().requests().size(), 2u);
    EXPECT_TRUE(context_mentions(h.provider().requests()[1], "two"));
}

TEST(SteerCheckpoint, ASteerSentDuringToolExecutionIsInTheVeryNextInference) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"sleep","arguments":{"ms":5000}}]},
        {"text":"adjusted"}]})");
    h.start();
    h.follow_up("f1", "start");
    ASSERT_TRUE(h.run_until([&] { return h.loop().current() == loop_state::executing_tools; }));
    h.steer("s1", "use the other file");
    h.settle();
    ASSERT_EQ(h.provider().requests().size(), 2u);
    EXPECT_TRUE(context_mentions(h.provider().requests()[1], "use the other file"));
    EXPECT_THAT(
        h.transcript_texts(),
        ElementsAre("party:start", "assistant:+sleep", "started:sleep", "result:slept 5000 ms",
                    "party:use the other file", "assistant:adjusted"));
}

TEST(FollowUpCheckpoint, AFollowUpSentDuringATurnWaitsForTheTurnToEnd) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"sleep","arguments":{"ms":5000}}]},
        {"text":"turn one done"},
        {"text":"turn two"}]})");
    h.start();
    h.follow_up("f1", "first");
    ASSERT_TRUE(h.run_until([&] { return h.loop().current() == loop_state::executing_tools; }));
    h.follow_up("f2", "second");
    h.settle();
    ASSERT_EQ(h.provider().requests().size(), 3u);
    EXPECT_FALSE(context_mentions(h.provider().requests()[1], "second"));
    EXPECT_TRUE(context_mentions(h.provider().requests()[2], "second"));
    EXPECT_THAT(
        h.transcript_texts(),
        ElementsAre("party:first", "assistant:+sleep", "started:sleep", "result:slept 5000 ms",
                    "assistant:turn one done", "party:second", "assistant:turn two"));
}

TEST(Cancel, BeforeMaterializationTheItemNeverReachesTheTranscript) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"sleep","arguments":{"ms":5000}}]},
        {"text":"ok"}]})");
    h.start();
    h.follow_up("f1", "first");
    ASSERT_TRUE(h.run_until([&] { return h.loop().current() == loop_state::executing_tools; }));
    h.follow_up("f2", "never mind this");
    auto c = h.send(worker::cancel_command{lane::follow_up, item("f2")});
    ASSERT_TRUE(c);
    EXPECT_TRUE(*c->canceled);
    h.settle();
    for (const auto& t : h.transcript_texts()) {
        EXPECT_THAT(t, ::testing::Not(HasSubstr("never mind")));
    }
    EXPECT_EQ(h.state().find_item("f2")->status, item_status::canceled);
}

TEST(Cancel, AfterMaterializationItReportsNotCanceled) {
    loop_harness h(R"({"responses":[{"text":"ok"}]})");
    h.start();
    h.follow_up("f1", "hi");
    h.settle();
    auto c = h.send(worker::cancel_command{lane::follow_up, item("f1")});
    ASSERT_TRUE(c);
    EXPECT_FALSE(*c->canceled);
    auto sys = h.send(worker::cancel_command{lane::system, item("f1")});
    EXPECT_EQ(sys.error(), make_error_code(errc::item_not_found)) << "f1 is no system item";
}

TEST(CrossLaneOrder, SystemCallbacksInterleaveWithSteerByEnqueueTime) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"sleep","arguments":{"ms":30000}}]},
        {"text":"ok"}]})");
    h.start();
    h.follow_up("f1", "go");
    ASSERT_TRUE(h.run_until([&] { return h.loop().current() == loop_state::executing_tools; }));
    h.steer("a", "steer one");
    h.clock().advance(milliseconds(10));
    h.system("b", "callback one");
    h.clock().advance(milliseconds(10));
    h.steer("c", "steer two");
    h.clock().advance(milliseconds(10));
    h.system("d", "callback two");
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+sleep", "started:sleep",
                            "result:slept 30000 ms", "party:steer one", "system:callback one",
                            "party:steer two", "system:callback two", "assistant:ok"));
}

TEST(Compaction, SummariesStackOverThreeCompactions) {
    // Every response reports usage above the threshold, so each one triggers a compaction.
    // Replies are ~30 tokens: each compaction keeps the newest reply and summarizes the rest.
    const std::string pad(120, '.');
    loop_harness h(R"({"responses":[
        {"text":"r0 )" +
                   pad + R"(","usage":{"input":950}},
        {"text":"r1 )" +
                   pad + R"(","usage":{"input":950}},
        {"text":"r2 )" +
                   pad + R"(","usage":{"input":950}},
        {"text":"r3"}],
        "summaries":["S1","S2","S3"]})");
    h.start();
    ASSERT_TRUE(h.send(limits(1000, 100, 20)));
    for (int i = 0; i < 4; ++i) {
        h.follow_up("f" + std::to_string(i), std::string(200, 'a' + static_cast<char>(i)));
        h.settle();
    }
    auto texts = h.transcript_texts();
    EXPECT_EQ(std::count_if(texts.begin(), texts.end(),
                            [](const std::string& t) { return t.starts_with("compaction:"); }),
              3);
    // The fourth inference saw the three summaries in order, then the kept entries.
    const auto& last = h.provider().requests()[3].context;
    std::vector<std::string> summaries;
    for (const auto& m : last) {
        if (m.content.starts_with(session::summary_preamble)) {
            summaries.push_back(m.content.substr(session::summary_preamble.size()));
        }
    }
    EXPECT_THAT(summaries, ElementsAre("S1", "S2", "S3"));
    EXPECT_TRUE(context_mentions(h.provider().requests()[3], std::string(200, 'd')));
}

TEST(Compaction, ContextOverflowCompactsThenRetriesOnceWithTheMaterializedInput) {
    loop_harness h(R"({"responses":[
        {"text":"r0"},
        {"text":"r1"},
        {"text":"after overflow","fail_first":[{"kind":"context_overflow","message":"too long"}]}],
        "summaries":["S1"]})");
    h.start();
    ASSERT_TRUE(h.send(worker::configure_command{[] {
        session::settings_update c;
        c.keep_recent_tokens = 10;
        return c;
    }()}));
    h.follow_up("f0", "first message");
    h.settle();
    h.follow_up("f1", "second message");
    h.settle();
    h.follow_up("f2", "third message");
    h.settle();
    EXPECT_EQ(h.provider().attempts(2), 2);
    auto texts = h.transcript_texts();
    EXPECT_THAT(texts, ::testing::Contains("compaction:S1"));
    EXPECT_EQ(texts.back(), "assistant:after overflow");
    // The retry carried the input materialized before the overflow, exactly once.
    EXPECT_TRUE(context_mentions(h.provider().requests().back(), "third message"));
    EXPECT_EQ(std::count(texts.begin(), texts.end(), "party:third message"), 1);
}

// Issue 31, defect 11: an overflow of a session with nothing older to compact was reported as
// "the context overflowed even after compaction", though nothing was compacted.
TEST(Compaction, AnOverflowWithNothingToCompactSaysSo) {
    loop_harness h(R"({"responses":[
        {"text":"never","fail_first":[{"kind":"context_overflow","message":"too long"}]}]})");
    h.start();
    h.follow_up("f0", "the first message");
    h.settle();
    EXPECT_EQ(h.transcript_texts().back(), "diagnostic:input_too_large");
    EXPECT_EQ(h.diagnostic_message(),
              "the context overflowed, and nothing older could be compacted: too long");
    EXPECT_THAT(h.transcript_texts(),
                ::testing::Not(::testing::Contains(HasSubstr("compaction:"))));
}

TEST(Compaction, InputThatCannotFitEvenAfterCompactionIsAVisibleError) {
    loop_harness h(R"({"responses":[{"text":"never"}]})");
    h.start();
    ASSERT_TRUE(h.send(limits(100, 10, 50)));
    h.follow_up("big", std::string(4000, 'x'));
    h.settle();
    EXPECT_EQ(h.transcript_texts().back(), "diagnostic:input_too_large");
    EXPECT_EQ(h.diagnostic_message(),
              "the queued input does not fit in the context window, and nothing older could be "
              "compacted");
    EXPECT_EQ(h.provider().calls(), 0u);
    EXPECT_FALSE(h.state().has_work);
}

// Issue 31, defect 3: abort said {"ok":true} whatever happened, and did nothing during a
// compaction, a commit or between steps. Each reply now says what it stopped, and an abort
// stops the turn in every loop state.
TEST(Abort, DuringInferenceRecordsAnInterruptionAndGoesIdle) {
    loop_harness h(R"({"responses":[
        {"chunks":["partial ","answer"],"chunk_delay_ms":10000}]})");
    h.start();
    h.follow_up("f1", "hi");
    ASSERT_TRUE(h.run_until([&] { return h.loop().current() == loop_state::inferring; }, false));
    auto r = h.send(worker::abort_command{"user pressed stop"});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->aborted.stopped, abort_stage::inference);
    EXPECT_EQ(r->aborted.entry, entry_seq{2});
    EXPECT_FALSE(r->aborted.duplicate);
    h.settle();
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:hi", "aborted:user pressed stop"));
    EXPECT_EQ(std::get<interruption>(h.state().transcript[1].body).stopped,
              abort_stage::inference);
    EXPECT_EQ(events_of<worker::stream_ended_event>(h).back().committed, false);
    // It continues with queued input: the next follow-up is answered. The aborted turn is not
    // redone, and nothing of its partial text is in the context. (The script answers by step,
    // and no assistant message was added, so the answer is step 0's again.)
    h.follow_up("f2", "again");
    h.settle();
    EXPECT_EQ(h.transcript_texts().back(), "assistant:partial answer");
    EXPECT_TRUE(context_mentions(h.provider().requests().back(), "again"));
    EXPECT_FALSE(context_mentions(h.provider().requests().back(), "partial"));
    EXPECT_EQ(h.provider().calls(), 2u);
}

TEST(Abort, DuringAToolClosesTheRemainingCallsAndRecordsAnInterruption) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"sleep","arguments":{"ms":60000}},
                       {"name":"echo","arguments":{"text":"never runs"}}]}]})");
    h.start();
    h.follow_up("f1", "go");
    ASSERT_TRUE(
        h.run_until([&] { return h.loop().current() == loop_state::executing_tools; }, false));
    auto r = h.send(worker::abort_command{"stop"});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->aborted.stopped, abort_stage::tool);
    EXPECT_EQ(r->aborted.entry, entry_seq{7});
    h.settle();
    EXPECT_THAT(
        h.transcript_texts(),
        ElementsAre("party:go", "assistant:+sleep+echo", "started:sleep", "started:echo",
                    "error:aborted: stop", "error:not run: the turn was aborted", "aborted:stop"));
    EXPECT_FALSE(h.state().has_work);
}

// The first call's race ended its abort wait (cancelled, without an exception); an abort
// during the second call must still end that one. (On Asio 1.81 a channel whose receive was
// cancelled refuses notifications until it is drained again: arm() drains it.)
TEST(Abort, DuringALaterToolOfTheTurnStillStopsIt) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"echo","arguments":{"text":"first"}},
                       {"name":"sleep","arguments":{"ms":60000}}]}]})");
    h.start();
    h.follow_up("f1", "go");
    ASSERT_TRUE(h.run_until(
        [&] {
            // The sleep runs: its own sleep, its backstop and the first result's linger.
            return h.loop().current() == loop_state::executing_tools &&
                   h.clock().sleepers() >= 3;
        },
        false));
    EXPECT_EQ(h.send(worker::abort_command{"stop"})->aborted.stopped, abort_stage::tool);
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo+sleep", "started:echo", "started:sleep",
                            "result:first", "error:aborted: stop", "aborted:stop"));
    EXPECT_FALSE(h.state().has_work);
}

TEST(Abort, WithNoTurnInProgressStopsNothingAndSaysSo) {
    loop_harness h(R"({"responses":[{"text":"done"}]})");
    h.start();
    auto r = h.send(worker::abort_command{});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->aborted.stopped, abort_stage::none);
    EXPECT_TRUE(h.state().transcript.empty());
    h.follow_up("f1", "hi");
    h.settle();
    EXPECT_EQ(h.send(worker::abort_command{})->aborted.stopped, abort_stage::none);
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:hi", "assistant:done"));
}

TEST(Abort, DuringTheBackoffBeforeARetryStopsTheTurnWithoutRetrying) {
    loop_harness h(R"({"responses":[{"text":"never","fail_first":[
        {"kind":"transient","message":"503"},{"kind":"transient","message":"503"}]}]})");
    h.start();
    h.follow_up("f1", "hi");
    // The first attempt failed: the loop sleeps out its backoff.
    ASSERT_TRUE(h.run_until(
        [&] { return h.provider().calls() == 1u && h.clock().sleepers() >= 1; }, false));
    auto r = h.send(worker::abort_command{"enough"});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->aborted.stopped, abort_stage::backoff);
    h.settle();
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:hi", "aborted:enough"));
    EXPECT_EQ(h.provider().calls(), 1u) << "no retry after the abort";
    EXPECT_FALSE(h.state().has_work);
}

// A compaction's summary is abandoned (nothing of it is written), and the turn it was part
// of stops: its tool call is not run. The next response may compact again.
TEST(Abort, DuringACompactionSummaryAbandonsItAndStopsTheTurn) {
    const std::string pad(120, '.');
    loop_harness h(R"({"responses":[
        {"text":"r0 )" + pad + R"(","usage":{"input":950},
         "tool_calls":[{"name":"echo","arguments":{"text":"x"}}]},
        {"text":"r1"}],
        "summary_delay_ms":60000})");
    h.start();
    ASSERT_TRUE(h.send(limits(1000, 100, 20)));
    h.follow_up("f1", std::string(200, 'a'));
    ASSERT_TRUE(
        h.run_until([&] { return h.loop().current() == loop_state::compacting; }, false));
    auto r = h.send(worker::abort_command{"too slow"});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->aborted.stopped, abort_stage::compaction);
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre(std::string("party:") + std::string(200, 'a'),
                            "assistant:r0 " + pad + "+echo",
                            "error:not run: the turn was aborted", "aborted:too slow"));
    EXPECT_EQ(h.state().transcript[r->aborted.entry.value - 1].id, r->aborted.entry);
    EXPECT_FALSE(h.state().has_work);
    // The session goes on: the next turn is answered.
    h.follow_up("f2", "next");
    h.settle();
    EXPECT_EQ(h.transcript_texts().back(), "assistant:r1");
}

// Between two steps (here: input taken and the inference not begun) nothing is armed; the
// abort stops the turn before its next step runs.
TEST(Abort, BetweenTwoStepsStopsTheTurnBeforeItsNextStep) {
    loop_harness h(R"({"responses":[{"text":"never"}]})");
    h.start();
    auto replies = h.send_all({worker::enqueue_command{user_in(lane::follow_up, "f1", "hi")},
                               worker::abort_command{"changed my mind"}});
    ASSERT_TRUE(replies[0]);
    ASSERT_TRUE(replies[1]);
    EXPECT_EQ(replies[1]->aborted.stopped, abort_stage::step);
    h.settle();
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:hi", "aborted:changed my mind"));
    EXPECT_EQ(h.provider().calls(), 0u);
}

// An abort that arrives while the loop commits (the response with its tool call, held in the
// store) stops the turn after that commit: the call is not run.
TEST(Abort, DuringACommitStopsTheTurnAfterIt) {
    storage::memory_store inner;
    storage::faulty_store store(inner);
    asio::thread_pool pool(1);
    auto opts = loop_harness::default_options();
    opts.store_executor = pool.get_executor();
    loop_harness h(R"({"responses":[
        {"delay_ms":1000,"tool_calls":[{"name":"echo","arguments":{"text":"x"}}]},
        {"text":"never"}]})",
                   &store, 1, opts);
    auto wait_for = [&h](const std::function<bool()>& done) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (std::chrono::steady_clock::now() < deadline) {
            h.poll();
            if (done()) {
                return true;
            }
            std::this_thread::sleep_for(milliseconds(1));
        }
        return false;
    };
    auto spawn = [&h](worker::command c, std::optional<boost::system::result<command_reply>>* out) {
        asio::co_spawn(h.io(), h.loop().send(std::move(c)),
                       [out](std::exception_ptr, boost::system::result<command_reply> r) {
                           *out = std::move(r);
                       });
    };
    h.start();
    std::optional<boost::system::result<command_reply>> queued, aborted;
    spawn(worker::enqueue_command{user_in(lane::follow_up, "f1", "go")}, &queued);
    ASSERT_TRUE(wait_for([&] { return queued.has_value() && h.clock().sleepers() >= 1; }));
    store.hold_commits();
    h.clock().advance(milliseconds(1000));  // the response comes; its commit is held
    ASSERT_TRUE(wait_for([&] { return store.held_commits() == 1; }));
    spawn(worker::abort_command{"stop"}, &aborted);
    h.poll();
    EXPECT_FALSE(aborted.has_value()) << "answered before the turn stopped";
    store.release_commits();
    ASSERT_TRUE(wait_for([&] { return aborted.has_value() && h.loop().quiescent(); }));
    ASSERT_TRUE(*aborted);
    EXPECT_EQ((*aborted)->aborted.stopped, abort_stage::step);
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo", "started:echo",
                            "error:not run: the turn was aborted", "aborted:stop"));
    pool.join();
}

// A loop whose start() returned (a worker stopping cancels it mid-turn) takes no abort any more:
// one that waited for it, or comes later, is answered `closed` (routed again) at once, never
// left waiting (the worker's drain would wait for it forever). Found in review.
TEST(Abort, AfterTheLoopStoppedIsAnsweredClosedAtOnce) {
    loop_harness h(R"({"responses":[{"text":"never","delay_ms":600000}]})");
    h.start();
    h.follow_up("f1", "hi");
    ASSERT_TRUE(h.run_until([&] { return h.loop().current() == loop_state::inferring; }, false));
    h.stop();
    auto r = h.send(worker::abort_command{"too late"});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), make_error_code(storage::errc::closed));
}

// A retried abort (its reply was lost) must not stop the turn that came after the first one:
// the same id gets the first answer, from this owner or from a new one (the transcript).
TEST(Abort, ARetryWithTheSameIdGetsTheFirstAnswerAndStopsNothingMore) {
    storage::memory_store store;
    const char* script = R"({"responses":[
        {"chunk_delay_ms":10000,"chunks":["o","ne"]},
        {"chunk_delay_ms":10000,"chunks":["t","wo"]}]})";
    worker::abort_outcome first;
    {
        loop_harness h(script, &store);
        h.start();
        h.follow_up("f1", "hi");
        ASSERT_TRUE(
            h.run_until([&] { return h.loop().current() == loop_state::inferring; }, false));
        auto r = h.send(worker::abort_command{"stop", "stop-1"});
        ASSERT_TRUE(r);
        first = r->aborted;
        EXPECT_EQ(first.stopped, abort_stage::inference);
        EXPECT_EQ(std::get<interruption>(h.state().transcript[1].body).abort_id, "stop-1");
        // The next turn streams; the retry answers the first outcome and stops nothing.
        h.follow_up("f2", "again");
        ASSERT_TRUE(
            h.run_until([&] { return h.loop().current() == loop_state::inferring; }, false));
        auto retry = h.send(worker::abort_command{"stop", "stop-1"});
        ASSERT_TRUE(retry);
        EXPECT_EQ(retry->aborted.stopped, first.stopped);
        EXPECT_EQ(retry->aborted.entry, first.entry);
        EXPECT_TRUE(retry->aborted.duplicate);
        // An id that stopped nothing is remembered too.
        h.settle();
        EXPECT_EQ(h.transcript_texts().back(), "assistant:one");
        EXPECT_EQ(h.send(worker::abort_command{"late", "stop-2"})->aborted.stopped,
                  abort_stage::none);
        h.follow_up("f3", "more");
        ASSERT_TRUE(
            h.run_until([&] { return h.loop().current() == loop_state::inferring; }, false));
        auto again = h.send(worker::abort_command{"late", "stop-2"});
        EXPECT_EQ(again->aborted.stopped, abort_stage::none);
        EXPECT_TRUE(again->aborted.duplicate);
        h.settle();
        EXPECT_EQ(h.transcript_texts().back(), "assistant:two");
    }
    // A new owner finds the first id in the transcript.
    loop_harness next(script, &store, 2);
    next.start();
    auto r = next.send(worker::abort_command{"stop", "stop-1"});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->aborted.stopped, abort_stage::inference);
    EXPECT_EQ(r->aborted.entry, first.entry);
    EXPECT_TRUE(r->aborted.duplicate);
}

}  // namespace wuhu::testing
