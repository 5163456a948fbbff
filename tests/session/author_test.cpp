#include "session/author.hpp"

#include <gtest/gtest.h>

namespace wuhu::session {

// 2026-02-17 14:56 UTC
constexpr unix_ms feb17_1456{1771340160000};

TEST(MessageHeader, IsNameEmailThenShortDateAndTime) {
    EXPECT_EQ(format_header("minsheng", "lambda@liu.ms", feb17_1456, 0),
              "minsheng <lambda@liu.ms> 26/2/17 14:56");
}

TEST(MessageHeader, OmitsEmailWhenThereIsNone) {
    EXPECT_EQ(format_header("system-reminder", "", unix_ms{feb17_1456.value + 60'000}, 0),
              "system-reminder 26/2/17 14:57");
}

TEST(MessageHeader, IsUtcUnlessAnOffsetIsConfigured) {
    EXPECT_EQ(format_header("a", "", feb17_1456, 8 * 60), "a 26/2/17 22:56");
    EXPECT_EQ(format_header("a", "", feb17_1456, 10 * 60), "a 26/2/18 00:56");
    EXPECT_EQ(format_header("a", "", feb17_1456, -15 * 60), "a 26/2/16 23:56");
}

TEST(MessageHeader, PadsHoursAndMinutesAndTwoDigitYears) {
    EXPECT_EQ(format_header("a", "", unix_ms{0}, 0), "a 70/1/1 00:00");
    EXPECT_EQ(format_header("a", "", unix_ms{1104541200000}, 0), "a 05/1/1 01:00");
    EXPECT_EQ(format_header("a", "", unix_ms{-60'000}, 0), "a 69/12/31 23:59");
}

TEST(MessageHeader, IsFollowedByABlankLineThenTheContent) {
    EXPECT_EQ(with_header("h 26/2/17 14:56", "body"), "h 26/2/17 14:56\n\nbody");
}

TEST(Author, ParticipantNamesHaveNoControlCharacters) {
    auto id = participant_id::parse("u1").value();
    EXPECT_TRUE(make_participant(id, "Ann", "", participant_kind::human).has_value());
    EXPECT_FALSE(make_participant(id, "", "", participant_kind::human).has_value());
    EXPECT_FALSE(make_participant(id, "A\nB", "", participant_kind::bot).has_value());
    EXPECT_FALSE(make_participant(id, "Ann", "a b@x", participant_kind::bot).has_value());
    EXPECT_FALSE(make_participant(id, "Ann", "<a@x>", participant_kind::bot).has_value());
}

TEST(SystemSource, IsAnOpenSetOfIdentifiers) {
    EXPECT_TRUE(system_source::parse("asyncBashCallback").has_value());
    EXPECT_TRUE(system_source::parse("asyncTaskNotification").has_value());
    EXPECT_TRUE(system_source::parse("scheduledCallback").has_value());
    EXPECT_FALSE(system_source::parse("").has_value());
    EXPECT_FALSE(system_source::parse("a.b").has_value());
    EXPECT_EQ(system_source::parse("a b").error(), make_error_code(errc::invalid_source));
}

}  // namespace wuhu::session
