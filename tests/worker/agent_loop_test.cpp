// The agent loop's rules (agent-loop.md, agentic-loop-contracts.md, session-contracts.md), each
// a deterministic test: in-memory store, scripted provider, manual clock.
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

namespace {

bool context_mentions(const providers::inference_request& r, const std::string& text) {
    for (const auto& m : r.context) {
        if (m.content.find(text) != std::string::npos) {
            return true;
        }
    }
    return false;
}

template <class E>
std::vector<E> events_of(const loop_harness& h) {
    std::vector<E> out;
    for (const auto& e : h.events()) {
        if (const auto* x = std::get_if<E>(&e)) {
            out.push_back(*x);
        }
    }
    return out;
}

// A configure command that sets the context limits (compaction triggers above
// limit - buffer and keeps the newest `keep` tokens).
worker::configure_command limits(std::uint64_t limit, std::uint64_t buffer, std::uint64_t keep) {
    session::settings_update c;
    c.context_limit = limit;
    c.compaction_buffer = buffer;
    c.keep_recent_tokens = keep;
    return worker::configure_command{c};
}

}  // namespace

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

TEST(Retry, TransientErrorsAreRetriedWithCappedExponentialBackoff) {
    loop_harness h(R"({"responses":[{"text":"finally","fail_first":[
        {"kind":"transient","message":"503"},{"kind":"transient","message":"429"},
        {"kind":"transient","message":"reset"}]}]})");
    h.start();
    const auto t0 = h.clock().now();
    h.follow_up("f1", "hi");
    h.settle();
    EXPECT_EQ(h.provider().attempts(0), 4);
    EXPECT_EQ(h.transcript_texts().back(), "assistant:finally");
    // Waits of 250-500, 500-1000 and 1000-2000 ms (base 500 ms, equal jitter).
    auto waited = h.clock().now().value - t0.value;
    EXPECT_GE(waited, 250 + 500 + 1000);
    EXPECT_LT(waited, 500 + 1000 + 2000);
    EXPECT_EQ(session::backoff({}, 1, 0.0), milliseconds(250));
    EXPECT_EQ(session::backoff({}, 30, 0.999), milliseconds(29985));  // capped at 30 s
}

TEST(Retry, GivesUpAfterMaxAttemptsWithAVisibleError) {
    auto opts = loop_harness::default_options();
    opts.retry.max_attempts = 2;
    loop_harness h(R"({"responses":[{"text":"x","fail_first":[
        {"kind":"transient"},{"kind":"transient"},{"kind":"transient"}]}]})",
                   nullptr, 1, opts);
    h.start();
    h.follow_up("f1", "hi");
    h.settle();
    EXPECT_EQ(h.provider().attempts(0), 2);
    EXPECT_EQ(h.transcript_texts().back(), "diagnostic:inference_failed");
    EXPECT_FALSE(h.state().has_work);
}

TEST(Timeouts, AnInferenceTimeoutIsRetriedLikeATransientError) {
    auto opts = loop_harness::default_options();
    opts.inference.total = milliseconds(1000);
    opts.retry.max_attempts = 2;
    loop_harness h(R"({"responses":[{"text":"slow","delay_ms":5000}]})", nullptr, 1, opts);
    h.start();
    h.follow_up("f1", "hi");
    h.settle();
    EXPECT_EQ(h.provider().attempts(0), 2);
    EXPECT_EQ(h.transcript_texts().back(), "diagnostic:inference_failed");
}

// Issue 31, defect 2: an attempt, stream included, was cut at a fixed 120 s, retried and failed.
// A five-minute answer that keeps streaming (a chunk every 10 s) is committed whole, under the
// default limits (first byte 60 s, idle 300 s, 1 h in all), on the harness's manual clock.
TEST(Timeouts, AFiveMinuteStreamIsCommittedWhole) {
    std::string chunks;
    std::string whole;
    for (int i = 0; i < 31; ++i) {
        chunks += (i ? "," : "") + std::string("\"c") + std::to_string(i) + " \"";
        whole += "c" + std::to_string(i) + " ";
    }
    loop_harness h(R"({"responses":[{"chunks":[)" + chunks + R"(],"chunk_delay_ms":10000}]})");
    h.start();
    h.follow_up("f1", "hi");
    h.settle();
    EXPECT_EQ(h.provider().attempts(0), 1) << "never cut, never retried";
    EXPECT_EQ(h.transcript_texts().back(), "assistant:" + whole);
}

// A stream that goes quiet longer than the idle limit ends the attempt with a transient error,
// retried; one whose first byte does not come within its limit likewise. Each says which.
TEST(Timeouts, AQuietStreamOrALateFirstByteEndsTheAttemptAndIsRetried) {
    auto opts = loop_harness::default_options();
    opts.inference.first_byte = milliseconds(20'000);
    opts.inference.idle = milliseconds(30'000);
    opts.retry.max_attempts = 2;
    {
        // The idle limit applies from the first byte on, well before the first byte's limit
        // (60 s here) would have passed.
        auto idle_only = opts;
        idle_only.inference.first_byte = milliseconds(60'000);
        loop_harness h(R"({"responses":[{"chunks":["a","b"],"chunk_delay_ms":45000}]})", nullptr,
                       1, idle_only);
        h.start();
        h.follow_up("f1", "hi");
        h.settle();
        EXPECT_EQ(h.provider().attempts(0), 2);
        EXPECT_EQ(h.transcript_texts().back(), "diagnostic:inference_failed");
        EXPECT_THAT(h.diagnostic_message(), HasSubstr("no data from the model for 30000 ms"));
        const auto& last = h.state().transcript.back();
        EXPECT_LT(last.at.value - harness_t0, 62'000)
            << "each attempt ended 30 s after its first byte (two, and a backoff under 1 s)";
    }
    {
        loop_harness h(R"({"responses":[{"text":"late","delay_ms":25000}]})", nullptr, 1, opts);
        h.start();
        h.follow_up("f1", "hi");
        h.settle();
        EXPECT_EQ(h.provider().attempts(0), 2);
        EXPECT_THAT(h.diagnostic_message(),
                    HasSubstr("no first byte from the model within 20000 ms"));
    }
    {
        // Within every limit: a first byte at 15 s, then a chunk every 25 s.
        loop_harness h(R"({"responses":[{"chunks":["a","b","c"],"delay_ms":15000,
                           "chunk_delay_ms":25000}]})",
                       nullptr, 1, opts);
        h.start();
        h.follow_up("f1", "hi");
        h.settle();
        EXPECT_EQ(h.provider().attempts(0), 1);
        EXPECT_EQ(h.transcript_texts().back(), "assistant:abc");
    }
}

