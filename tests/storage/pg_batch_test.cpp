// The rows PostgreSQL keeps a session's log in (storage/pg_batch.hpp), without a server.
#include "storage/pg_batch.hpp"

#include "session/codec.hpp"
#include "storage/errc.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace {

namespace json = boost::json;

std::vector<json::value> expand(std::string_view body, std::uint64_t key, std::int64_t at,
                                const char* key_name = "id", std::uint64_t after = 0) {
    std::vector<json::value> out;
    auto r = storage::expand_row(body, key, at, key_name, after, out);
    EXPECT_TRUE(r.has_value()) << body;
    return out;
}

bool corrupt(std::string_view body, std::uint64_t key, const char* key_name = "id") {
    std::vector<json::value> out;
    auto r = storage::expand_row(body, key, 5, key_name, 0, out);
    return !r && r.error() == storage::errc::corrupt;
}

}  // namespace

// A row holds its values without their keys, and without the times equal to the last one's;
// they come back whole.
TEST(PgBatch, ARowOmitsKeysAndTheSharedTimeAndRestoresThem) {
    const json::value a = json::parse(R"({"id":4,"at":7,"type":"x","n":1})");
    const json::value b = json::parse(R"({"id":5,"at":9,"type":"x","n":2})");
    const json::value c = json::parse(R"({"id":6,"at":9,"type":"x","n":3})");
    storage::batch_row row("id");
    row.add(a, 4, 7);
    row.add(b, 5, 9);
    row.add(c, 6, 9);
    EXPECT_EQ(row.key(), 6u);
    EXPECT_EQ(row.at(), 9);
    const auto body = row.body();
    EXPECT_EQ(body, R"([{"at":7,"type":"x","n":1},{"type":"x","n":2},{"type":"x","n":3}])");
    EXPECT_EQ(expand(body, 6, 9), (std::vector<json::value>{a, b, c}));
}

// A catch-up from inside a row takes the values after its version only.
TEST(PgBatch, ACatchUpFromInsideARowTakesTheLaterValuesOnly) {
    const auto body = R"([{"fact":"a"},{"fact":"b"},{"fact":"c"}])";
    auto later = expand(body, 12, 3, "seq", 10);
    ASSERT_EQ(later.size(), 2u);
    EXPECT_EQ(later[0], json::parse(R"({"seq":11,"at":3,"fact":"b"})"));
    EXPECT_EQ(later[1], json::parse(R"({"seq":12,"at":3,"fact":"c"})"));
    EXPECT_TRUE(expand(body, 12, 3, "seq", 12).empty());
}

// A row written before batches (one value, whole) loads as it is.
TEST(PgBatch, ARowOfOneWholeValueLoadsAsItIs) {
    const auto whole = json::parse(R"({"id":3,"at":8,"type":"x"})");
    EXPECT_EQ(expand(R"({"id":3,"at":8,"type":"x"})", 3, 8), std::vector<json::value>{whole});
    EXPECT_TRUE(expand(R"({"id":3,"at":8,"type":"x"})", 3, 8, "id", 3).empty());
}

// The real codec's values make the round trip.
TEST(PgBatch, TheCodecsEntriesMakeTheRoundTrip) {
    const auto m = reply("calling", {{"c1", "echo"}, {"c2", "echo"}});
    std::vector<session::entry> entries;
    entries.push_back(session::entry{entry_seq{1}, unix_ms{100}, m});
    entries.push_back(
        session::entry{entry_seq{2}, unix_ms{100}, tool_started{call_id("c1"), "echo"}});
    entries.push_back(
        session::entry{entry_seq{3}, unix_ms{101}, tool_started{call_id("c2"), "echo"}});
    storage::batch_row row("id");
    for (const auto& e : entries) {
        row.add(session::to_json(e), e.id.value, e.at.value);
    }
    auto values = expand(row.body(), row.key(), row.at());
    ASSERT_EQ(values.size(), entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
        EXPECT_EQ(session::entry_from_json(values[i]).value(), entries[i]);
    }
}

// The reducer appends with consecutive keys; anything else is a bug, not stored under the
// wrong keys.
TEST(PgBatchDeathTest, ValuesWithoutConsecutiveKeysAreABug) {
    storage::batch_row row("id");
    row.add(json::parse(R"({"id":1,"at":1})"), 1, 1);
    EXPECT_DEATH(row.add(json::parse(R"({"id":3,"at":1})"), 3, 1), "consecutive keys");
}

TEST(PgBatch, ABodyOfAnotherShapeIsCorrupt) {
    EXPECT_TRUE(corrupt("", 1));
    EXPECT_TRUE(corrupt("not json", 1));
    EXPECT_TRUE(corrupt("[]", 1));
    EXPECT_TRUE(corrupt("3", 1));
    EXPECT_TRUE(corrupt("[1]", 1));
    EXPECT_TRUE(corrupt(R"([{"a":1},{"a":2}])", 1));  // keys would start at 0
    EXPECT_TRUE(corrupt(R"([{"id":4}])", 3));         // a key that disagrees with the row's
    EXPECT_TRUE(corrupt(R"({"id":"3"})", 3));
    EXPECT_TRUE(corrupt(R"({"seq":-3})", 3, "seq"));
    EXPECT_TRUE(corrupt(R"([{"a":1,"at":5}])", 1));  // the last value's time is the row's
    EXPECT_TRUE(corrupt(R"({"id":3})", 3));          // a whole value has its time
    EXPECT_TRUE(corrupt(R"({"id":3,"at":4})", 3));   // ... its row's
    EXPECT_TRUE(corrupt(R"({"at":5})", 3));          // ... and its key
    EXPECT_TRUE(corrupt(R"([{"a":1}])", 0));
    EXPECT_FALSE(corrupt(R"([{"a":1,"at":4},{"a":2}])", 2));
    EXPECT_FALSE(corrupt(R"({"id":3,"at":5})", 3));
}

}  // namespace wuhu::testing
