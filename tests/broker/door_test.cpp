// The serving executor's door (broker/door.hpp): one request of each session in turn, each
// session's own in arrival order, one start scheduled at a time, and a session's requests
// bounded from taken to answered.
#include "broker/door.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace wuhu::broker {

namespace {

using door_t = door<int>;

std::vector<std::pair<std::string, int>> drain(door_t& d) {
    std::vector<std::pair<std::string, int>> out;
    while (auto next = d.next()) {
        out.push_back(*next);
    }
    return out;
}

}  // namespace

TEST(Door, StartsOneRequestOfEachSessionInTurnAndEachSessionsInArrivalOrder) {
    door_t d(0);
    int n = 0;
    for (int i = 0; i < 4; ++i) {
        d.take("flooded", n++);
    }
    d.take("calm", n++);
    d.take("other", n++);
    d.take("flooded", n++);
    const std::vector<std::pair<std::string, int>> expected = {
        {"flooded", 0}, {"calm", 4}, {"other", 5}, {"flooded", 1}, {"flooded", 2},
        {"flooded", 3}, {"flooded", 6}};
    EXPECT_EQ(drain(d), expected);
}

TEST(Door, SchedulesOneStartUntilNothingWaits) {
    door_t d(0);
    EXPECT_EQ(d.take("a", 1), door_t::taken::start_next);
    EXPECT_EQ(d.take("b", 2), door_t::taken::waiting) << "a start is already scheduled";
    ASSERT_TRUE(d.next());
    EXPECT_EQ(d.take("a", 3), door_t::taken::waiting) << "started ones reschedule themselves";
    ASSERT_TRUE(d.next());
    ASSERT_TRUE(d.next());
    EXPECT_FALSE(d.next()) << "nothing waits: the schedule ends";
    EXPECT_EQ(d.take("a", 4), door_t::taken::start_next) << "and the next take starts it again";
}

TEST(Door, RefusesASessionsRequestPastItsBoundUntilOneIsAnswered) {
    door_t d(2);
    EXPECT_NE(d.take("s", 1), door_t::taken::refused);
    EXPECT_NE(d.take("s", 2), door_t::taken::refused);
    int kept = 3;
    EXPECT_EQ(d.take("s", std::move(kept)), door_t::taken::refused);
    EXPECT_EQ(kept, 3) << "a refused request is not taken";
    EXPECT_NE(d.take("other", 4), door_t::taken::refused) << "another session is not bounded by it";
    ASSERT_EQ(drain(d).size(), 3u);
    EXPECT_EQ(d.take("s", 5), door_t::taken::refused) << "started is not answered";
    d.answered("s");
    EXPECT_NE(d.take("s", 6), door_t::taken::refused);
    d.answered("s");
    d.answered("s");
    d.answered("other");
    EXPECT_EQ(d.sessions(), 0u) << "nothing is kept of sessions with nothing in";
}

}  // namespace wuhu::broker