// Issue 31, defect 8: how long each call of a response ran is told to observers (the tool
// duration metric), measured around the call: the commits do not say (the response's commit
// starts every call at once).
TEST(Timeouts, EachToolCallOfAResponseTellsHowLongItRan) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"sleep","arguments":{"ms":1000}},
                       {"name":"sleep","arguments":{"ms":2500}}]},
        {"text":"ok"}]})");
    h.start();
    h.follow_up("f1", "hi");
    h.settle();
    std::vector<std::int64_t> took;
    for (const auto& e : h.events()) {
        if (const auto* ran = std::get_if<worker::tool_ran_event>(&e)) {
            EXPECT_EQ(ran->tool, "sleep");
            took.push_back(ran->took.count());
        }
    }
    EXPECT_THAT(took, ElementsAre(1000, 2500));
}

TEST(Timeouts, AToolTimeoutBecomesAnErrorResult) {
    auto opts = loop_harness::default_options();
    opts.tool_timeout = milliseconds(1000);
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"sleep","arguments":{"ms":5000}}]},{"text":"ok"}]})",
                   nullptr, 1, opts);
    h.start();
    h.follow_up("f1", "hi");
    h.settle();
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:hi", "assistant:+sleep", "started:sleep",
                                                  "error:timed out after 1000 ms", "assistant:ok"));
}

namespace {

// A tool with a timeout of its own (300 ms): it records what it was told, and either ends the
// call itself at its deadline or ignores the deadline.
class deadline_tool final : public tools::tool {
  public:
    deadline_tool(bool ends_itself, std::optional<tools::tool_call_context>& seen)
        : ends_itself_(ends_itself), seen_(seen) {}
    const session::tool_spec& spec() const override { return spec_; }
    bool idempotent() const override { return false; }
    std::optional<milliseconds> timeout() const override { return milliseconds(300); }
    asio::awaitable<tools::tool_output> execute(std::string,
                                                 tools::tool_call_context ctx) override {
        seen_.emplace(ctx);
        if (ends_itself_) {
            co_await ctx.services.time().sleep_until(ctx.deadline);
            co_return tools::tool_output{"gave up at the deadline, with reasons", true};
        }
        co_await ctx.services.time().sleep(milliseconds(600000));
        co_return tools::tool_output{"never", false};
    }

  private:
    bool ends_itself_;
    std::optional<tools::tool_call_context>& seen_;
    session::tool_spec spec_{"patient", "Waits.", R"({"type":"object"})"};
};

}  // namespace

// A tool's own timeout replaces the loop's: the tool hears its deadline, and when it ends the
// call by then, its own result (which says why) is the one recorded.
TEST(Timeouts, AToolsOwnTimeoutReplacesTheLoopsAndTheToolHearsItsDeadline) {
    for (bool ends_itself : {true, false}) {
        SCOPED_TRACE(ends_itself ? "ends itself" : "ignores its deadline");
        auto opts = loop_harness::default_options();
        opts.tool_timeout = milliseconds(60000);
        loop_harness h(R"({"responses":[
            {"tool_calls":[{"name":"patient","arguments":{}}]},{"text":"ok"}]})",
                       nullptr, 1, opts);
        std::optional<tools::tool_call_context> seen;
        h.tools().add(std::make_shared<deadline_tool>(ends_itself, seen));
        h.start();
        h.follow_up("f1", "hi");
        h.settle();
        EXPECT_THAT(h.transcript_texts(),
                    ElementsAre("party:hi", "assistant:+patient", "started:patient",
                                ends_itself ? "error:gave up at the deadline, with reasons"
                                            : "error:timed out after 300 ms",
                                "assistant:ok"));
        ASSERT_TRUE(seen);
        EXPECT_EQ(seen->session.str(), "s1");
        const auto& calls = std::get<session::assistant_message>(h.state().transcript[1].body);
        EXPECT_EQ(seen->call, calls.tool_calls.at(0).id);
        // The deadline is 300 ms after the call started (the manual clock moves only when
        // nothing else can run, so the call started at the time of the tool_started entry).
        EXPECT_EQ(seen->deadline.value, h.state().transcript[2].at.value + 300);
    }
}

