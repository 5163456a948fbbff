#include "session/reducer.hpp"
#include "session/summary.hpp"
#include "tests/support/builders.hpp"
#include "tests/support/random_ops.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace {

timer timer_at(const char* id, std::int64_t due) {
    return timer{queue_item_id::parse(id).value(), unix_ms{due},
                 system_source::parse("scheduledCallback").value(), "wake"};
}

}  // namespace

// The summary a store records inside a commit equals the summary of the state after it.
TEST(Summary, OfTheActionsEqualsTheSummaryOfTheStateTheyLeave) {
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        std::mt19937_64 rng(seed);
        session_state s;
        for (int i = 0; i < 300; ++i) {
            auto op = next_op(rng, s, unix_ms{1000 + i});
            auto actions = run_pure(op, s);
            if (!actions) {
                continue;
            }
            auto predicted = summarize(s, *actions);
            apply_actions(*actions, s);
            ASSERT_EQ(predicted, summarize(s)) << "seed " << seed << " op " << op.name;
        }
    }
}

TEST(Summary, CountsPendingItemsPerLaneTimersAndTheLatestActivity) {
    session_state s;
    apply_actions(plan_enqueue(s, user_in(lane::steer, "a", "x"), unix_ms{10}).value().actions, s);
    apply_actions(plan_enqueue(s, user_in(lane::follow_up, "b", "y"), unix_ms{20}).value().actions,
                  s);
    apply_actions(plan_schedule_timer(s, timer_at("t2", 900), unix_ms{1}), s);
    apply_actions(plan_schedule_timer(s, timer_at("t1", 500), unix_ms{1}), s);
    auto sum = summarize(s);
    EXPECT_TRUE(sum.has_work);
    EXPECT_EQ(sum.lanes, (std::array<std::uint32_t, 3>{0, 1, 1}));
    EXPECT_EQ(sum.timers, 2u);
    EXPECT_EQ(sum.next_timer, unix_ms{500});
    EXPECT_EQ(sum.last_activity, unix_ms{20});
    // Firing the earliest timer: it leaves the timers and enters the system lane.
    auto fired = plan_fire_timer(s, queue_item_id::parse("t1").value(), unix_ms{510});
    auto after = summarize(s, fired);
    EXPECT_EQ(after.timers, 1u);
    EXPECT_EQ(after.next_timer, unix_ms{900});
    EXPECT_EQ(after.lanes, (std::array<std::uint32_t, 3>{1, 1, 1}));
    EXPECT_EQ(after.last_activity, unix_ms{510});
}

TEST(Summary, ATimerScheduledAndClearedInOneCommitIsNotPending) {
    session_state s;
    auto t = timer_at("t", 100);
    action_list both{timer_scheduled{t}, timer_cleared{t.id}};
    auto sum = summarize(s, both);
    EXPECT_EQ(sum.timers, 0u);
    EXPECT_FALSE(sum.next_timer.has_value());
}

}  // namespace wuhu::testing
