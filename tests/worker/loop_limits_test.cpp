// The agent loop's rules, deterministic (see agent_loop_test.cpp). Here: retries, timeouts and
// the stream limits, the bounds of lanes and outputs.
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

// The retry jitter's sequence is the loop's, not a turn's: a turn's runner is made for each turn
// (an idle session holds none), and one seeded afresh each time would wait alike in every turn.
TEST(Retry, TheJitterGoesOnFromOneTurnToTheNext) {
    loop_harness h(R"({"responses":[{"text":"one","fail_first":[{"kind":"transient"}]},
                                     {"text":"two","fail_first":[{"kind":"transient"}]}]})");
    h.start();
    auto t0 = h.clock().now();
    h.follow_up("f1", "hi");
    h.settle();
    const auto first = h.clock().now().value - t0.value;
    t0 = h.clock().now();
    h.follow_up("f2", "again");
    h.settle();
    const auto second = h.clock().now().value - t0.value;
    EXPECT_EQ(h.provider().attempts(0), 2);
    EXPECT_EQ(h.provider().attempts(1), 2);
    EXPECT_EQ(h.transcript_texts().back(), "assistant:two");
    for (const auto waited : {first, second}) {
        EXPECT_GE(waited, 250);  // one wait of 250-500 ms each (base 500 ms, equal jitter)
        EXPECT_LT(waited, 500);
    }
    EXPECT_NE(first, second) << "the second turn's wait repeated the first one's jitter";
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

}  // namespace wuhu::testing