// Bounds (DESIGN.md "Bounds"): a lane holds at most its limit of pending items and bytes; past
// it an enqueue is refused with lane_full and changes nothing; a retry of an item it holds is
// still its duplicate; once the session takes items (or they are canceled) there is room.
TEST(Bounds, ALaneHoldsAtMostItsLimitOfPendingItemsAndBytes) {
    auto opts = loop_harness::default_options();
    opts.lanes = session::lane_limits{2, 0};
    loop_harness h(R"({"responses":[{"text":"one"},{"text":"two"}]})", nullptr, 1, opts);
    h.start();
    ASSERT_TRUE(h.send(worker::pause_command{}));
    ASSERT_TRUE(h.follow_up("f1", "a"));
    ASSERT_TRUE(h.follow_up("f2", "b"));
    const auto before = h.state().version();
    auto full = h.follow_up("f3", "c");
    ASSERT_FALSE(full);
    EXPECT_EQ(full.error(), session::errc::lane_full);
    EXPECT_EQ(h.state().version(), before) << "a refusal changes nothing";
    auto again = h.follow_up("f1", "a");
    ASSERT_TRUE(again) << "the retry of an item the lane holds is answered as before";
    EXPECT_TRUE(again->duplicate);
    ASSERT_TRUE(h.steer("s1", "another lane has its own limit"));
    ASSERT_TRUE(h.send(worker::cancel_command{lane::follow_up, item("f2")}));
    EXPECT_TRUE(h.follow_up("f3", "c")) << "a canceled item makes room";

    auto bytes = loop_harness::default_options();
    bytes.lanes = session::lane_limits{0, 10};
    loop_harness b(R"({"responses":[]})", nullptr, 1, bytes);
    b.start();
    ASSERT_TRUE(b.send(worker::pause_command{}));
    ASSERT_TRUE(b.follow_up("f1", "123456"));
    EXPECT_EQ(b.follow_up("f2", "12345").error(), session::errc::lane_full) << "11 bytes > 10";
    EXPECT_TRUE(b.follow_up("f2", "1234")) << "10 bytes fit";
}

// At most max_waiting_commands commands wait for one session's serialized section; the others
// are refused at once with overloaded (nothing of them is kept).
TEST(Bounds, CommandsPastTheSessionsWaitingLimitAreRefusedOverloaded) {
    auto opts = loop_harness::default_options();
    opts.max_waiting_commands = 4;
    loop_harness h(R"({"responses":[]})", nullptr, 1, opts);
    h.start();
    ASSERT_TRUE(h.send(worker::pause_command{}));
    std::vector<command> burst;
    for (int i = 0; i < 10; ++i) {
        burst.push_back(worker::enqueue_command{
            user_in(lane::follow_up, "f" + std::to_string(i), "x", human("u1", "Ann"))});
    }
    auto replies = h.send_all(std::move(burst));
    std::size_t ok = 0;
    std::size_t overloaded = 0;
    for (const auto& r : replies) {
        if (r) {
            ++ok;
        } else if (r.error() == session::errc::overloaded) {
            ++overloaded;
        } else {
            ADD_FAILURE() << r.error().message();
        }
    }
    EXPECT_EQ(ok, 4u);
    EXPECT_EQ(overloaded, 6u);
    EXPECT_EQ(h.state().in(lane::follow_up).pending.size(), ok) << "each ok is kept, no other";
    EXPECT_TRUE(h.follow_up("later", "x")) << "once they are answered, commands go in again";
}

// Bounds: an answer that streams past the entry limit (a provider that would stream without
// end) is stopped there and stored cut with a note, as the turn's final answer: its tool calls
// are dropped and the loop goes idle; a tool's output past the limit is stored cut.
TEST(Bounds, AnAnswerStreamingPastTheEntryLimitIsStoppedAndStoredCut) {
    auto opts = loop_harness::default_options();
    opts.max_entry_bytes = 400;
    const std::string chunk(100, 'a');
    std::string chunks;
    for (int i = 0; i < 1000; ++i) {
        chunks += (i == 0 ? "\"" : ",\"") + chunk + "\"";
    }
    loop_harness h(R"({"responses":[{"chunks":[)" + chunks +
                       R"(],"chunk_delay_ms":1,"tool_calls":[{"name":"clock"}]},{"text":"next"}]})",
                   nullptr, 1, opts);
    h.start();
    h.follow_up("f1", "talk for ever");
    h.settle();
    const auto& last = h.state().transcript.back();
    const auto* answer = std::get_if<session::assistant_message>(&last.body);
    ASSERT_NE(answer, nullptr);
    EXPECT_LE(answer->text.size(), 400u);
    EXPECT_TRUE(answer->text.ends_with(session::cut_note(400, "answer"))) << answer->text;
    EXPECT_TRUE(answer->tool_calls.empty()) << "the turn ends with the cut answer";
    EXPECT_LT(events_of<worker::stream_delta_event>(h).size(), 10u) << "the stream was stopped";
    EXPECT_EQ(h.loop().current(), loop_state::idle);
    EXPECT_EQ(h.provider().calls(), 1u);
}

// A tool whose output is far larger than what it was asked (a file dump, a search).
class verbose_tool final : public tools::tool {
  public:
    const session::tool_spec& spec() const override { return spec_; }
    bool idempotent() const override { return true; }
    asio::awaitable<tools::tool_output> execute(std::string, tools::tool_call_context) override {
        co_return tools::tool_output{std::string(2000, 'z'), false};
    }

  private:
    session::tool_spec spec_{"dump", "Dumps a lot.", R"({"type":"object"})"};
};

TEST(Bounds, AToolOutputPastTheEntryLimitIsStoredCutWithANote) {
    auto opts = loop_harness::default_options();
    opts.max_entry_bytes = 300;
    loop_harness h(R"({"responses":[{"tool_calls":[{"name":"dump"}]},{"text":"ok"}]})", nullptr,
                   1, opts);
    h.tools().add(std::make_shared<verbose_tool>());
    h.start();
    h.follow_up("f1", "echo it");
    h.settle();
    const auto texts = h.transcript_texts();
    const auto result = std::find_if(texts.begin(), texts.end(),
                                     [](const auto& t) { return t.starts_with("result:"); });
    ASSERT_NE(result, texts.end());
    EXPECT_LE(result->size(), std::string("result:").size() + 300);
    EXPECT_TRUE(result->ends_with(session::cut_note(300, "tool output"))) << *result;
    EXPECT_EQ(texts.back(), "assistant:ok") << "the model went on with the cut output";
}

