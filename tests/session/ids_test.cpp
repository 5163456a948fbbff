#include "session/ids.hpp"

#include <gtest/gtest.h>

namespace wuhu::session {

TEST(SessionId, AcceptsOneToSixtyFourOfAlnumUnderscoreDash) {
    for (const char* ok : {"a", "Z", "0", "abc-DEF_123", "-", "_"}) {
        EXPECT_TRUE(session_id::parse(ok).has_value()) << ok;
    }
    EXPECT_TRUE(session_id::parse(std::string(64, 'x')).has_value());
}

TEST(SessionId, RejectsSubjectAndPathMetacharacters) {
    for (const char* bad : {"", "a.b", "*", ">", "a b", "a/b", "..", ".", "a\\b", "a\nb", "sess:1",
                            ":memory:", "file:x", "é"}) {
        auto r = session_id::parse(bad);
        ASSERT_FALSE(r.has_value()) << bad;
        EXPECT_EQ(r.error(), make_error_code(errc::invalid_session_id));
    }
    EXPECT_FALSE(session_id::parse(std::string(65, 'x')).has_value());
}

TEST(QueueItemId, IsOneTo128PrintableAscii) {
    EXPECT_TRUE(queue_item_id::parse("client-key 1!~").has_value());
    EXPECT_TRUE(queue_item_id::parse(std::string(128, 'k')).has_value());
    EXPECT_FALSE(queue_item_id::parse(std::string(129, 'k')).has_value());
    EXPECT_FALSE(queue_item_id::parse("").has_value());
    EXPECT_FALSE(queue_item_id::parse("tab\there").has_value());
    EXPECT_FALSE(queue_item_id::parse("ü").has_value());
    EXPECT_EQ(queue_item_id::parse("").error(), make_error_code(errc::invalid_item_id));
    EXPECT_EQ(participant_id::parse("").error(), make_error_code(errc::invalid_participant_id));
}

TEST(QueueItemId, ServerGeneratedIdsAreUuidV7) {
    std::array<std::uint8_t, 10> rnd{};
    rnd.fill(0xFF);
    auto id = make_uuid_v7(unix_ms{0x0123456789AB}, rnd);
    EXPECT_EQ(id.str(), "01234567-89ab-7fff-bfff-ffffffffffff");
    rnd.fill(0);
    EXPECT_EQ(make_uuid_v7(unix_ms{1}, rnd).str(), "00000000-0001-7000-8000-000000000000");
}

TEST(QueueItemId, UuidV7SortsByTime) {
    std::array<std::uint8_t, 10> rnd{};
    rnd.fill(0x42);
    EXPECT_LT(make_uuid_v7(unix_ms{1000}, rnd).str(), make_uuid_v7(unix_ms{1001}, rnd).str());
}

}  // namespace wuhu::session
