// The ledger in the loop (issue 33): every inference's usage is recorded, not only the answers'.
// A summary's goes on its compaction entry; an attempt the provider billed without giving an
// answer (it failed after reporting usage, it was aborted, it timed out) is recorded as a
// billed_attempt diagnostic before the loop retries or stops; an answer cut at the entry limit
// keeps what its stream reported. The totals stay the sum over the transcript across a takeover.
#include "session/ledger.hpp"
#include "session/text.hpp"
#include "storage/memory_store.hpp"
#include "tests/worker/loop_harness.hpp"

#include <gmock/gmock.h>

namespace wuhu::testing {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

usage_totals folded(const session_state& s) {
    usage_totals t;
    for (const auto& e : s.transcript) {
        count(t, e.body);
    }
    return t;
}

const diagnostic* billed_at(const session_state& s, std::size_t i) {
    const auto* d = std::get_if<diagnostic>(&s.transcript.at(i).body);
    return d != nullptr && d->code == "billed_attempt" ? d : nullptr;
}

}  // namespace

TEST(Ledger, AFailedAttemptTheProviderBilledIsRecordedAndCountedAndTheTurnGoesOn) {
    loop_harness h(R"({"responses":[{"text":"finally","usage":{"input":100,"output":7},
        "fail_first":[{"kind":"transient","message":"overloaded mid-stream",
                       "usage":{"input":100,"output":1}},
                      {"kind":"transient","message":"503 before the stream"}]}]})");
    h.start();
    h.follow_up("f1", "hi");
    h.settle();
    EXPECT_EQ(h.provider().attempts(0), 3);
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:hi", "diagnostic:billed_attempt", "assistant:finally"))
        << "one entry for the attempt that reported usage, none for the one that did not";
    const auto* billed = billed_at(h.state(), 1);
    ASSERT_NE(billed, nullptr);
    EXPECT_EQ(billed->usage, (token_usage{100, 0, 1}));
    EXPECT_EQ(billed->model, "scripted");
    EXPECT_THAT(billed->message, HasSubstr("overloaded mid-stream"));
    EXPECT_EQ(h.state().usage.tokens, (token_usage{200, 0, 8}));
    EXPECT_EQ(h.state().usage.turns, 1u) << "a billed attempt is no turn";
    EXPECT_EQ(folded(h.state()), h.state().usage);
    EXPECT_FALSE(h.state().has_work);
}

TEST(Ledger, ABilledFailureThatSpendsTheBudgetStopsTheTurnBeforeTheRetry) {
    loop_harness h(R"({"responses":[{"text":"answer","usage":{"input":10,"output":1},
        "fail_first":[{"kind":"transient","usage":{"input":600,"output":0}}]}]})");
    h.start();
    budget b;
    b.tokens = 500;
    b.soft_percent = 100;
    session::settings_update u;
    u.limits = b;
    ASSERT_TRUE(h.send(worker::configure_command{u}));
    h.follow_up("f1", "hi");
    h.settle();
    EXPECT_EQ(h.provider().attempts(0), 1) << "no retry past the budget";
    EXPECT_THAT(h.transcript_texts(), ElementsAre("party:hi", "diagnostic:billed_attempt",
                                                  "diagnostic:budget_exhausted"));
    EXPECT_TRUE(h.state().paused);
    b.tokens = 1000;
    u.limits = b;
    ASSERT_TRUE(h.send(worker::configure_command{u}));
    h.settle();
    EXPECT_EQ(h.transcript_texts().back(), "assistant:answer") << "raised, the turn goes on";
    EXPECT_EQ(h.state().usage.tokens.total(), 611u);
    EXPECT_EQ(folded(h.state()), h.state().usage);
}

TEST(Ledger, AnAnswerCutAtTheEntryLimitKeepsTheUsageItsStreamReported) {
    auto opts = loop_harness::default_options();
    opts.max_entry_bytes = 400;
    const std::string chunk(100, 'a');
    std::string chunks;
    for (int i = 0; i < 100; ++i) {
        chunks += (i == 0 ? "\"" : ",\"") + chunk + "\"";
    }
    loop_harness h(R"({"responses":[{"chunks":[)" + chunks +
                       R"(],"chunk_delay_ms":1,"early_usage":{"input":321,"cached_input":5}}]})",
                   nullptr, 1, opts);
    h.start();
    h.follow_up("f1", "talk for ever");
    h.settle();
    const auto* answer = std::get_if<assistant_message>(&h.state().transcript.back().body);
    ASSERT_NE(answer, nullptr);
    EXPECT_TRUE(answer->text.ends_with(session::cut_note(400, "answer")));
    EXPECT_EQ(answer->usage, (token_usage{321, 5, 0}));
    EXPECT_EQ(answer->model, "scripted");
    EXPECT_EQ(h.state().usage.tokens, (token_usage{321, 5, 0}));
    EXPECT_EQ(h.state().usage.turns, 1u);
}