// Bounds: an inference waits for the worker's (and its tenant's) slot; meanwhile the loop is
// `inferring` and the provider is not called; an abort ends the wait with an interruption; a
// slot that frees lets the turn go on.
TEST(Bounds, AnInferenceWaitsForItsSlotAndAnAbortEndsTheWait) {
    auto opts = loop_harness::default_options();
    providers::inference_slots slots({1, 0});
    opts.inferences = &slots;
    loop_harness h(R"({"responses":[{"text":"one"},{"text":"two"}]})", nullptr, 1, opts);
    std::optional<providers::inference_slots::slot> taken;
    asio::co_spawn(
        h.io(),
        [](providers::inference_slots* s, std::optional<providers::inference_slots::slot>* out)
            -> asio::awaitable<void> { out->emplace(co_await s->acquire("other")); }(&slots,
                                                                                     &taken),
        asio::detached);
    h.poll();
    ASSERT_TRUE(taken.has_value()) << "another session's inference holds the only slot";
    h.start();
    h.follow_up("f1", "hi");
    ASSERT_TRUE(h.run_until([&] { return h.loop().current() == loop_state::inferring; }, false));
    h.poll();
    EXPECT_EQ(h.provider().calls(), 0u) << "no request while it waits";
    EXPECT_EQ(slots.waiting(), 1u);
    auto r = h.send(worker::abort_command{"stop waiting"});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->aborted.stopped, abort_stage::inference);
    h.settle();
    EXPECT_EQ(h.transcript_texts().back(), "aborted:stop waiting");
    EXPECT_EQ(slots.waiting(), 0u) << "it left the line";
    h.follow_up("f2", "again");
    h.poll();
    EXPECT_EQ(h.provider().calls(), 0u);
    taken.reset();  // the other inference ends
    h.settle();
    EXPECT_EQ(h.transcript_texts().back(), "assistant:one");
    EXPECT_EQ(slots.running(), 0u);
}

TEST(Tools, UnknownOrDisabledToolsGetAnErrorResult) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"teleport"},{"name":"clock"}]},{"text":"ok"}]})");
    h.start();
    session::settings_update c;
    c.tools = std::vector<std::string>{"echo"};
    ASSERT_TRUE(h.send(worker::configure_command{c}));
    h.follow_up("f1", "hi");
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:hi", "assistant:+teleport+clock", "error:unknown tool: teleport",
                            "error:unknown tool: clock", "assistant:ok"));
}

TEST(Tools, BuiltinClockAndEcho) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"clock"},{"name":"echo","arguments":{"text":"hi"}},
                       {"name":"echo","arguments":{"wrong":1}}]},{"text":"ok"}]})");
    h.start();
    h.follow_up("f1", "time?");
    h.settle();
    auto texts = h.transcript_texts();
    EXPECT_EQ(texts[5], "result:2026-02-17T14:56:00Z");
    EXPECT_EQ(texts[6], "result:hi");
    EXPECT_THAT(texts[7], HasSubstr("error:invalid arguments"));
}

TEST(DurableTimers, ScheduleCallbackMaterializesIntoTheSystemLaneLaterExactlyOnce) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"id":"cb1","name":"schedule_callback","arguments":{"delay_ms":60000,"content":"build finished"}}]},
        {"text":"I will tell you when it is done"},
        {"text":"the build is done"}]})");
    h.start();
    h.follow_up("f1", "run the build");
    h.settle();
    EXPECT_EQ(h.state().timers.size(), 1u);
    EXPECT_EQ(h.transcript_texts().back(), "assistant:I will tell you when it is done");
    EXPECT_FALSE(h.state().has_work);
    ASSERT_TRUE(h.run_until([&] { return h.state().timers.empty() && h.loop().quiescent(); }));
    auto texts = h.transcript_texts();
    EXPECT_EQ(std::count(texts.begin(), texts.end(), "system:build finished"), 1);
    EXPECT_EQ(texts.back(), "assistant:the build is done");
    EXPECT_EQ(h.state().find_item("timer-cb1")->in, lane::system);
}

// Issue 31, defect 12: a delay past what 64-bit milliseconds hold overflowed the clock's
// arithmetic (the timer's due time, the sleep's deadline). Now a wait past a year is an error
// result the model sees, and nothing is scheduled.
TEST(DurableTimers, AWaitPastAYearIsAnErrorResultAndSchedulesNothing) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[
          {"id":"cb1","name":"schedule_callback","arguments":{"delay_ms":18446744073709551615,"content":"x"}},
          {"id":"cb2","name":"schedule_callback","arguments":{"delay_ms":9223372036854775807,"content":"x"}},
          {"id":"s1","name":"sleep","arguments":{"ms":18446744073709551615}}]},
        {"text":"understood"}]})");
    h.start();
    h.follow_up("f1", "wait forever");
    h.settle();
    EXPECT_TRUE(h.state().timers.empty());
    auto texts = h.transcript_texts();
    EXPECT_EQ(std::count_if(texts.begin(), texts.end(),
                            [](const std::string& t) { return t.starts_with("error:"); }),
              3)
        << ::testing::PrintToString(texts);
    EXPECT_EQ(texts.back(), "assistant:understood");
}

