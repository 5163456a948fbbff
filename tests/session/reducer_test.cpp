#include "session/reducer.hpp"
#include "tests/support/builders.hpp"
#include "tests/support/random_ops.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

TEST(Reducer, IsPureAppliedReturnsANewStateAndLeavesTheInputAlone) {
    session_state before;
    auto out = plan_enqueue(before, user_in(lane::steer, "a", "x"), unix_ms{1}).value();
    session_state after = applied(out.actions, before);
    EXPECT_EQ(before, session_state{});
    EXPECT_NE(after, before);
    EXPECT_EQ(applied(out.actions, before), after);  // deterministic
}

TEST(ReducerDeathTest, NeverMovesTheTranscriptCursorBackwards) {
    session_state s;
    entry e{entry_seq{2}, unix_ms{1}, interruption{"x"}};
    EXPECT_DEATH(apply_actions(action{entry_appended{e}}, s), "entry ids are consecutive");
}

TEST(ReducerDeathTest, NeverSkipsAJournalCursor) {
    session_state s;
    journal_entry j{journal_seq{3}, unix_ms{1}, canceled_fact{item("a")}};
    EXPECT_DEATH(apply_actions(action{journal_recorded{lane::steer, j}}, s),
                 "journal cursors are consecutive");
}

TEST(Reducer, RandomHistoriesKeepTheStateInvariants) {
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        std::mt19937_64 rng(seed);
        session_state s;
        for (int i = 0; i < 300; ++i) {
            auto op = next_op(rng, s, unix_ms{i});
            auto actions = run_pure(op, s);
            if (actions) {
                apply_actions(*actions, s);
            }
            for (std::size_t k = 0; k < s.transcript.size(); ++k) {
                ASSERT_EQ(s.transcript[k].id.value, k + 1);
            }
            std::size_t pending = 0;
            for (lane l : all_lanes) {
                for (std::size_t i = 0; i < s.in(l).pending.size(); ++i) {
                    const auto& q = s.in(l).pending_item(i);
                    ASSERT_EQ(q.in, l);
                    ASSERT_EQ(s.find_item(q.id.str())->status, item_status::pending);
                }
                pending += s.in(l).pending.size();
            }
            std::size_t pending_records = 0;
            for (const auto& [id, rec] : s.items) {
                pending_records += rec.status == item_status::pending;
                if (rec.status == item_status::materialized) {
                    ASSERT_NE(s.find_entry(rec.entry), nullptr);
                }
            }
            ASSERT_EQ(pending, pending_records) << "seed " << seed << " op " << op.name;
            if (pending > 0) {
                ASSERT_TRUE(s.has_work) << "an enqueued item always leaves has_work set";
            }
        }
    }
}

}  // namespace wuhu::testing