TEST(Ledger, AnAbortedStreamRecordsWhatItWasBilledBeforeItsInterruption) {
    loop_harness h(R"({"responses":[
        {"chunks":["partial ","answer"],"chunk_delay_ms":10000,"early_usage":{"input":77}}]})");
    h.start();
    h.follow_up("f1", "hi");
    ASSERT_TRUE(h.run_until([&] { return h.loop().current() == loop_state::inferring; }, false));
    h.poll();
    auto r = h.send(worker::abort_command{"stop"});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->aborted.stopped, abort_stage::inference);
    h.settle();
    EXPECT_THAT(h.transcript_texts(),
                ElementsAre("party:hi", "diagnostic:billed_attempt", "aborted:stop"));
    EXPECT_THAT(billed_at(h.state(), 1)->message, HasSubstr("aborted"));
    EXPECT_EQ(h.state().usage.tokens, (token_usage{77, 0, 0}));
    EXPECT_EQ(h.state().usage.turns, 0u);
    EXPECT_FALSE(h.state().has_work) << "the abort ended the turn";
}

TEST(Ledger, ACompactionsSummaryIsCountedWithItsModel) {
    const std::string pad(120, '.');
    loop_harness h(R"({"responses":[{"text":"r0 )" + pad + R"(","usage":{"input":950}},
                                    {"text":"r1","usage":{"input":400,"output":5}}],
                      "summaries":["S1"]})");
    h.start();
    ASSERT_TRUE(h.send(limits(1000, 100, 20)));
    h.follow_up("f0", std::string(200, 'a'));
    h.settle();
    h.follow_up("f1", std::string(200, 'b'));
    h.settle();
    const compaction* c = nullptr;
    for (const auto& e : h.state().transcript) {
        if (const auto* x = std::get_if<compaction>(&e.body)) {
            c = x;
        }
    }
    ASSERT_NE(c, nullptr);
    EXPECT_GT(c->usage.input, 0u) << "the segment it read";
    EXPECT_GT(c->usage.output, 0u) << "the summary it wrote";
    EXPECT_EQ(c->model, "scripted");
    EXPECT_EQ(folded(h.state()), h.state().usage);
    EXPECT_EQ(h.state().usage.turns, 2u) << "a summary is no turn";
    EXPECT_EQ(h.state().usage.tokens,
              (token_usage{950 + 400 + c->usage.input, 0, 5 + c->usage.output}))
        << "the answers' and the summary's";
}

// A summary counts against the budget like an answer: the inference its compaction was for
// does not run once the summary spent it (the turn stops, and goes on when raised).
TEST(Ledger, AnOverflowsSummaryThatSpendsTheBudgetStopsTheRetry) {
    const std::string pad(400, '.');
    loop_harness h(R"({"responses":[{"text":"r0 )" + pad + R"(","usage":{"input":100}},
        {"text":"after","usage":{"input":10},"fail_first":[{"kind":"context_overflow"}]}],
        "summaries":["S1"]})");
    h.start();
    ASSERT_TRUE(h.send(limits(1000, 100, 20)));
    budget b;
    b.tokens = 101;  // r0's 100, then the summary's (at least its one token of output)
    b.soft_percent = 100;
    session::settings_update u;
    u.limits = b;
    ASSERT_TRUE(h.send(worker::configure_command{u}));
    h.follow_up("f0", "first");
    h.settle();
    h.follow_up("f1", "second");
    h.settle();
    EXPECT_EQ(h.provider().attempts(1), 1) << "only the attempt that overflowed";
    const auto texts = h.transcript_texts();
    ASSERT_GE(texts.size(), 2u);
    EXPECT_EQ(texts[texts.size() - 2], "compaction:S1");
    EXPECT_EQ(texts.back(), "diagnostic:budget_exhausted");
    b.tokens = 10'000;
    u.limits = b;
    ASSERT_TRUE(h.send(worker::configure_command{u}));
    h.settle();
    EXPECT_EQ(h.transcript_texts().back(), "assistant:after");
}

// The ledger is folded from the log: a new owner that takes over in the middle of a retry
// counts what the old one recorded, and what it is billed itself, once each.
TEST(Ledger, TheTotalsStayTheSumOverTheTranscriptWhenATakeoverComesMidRetry) {
    storage::memory_store store;
    const std::string script = R"({"responses":[{"text":"done","usage":{"input":10,"output":2},
        "fail_first":[{"kind":"transient","usage":{"input":30,"output":0}}]}]})";
    {
        loop_harness first(script, &store, 1);
        first.start();
        first.follow_up("f1", "go");
        ASSERT_TRUE(first.run_until(
            [&] { return first.state().transcript.size() == 2 && billed_at(first.state(), 1); },
            false));
    }  // the owner goes away in its backoff
    loop_harness next(script, &store, 2);
    next.start();
    next.settle();
    EXPECT_THAT(next.transcript_texts(),
                ElementsAre("party:go", "diagnostic:billed_attempt", StartsWith("owner_lost:"),
                            "diagnostic:billed_attempt", "assistant:done"));
    EXPECT_EQ(next.state().usage.tokens, (token_usage{70, 0, 2}));
    EXPECT_EQ(folded(next.state()), next.state().usage);
    auto log = store.open(session_id::parse("s1").value(), lease_epoch{3}).value();
    EXPECT_EQ(log->load().value(), next.state());
}

}  // namespace wuhu::testing