// The loop's part of a durable timer: stored with the session, it fires once for the owner
// that loads the session next (which worker does, and when, is the recovery sweep's part:
// Fleet.ADurableTimerSurvivesItsOwnerDyingAndFiresOnceWithNobodyAsking).
TEST(DurableTimers, ATimerStoredByOneOwnerFiresOnceForTheNext) {
    storage::memory_store store;
    const char* script = R"({"responses":[
        {"tool_calls":[{"id":"cb1","name":"schedule_callback","arguments":{"delay_ms":60000,"content":"ping"}}]},
        {"text":"scheduled"},
        {"text":"got the ping"}]})";
    {
        loop_harness first(script, &store, 1);
        first.start();
        first.follow_up("f1", "remind me");
        first.settle();
        EXPECT_EQ(first.state().timers.size(), 1u);
    }  // the first owner stops before the timer fires
    loop_harness second(script, &store, 2);
    second.clock().advance(milliseconds(120'000));
    second.start();
    second.settle();
    auto texts = second.transcript_texts();
    EXPECT_EQ(std::count(texts.begin(), texts.end(), "system:ping"), 1);
    EXPECT_EQ(texts.back(), "assistant:got the ping");
    EXPECT_TRUE(second.state().timers.empty());
}

TEST(Pause, APausedSessionAcceptsCommandsButDoesNotInfer) {
    loop_harness h(R"({"responses":[{"text":"resumed answer"}]})");
    h.start();
    ASSERT_TRUE(h.send(worker::pause_command{}));
    ASSERT_TRUE(h.follow_up("f1", "while paused"));
    h.settle();
    EXPECT_EQ(h.provider().calls(), 0u);
    EXPECT_TRUE(h.state().paused);
    EXPECT_TRUE(h.state().has_work);
    EXPECT_EQ(h.state().in(lane::follow_up).pending.size(), 1u);
    ASSERT_TRUE(h.send(worker::resume_command{}));
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:while paused", "assistant:resumed answer"));
}

// Spec (the state machine): inferring → idle when the response has no tool calls and nothing
// is queued; `preparing` only on the way to more work.
TEST(LoopStates, AnAnswerWithNothingQueuedGoesStraightToIdle) {
    loop_harness h(R"({"responses":[{"text":"one"},{"text":"two"}]})");
    h.start();
    h.follow_up("f1", "first");
    h.settle();
    h.follow_up("f2", "second");
    h.settle();
    std::vector<std::string> seen;
    for (const auto& e : events_of<worker::state_event>(h)) {
        seen.push_back(std::string(loop_state_name(e.to)));
    }
    EXPECT_THAT(seen, ElementsAre("preparing", "inferring", "idle", "preparing", "inferring",
                                  "idle"));
}

// Every state of DESIGN.md's loop is reached in one turn (a tool call, then a response over
// the compaction threshold), each transition is an event, and each event carries the status
// patch that tells watchers (stamped in order); the cycle ends idle with nothing to do.
TEST(LoopStates, EveryTransitionIsAnEventAndTheCycleEndsIdle) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"echo","arguments":{"text":"x"}}]},
        {"text":"ok ................................","usage":{"input":950}}],
        "summaries":["S1"]})");
    h.start();
    ASSERT_TRUE(h.send(limits(1000, 100, 20)));
    h.follow_up("f1", std::string(200, 'g'));
    h.settle();
    std::vector<std::string> seen;
    std::uint64_t last_seq = 0;
    for (const auto& e : events_of<worker::state_event>(h)) {
        seen.push_back(std::string(loop_state_name(e.to)));
        ASSERT_TRUE(e.patch.state.has_value());
        EXPECT_EQ(e.patch.state->state, e.to);
        EXPECT_EQ(e.patch.from, e.patch.to) << "a status patch changes no version";
        EXPECT_GT(e.patch.state->seq, last_seq) << "stamped in order";
        last_seq = e.patch.state->seq;
    }
    EXPECT_THAT(seen, ElementsAre("preparing", "inferring", "executing_tools", "preparing",
                                  "inferring", "compacting", "preparing", "idle"));
    const auto last = events_of<worker::state_event>(h).back().patch.state.value();
    EXPECT_EQ(last.state, loop_state::idle);
    EXPECT_FALSE(last.has_work);
    const auto now = h.loop().status_now();
    EXPECT_EQ(now.state, last.state);
    EXPECT_GT(now.seq, last.seq) << "a subscribe reply's status is newer than every event's";
}

TEST(Observe, MidStreamYieldsTheAccumulatedTextThenLiveDeltasThenTheCommit) {
    loop_harness h(R"({"responses":[{"chunks":["Hel","lo, ","world"],"chunk_delay_ms":100}]})");
    h.start();
    h.follow_up("f1", "hi");
    // Run until two chunks have streamed.
    ASSERT_TRUE(h.run_until([&] { return events_of<worker::stream_delta_event>(h).size() == 2; }));
    std::vector<loop_event> late;
    auto obs = h.loop().observe([&](const loop_event& e) { late.push_back(e); });
    ASSERT_TRUE(obs.inflight.has_value());
    EXPECT_EQ(obs.inflight->text, "Hello, ");
    EXPECT_EQ(obs.inflight->deltas, 2u);
    EXPECT_EQ(obs.loop, loop_state::inferring);
    EXPECT_EQ(obs.state.transcript.size(), 1u);  // mid-flight content is not committed state
    h.settle();
    ASSERT_GE(late.size(), 3u);
    const auto& d = std::get<worker::stream_delta_event>(late[0]);
    EXPECT_EQ(d.text, "world");
    EXPECT_EQ(d.seq, 3u);
    const auto& c = std::get<worker::committed_event>(late[1]);
    EXPECT_EQ(c.patch.from, obs.state.version());  // gap-free: chains from the snapshot
    ASSERT_EQ(c.patch.transcript.size(), 1u);
    EXPECT_EQ(std::get<assistant_message>(c.patch.transcript[0].body).text, "Hello, world");
    EXPECT_TRUE(std::get<worker::stream_ended_event>(late[2]).committed);
}

TEST(Observe, CommittedPatchesChainWithoutGaps) {
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"echo","arguments":{"text":"x"}}]},{"text":"ok"}]})");
    auto obs = h.loop().observe([](const loop_event&) {});
    h.start();
    h.follow_up("f1", "go");
    h.settle();
    version_vector v{};
    session_state replay;
    for (const auto& c : events_of<worker::committed_event>(h)) {
        EXPECT_EQ(c.patch.from, v);
        v = c.patch.to;
        apply_actions(c.actions, replay);
    }
    EXPECT_EQ(v, h.state().version());
    EXPECT_EQ(replay, h.state());
}

TEST(HasWork, IsSetWhileWorkIsQueuedAndClearedWhenTheLoopGoesIdle) {
    loop_harness h(R"({"responses":[{"text":"ok","delay_ms":1000}]})");
    h.start();
    h.follow_up("f1", "hi");
    auto log = h.store().open(session_id::parse("s1").value(), lease_epoch{1}).value();
    EXPECT_TRUE(log->load()->has_work);
    h.settle();
    EXPECT_FALSE(log->load()->has_work);
}

TEST(Latency, EnqueueDoesNotWaitForAnInferenceInProgress) {
    // The inference takes an hour of (manual) time; enqueue and cancel complete without the
    // clock moving at all, so their latency cannot depend on the inference time.
    loop_harness h(R"({"responses":[{"text":"slow","delay_ms":3600000},{"text":"next"}]})");
    h.start();
    h.follow_up("f1", "think hard");
    ASSERT_TRUE(h.run_until([&] { return h.loop().current() == loop_state::inferring; }, false));
    const auto before = h.clock().now();
    for (int i = 0; i < 20; ++i) {
        ASSERT_TRUE(h.steer("s" + std::to_string(i), "more"));
        ASSERT_TRUE(h.send(worker::cancel_command{lane::steer, item("s" + std::to_string(i))}));
    }
    EXPECT_EQ(h.clock().now(), before);
    EXPECT_EQ(h.loop().current(), loop_state::inferring);
    h.settle();
}

TEST(Lifecycle, CancellingStartTearsEverythingDown) {
    loop_harness h(R"({"responses":[{"text":"never","delay_ms":600000}]})");
    h.start();
    h.follow_up("f1", "hi");
    ASSERT_TRUE(h.run_until([&] { return h.loop().current() == loop_state::inferring; }, false));
    h.stop();
    EXPECT_TRUE(h.finished());
    EXPECT_EQ(h.clock().sleepers(), 0u);  // the inference and its timeout were cancelled
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:hi"));
}

TEST(PersistFirst, AStoreFailureFailsTheSessionAndWritesNothingMore) {
    storage::memory_store inner;
    storage::faulty_store store(inner);
    loop_harness h(R"({"responses":[{"text":"ok","delay_ms":1000}]})", &store);
    h.start();
    h.follow_up("f1", "hi");     // its reply also ran the drain
    store.fail_next_commits(1);  // the assistant entry fails to commit
    h.settle();
    EXPECT_TRUE(h.loop().failed());
    EXPECT_EQ(h.loop().failure(), make_error_code(storage::errc::unavailable));
    EXPECT_TRUE(h.finished());
    auto r = h.follow_up("f2", "after failure");
    EXPECT_EQ(r.error(), make_error_code(storage::errc::unavailable));
    auto log = inner.open(session_id::parse("s1").value(), lease_epoch{1}).value();
    EXPECT_EQ(log->load().value(), h.state());  // memory never ran ahead of the store
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:hi"));
}

TEST(Fencing, ALoopWhoseLeaseWasTakenStopsWriting) {
    storage::memory_store store;
    loop_harness old_owner(R"({"responses":[{"text":"slow","delay_ms":1000}]})", &store, 1);
    old_owner.start();
    old_owner.follow_up("f1", "hi");
    ASSERT_TRUE(old_owner.run_until(
        [&] { return old_owner.loop().current() == loop_state::inferring; }, false));
    auto takeover = store.open(session_id::parse("s1").value(), lease_epoch{2}).value();
    old_owner.settle();
    EXPECT_TRUE(old_owner.loop().failed());
    EXPECT_EQ(old_owner.loop().failure(), make_error_code(storage::errc::lease_lost));
    EXPECT_EQ(takeover->load()->transcript.size(), 1u);  // no assistant entry from the old owner
}

}  // namespace wuhu::testing

namespace wuhu::testing {

TEST(Lifecycle, LoadMakesTheStoredStateVisibleBeforeStart) {
    storage::memory_store store;
    {
        loop_harness first(R"({"responses":[{"text":"done"}]})", &store, 1);
        first.start();
        first.follow_up("f1", "hi");
        first.settle();
    }
    loop_harness second(R"({"responses":[]})", &store, 2);
    EXPECT_TRUE(second.state().transcript.empty());  // nothing read yet
    EXPECT_FALSE(second.loop().load());
    EXPECT_EQ(second.state().transcript.size(), 2u);
}

// DESIGN "Concurrency model": a command's blocking store IO runs on the store executor and
// resumes on the session's executor.
TEST(AgentLoop, CommandsCommitOnTheStoreExecutorAndResumeOnTheSession) {
    storage::memory_store inner;
    storage::faulty_store store(inner);
    asio::io_context io;
    asio::thread_pool pool(1);
    runtime::manual_clock clk(unix_ms{harness_t0});
    providers::scripted_provider provider(providers::parse_script(R"({"responses":[]})").value(),
                                          clk);
    provider.record_requests(true);
    tools::tool_registry tools;
    worker::loop_options opts;
    opts.store_executor = pool.get_executor();
    worker::agent_loop loop(io.get_executor(),
                            store.open(session_id::parse("s").value(), lease_epoch{1}).value(),
                            provider, tools, clk, opts);
    ASSERT_FALSE(loop.load());
    std::promise<std::thread::id> pool_thread;
    asio::post(pool, [&] { pool_thread.set_value(std::this_thread::get_id()); });
    const auto pool_id = pool_thread.get_future().get();
    boost::system::result<command_reply> reply = boost::system::error_code{};
    std::thread::id resumed_on;
    auto send = [&]() -> asio::awaitable<void> {
        worker::command c = worker::pause_command{};
        auto task = loop.send(std::move(c));
        reply = co_await std::move(task);
        resumed_on = std::this_thread::get_id();
    };
    asio::co_spawn(io, send(), asio::detached);
    io.run();
    ASSERT_TRUE(reply.has_value()) << reply.error().message();
    EXPECT_EQ(store.last_commit_thread(), pool_id);
    EXPECT_EQ(resumed_on, std::this_thread::get_id());
    EXPECT_TRUE(loop.state().paused);
    pool.join();
}

// The rules plan on the loop's executor: a command they refuse or that changes nothing (a
// duplicate enqueue, a second pause, a cancel of an unknown item) is answered without the store
// pool. Here the pool is busy (its one thread blocked): those replies still come at once.
TEST(AgentLoop, ARefusedOrUnchangingCommandIsAnsweredWithoutTheStorePool) {
    storage::memory_store store;
    asio::io_context io;
    asio::thread_pool pool(1);
    runtime::manual_clock clk(unix_ms{harness_t0});
    providers::scripted_provider provider(providers::parse_script(R"({"responses":[]})").value(),
                                          clk);
    tools::tool_registry tools;
    worker::loop_options opts;
    opts.store_executor = pool.get_executor();
    worker::agent_loop loop(io.get_executor(),
                            store.open(session_id::parse("s").value(), lease_epoch{1}).value(),
                            provider, tools, clk, opts);
    ASSERT_FALSE(loop.load());
    std::vector<boost::system::result<command_reply>> replies;
    auto send = [&](worker::command c) {
        auto sending = [](worker::agent_loop& l, worker::command c,
                          std::vector<boost::system::result<command_reply>>& out)
            -> asio::awaitable<void> {
            auto task = l.send(std::move(c));
            out.push_back(co_await std::move(task));
        };
        asio::co_spawn(io, sending(loop, std::move(c), replies), asio::detached);
    };
    send(worker::pause_command{});
    send(worker::enqueue_command{user_in(lane::follow_up, "f1", "hi")});
    io.run();
    ASSERT_EQ(replies.size(), 2u);
    ASSERT_TRUE(replies[1].has_value()) << replies[1].error().message();
    const auto version = loop.state().version();

    std::promise<void> unblock;
    asio::post(pool, [f = unblock.get_future()]() mutable { f.wait(); });
    send(worker::enqueue_command{user_in(lane::follow_up, "f1", "hi")});  // a duplicate
    send(worker::pause_command{});                                         // paused already
    send(worker::cancel_command{lane::steer, queue_item_id::parse("nope").value()});
    io.restart();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (replies.size() < 5 && std::chrono::steady_clock::now() < deadline) {
        io.run_one_for(std::chrono::milliseconds(10));
    }
    unblock.set_value();
    ASSERT_EQ(replies.size(), 5u) << "a command that changes nothing waited for the store pool";
    ASSERT_TRUE(replies[2].has_value()) << replies[2].error().message();
    EXPECT_TRUE(replies[2]->duplicate);
    EXPECT_TRUE(replies[3].has_value());
    EXPECT_EQ(loop.state().version(), version);
    pool.join();
}

TEST(AgentLoop, TheLoopsOwnTransitionsCommitOnTheStoreExecutorAndStopCleanly) {
    storage::memory_store inner;
    storage::faulty_store store(inner);
    asio::io_context io;
    asio::thread_pool pool(1);
    runtime::system_clock clk;
    providers::scripted_provider provider(
        providers::parse_script(
            R"({"responses":[{"text":"on it","tool_calls":[{"name":"echo","arguments":{"text":"x"}}]},
                             {"text":"done"}]})")
            .value(),
        clk);
    tools::tool_registry tools;
    tools::add_builtin_tools(tools);
    worker::loop_options opts;
    opts.store_executor = pool.get_executor();
    worker::agent_loop loop(io.get_executor(),
                            store.open(session_id::parse("s").value(), lease_epoch{1}).value(),
                            provider, tools, clk, opts);
    std::promise<std::thread::id> pool_thread;
    asio::post(pool, [&] { pool_thread.set_value(std::this_thread::get_id()); });
    const auto pool_id = pool_thread.get_future().get();
    asio::cancellation_signal stop;
    bool returned = false;
    asio::co_spawn(
        io, loop.start(),
        asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr) { returned = true; }));
    boost::system::result<command_reply> reply = boost::system::error_code{};
    auto send = [&]() -> asio::awaitable<void> {
        worker::command c = worker::enqueue_command{user_in(lane::follow_up, "f1", "go")};
        auto task = loop.send(std::move(c));
        reply = co_await std::move(task);
    };
    asio::co_spawn(io, send(), asio::detached);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto idle_again = [&] {
        return reply.has_value() && !loop.state().has_work && loop.state().transcript.size() == 5;
    };
    while (!idle_again() && std::chrono::steady_clock::now() < deadline) {
        io.run_one_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(idle_again()) << loop.state().transcript.size() << " entries";
    // party, assistant(tool call), tool_started, tool_result, assistant: all committed on the pool,
    // in four commits (docs/agent-loop.md, "Fused commits").
    EXPECT_EQ(store.last_commit_thread(), pool_id);
    EXPECT_EQ(store.commits(), 4);
    stop.emit(asio::cancellation_type::terminal);
    while (!returned && std::chrono::steady_clock::now() < deadline) {
        io.run_one_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(returned);
    pool.join();
}

}  // namespace wuhu::testing

namespace wuhu::testing {

// Found in review of the persist() refactoring: a command that changes nothing (a duplicate
// enqueue, a second pause) published no patch, where every acknowledged command publishes one.
TEST(AgentLoop, EveryAcknowledgedCommandEmitsItsPatchEvenWhenItChangedNothing) {
    loop_harness h(R"({"responses":[{"text":"hello there"}]})");
    h.start();
    ASSERT_TRUE(h.follow_up("f1", "hi"));
    h.settle();
    const auto before = events_of<worker::committed_event>(h).size();
    auto again = h.follow_up("f1", "hi");  // the same id: a duplicate, nothing stored
    ASSERT_TRUE(again);
    EXPECT_TRUE(again->duplicate);
    h.poll();
    const auto committed = events_of<worker::committed_event>(h);
    ASSERT_EQ(committed.size(), before + 1);
    EXPECT_TRUE(committed.back().actions.empty());
    EXPECT_EQ(committed.back().patch.from, committed.back().patch.to);
}

}  // namespace wuhu::testing

namespace wuhu::testing {

// Issue 16: a turn (a message, a response with two tool calls, their results, the answer)
// takes four commits: the enqueue with its drain, the response with both tool_started
// markers, both results with the steer checkpoint's drain, the answer with mark_idle. The
// store holds what the loop holds after each turn.
TEST(FusedCommits, ATurnWithTwoToolCallsIsFourCommits) {
    storage::memory_store inner;
    storage::faulty_store store(inner);
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"echo","arguments":{"text":"a"}},{"name":"echo","arguments":{"text":"b"}}]},
        {"text":"first"},
        {"tool_calls":[{"name":"echo","arguments":{"text":"c"}},{"name":"clock"}]},
        {"text":"second"}]})",
                   &store, 1);
    h.start();
    h.settle();
    for (int turn = 0; turn < 2; ++turn) {
        const int before = store.commits();
        ASSERT_TRUE(h.follow_up("f" + std::to_string(turn), "go"));
        h.settle();
        EXPECT_EQ(store.commits() - before, 4) << "turn " << turn;
        EXPECT_FALSE(h.state().has_work);
        auto log = inner.open(session_id::parse("s1").value(), lease_epoch{1}).value();
        EXPECT_EQ(log->load().value(), h.state());
    }
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:go", "assistant:+echo+echo", "started:echo", "started:echo",
                            "result:a", "result:b", "assistant:first", "party:go",
                            "assistant:+echo+clock", "started:echo", "started:clock", "result:c",
                            "result:2026-02-17T14:56:00Z", "assistant:second"));
}

// Two enqueues into an idle session, back to back, on a store pool: the first is drained
// with its enqueue (the loop waits for work); the second must not be, once the loop was woken,
// or it lands in the transcript while the loop infers without it, and is never answered
// (found in review: the loop read the state outside the section). Every message reaches an
// inference.
TEST(FusedCommits, AnEnqueueAfterTheLoopWokeIsLeftForItsCheckpoint) {
    storage::memory_store store;
    asio::io_context io;
    asio::thread_pool pool(2);
    runtime::system_clock clk;
    providers::scripted_provider provider(providers::parse_script(R"({"responses":[]})").value(),
                                          clk);
    provider.record_requests(true);
    tools::tool_registry tools;
    worker::loop_options opts;
    opts.store_executor = pool.get_executor();
    worker::agent_loop loop(io.get_executor(),
                            store.open(session_id::parse("s").value(), lease_epoch{1}).value(),
                            provider, tools, clk, opts);
    asio::cancellation_signal stop;
    bool returned = false;
    asio::co_spawn(
        io, loop.start(),
        asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr) { returned = true; }));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int replies = 0;
    auto send = [&](std::string id) -> asio::awaitable<void> {
        worker::command c = worker::enqueue_command{user_in(lane::follow_up, id, "msg " + id)};
        auto task = loop.send(std::move(c));
        auto r = co_await std::move(task);
        replies += r.has_value() ? 1 : 0;
    };
    constexpr int rounds = 100;
    for (int round = 0; round < rounds; ++round) {
        asio::co_spawn(io, send("a" + std::to_string(round)), asio::detached);
        asio::co_spawn(io, send("b" + std::to_string(round)), asio::detached);
        auto settled = [&] {
            return replies == 2 * (round + 1) && loop.quiescent() && !loop.state().has_work;
        };
        while (!settled() && std::chrono::steady_clock::now() < deadline) {
            io.run_one_for(std::chrono::milliseconds(10));
        }
        ASSERT_TRUE(settled()) << "round " << round;
    }
    // The response that follows each message in the transcript was inferred with it.
    const auto& transcript = loop.state().transcript;
    std::size_t step = 0;
    std::vector<std::string> unanswered;
    for (const auto& e : transcript) {
        if (std::holds_alternative<session::assistant_message>(e.body)) {
            for (const auto& text : unanswered) {
                ASSERT_LT(step, provider.requests().size());
                EXPECT_TRUE(context_mentions(provider.requests()[step], text))
                    << text << " is answered by a response inferred without it (step " << step
                    << ")";
            }
            unanswered.clear();
            ++step;
        } else if (const auto* m = std::get_if<session::party_message>(&e.body)) {
            unanswered.push_back(m->content);
        }
    }
    EXPECT_TRUE(unanswered.empty()) << unanswered.front() << " has no response";
    stop.emit(asio::cancellation_type::terminal);
    while (!returned && std::chrono::steady_clock::now() < deadline) {
        io.run_one_for(std::chrono::milliseconds(10));
    }
}

// A result waits for the next call at most the linger: a slow call does not hold the result
// before it, which is committed while the slow call runs.
TEST(FusedCommits, AResultDoesNotWaitForASlowNextCall) {
    storage::memory_store inner;
    storage::faulty_store store(inner);
    loop_harness h(R"({"responses":[
        {"tool_calls":[{"name":"echo","arguments":{"text":"fast"}},{"name":"sleep","arguments":{"ms":60000}}]},
        {"text":"done"}]})",
                   &store, 1);
    h.start();
    h.follow_up("f1", "go");
    ASSERT_TRUE(h.run_until(
        [&] {
            auto log = inner.open(session_id::parse("s1").value(), lease_epoch{1}).value();
            const auto stored = log->load().value();
            return stored.find_tool_call(stored.tool_calls.at(0).call.id.str())->status ==
                   tool_status::finished;
        }))
        << "the first result was not committed while the second call slept";
    EXPECT_EQ(h.state().find_tool_call(h.state().tool_calls.at(1).call.id.str())->status,
              tool_status::started);
    h.settle();
    EXPECT_EQ(h.transcript_texts().back(), "assistant:done");
}

}  // namespace wuhu::testing
