// The fleet view's pure parts (broker/admin.hpp): joining a chunk of the index with its leases
// and its owners' answers, and merging owners' pages for a loop-state filter.
#include "broker/admin.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace json = boost::json;
using broker::owner_page;

namespace {

session::session_id sid(const char* s) {
    return session::session_id::parse(s).value();
}

storage::catalog_entry entry(const char* id, bool has_work = false) {
    storage::catalog_entry e{sid(id), {}};
    e.summary.has_work = has_work;
    return e;
}

ownership::lease held(const char* id, const char* owner) {
    return ownership::lease{sid(id), owner, session::lease_epoch{7}, session::unix_ms{0}, {}};
}

json::object loaded(const char* id, const char* state, const char* owner) {
    return json::object{{"id", id}, {"state", state}, {"owner", owner}, {"has_work", false}};
}

std::vector<std::string> ids_of(const json::array& rows) {
    std::vector<std::string> out;
    for (const auto& r : rows) {
        out.push_back(json::value_to<std::string>(r.at("id")));
    }
    return out;
}

}  // namespace

TEST(FleetView, AJoinedRowIsUnownedUnloadedLoadedOrUnreachable) {
    owner_page a;
    a.rows["b"] = loaded("b", "inferring", "A");
    std::map<std::string, std::optional<owner_page>> pages{{"A", a}, {"B", std::nullopt}};
    auto rows = broker::join_rows({entry("a"), entry("b"), entry("c"), entry("d", true)},
                                  {held("b", "A"), held("c", "A"), held("d", "B")}, pages);
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_EQ(rows[0].at("state"), "unowned");
    EXPECT_FALSE(rows[0].contains("owner"));
    EXPECT_EQ(rows[1].at("state"), "inferring") << "the owner's live view";
    EXPECT_EQ(rows[2].at("state"), "unloaded") << "leased, not loaded by its owner";
    EXPECT_EQ(rows[2].at("epoch"), 7);
    EXPECT_EQ(rows[3].at("state"), "unreachable");
    EXPECT_EQ(rows[3].at("has_work"), true) << "the index still shows";
}

// An owner whose answer was cut vouches only for the ids up to its last row: the join stops
// before the first id it left undecided, so the next chunk starts there.
TEST(FleetView, AJoinStopsWhereAnOwnersAnswerWasCut) {
    owner_page a;
    a.rows["b"] = loaded("b", "idle", "A");
    a.until = "b";
    std::map<std::string, std::optional<owner_page>> pages{{"A", a}};
    auto rows = broker::join_rows({entry("a"), entry("b"), entry("c"), entry("d")},
                                  {held("b", "A"), held("d", "A")}, pages);
    ASSERT_EQ(rows.size(), 3u) << "a, b and c (unowned) are decided; d is not";
    EXPECT_EQ(rows[2].at("state"), "unowned");
}

TEST(FleetView, OwnerPagesMergeInIdOrderAndStopWhereACutPageStopped) {
    owner_page a, b;
    a.rows["a1"] = loaded("a1", "idle", "A");
    a.rows["a3"] = loaded("a3", "idle", "A");
    a.until = "a3";  // A has more after a3
    b.rows["a2"] = loaded("a2", "idle", "B");
    b.rows["a4"] = loaded("a4", "idle", "B");
    protocol::sessions_query q;
    q.state = "idle";
    auto page = json::parse(broker::merge_owner_pages(
                                q, {{"A", a}, {"B", b}, {"C", std::nullopt}}))
                    .as_object();
    EXPECT_EQ(ids_of(page.at("sessions").as_array()),
              (std::vector<std::string>{"a1", "a2", "a3"}));
    EXPECT_EQ(page.at("next"), "a3") << "a4 may not be the next row: A's a3+ are not known";
    EXPECT_EQ(page.at("unreachable"), json::array{"C"});
}

// Defect (found in review): with `ids`, an owner answered every id whatever `after` said, and
// the merged page repeated itself forever. A page never holds an id at or before `after`.
TEST(FleetView, AMergedPageNeverRepeatsWhatCameBeforeAfter) {
    owner_page a;
    for (const char* id : {"x1", "x2", "x3"}) {
        a.rows[id] = loaded(id, "idle", "A");
    }
    protocol::sessions_query q;
    q.state = "idle";
    q.limit = 2;
    q.after = sid("x2");
    auto page = json::parse(broker::merge_owner_pages(q, {{"A", a}})).as_object();
    EXPECT_EQ(ids_of(page.at("sessions").as_array()), (std::vector<std::string>{"x3"}));
    EXPECT_FALSE(page.contains("next"));
}

// Issue 29: another worker's answer to admin.local is input like any other. A row of another
// shape (a field missing, of another type, an id or owner that is no token) makes the answer
// no page (its sessions show "unreachable"); nothing throws, and only the known fields of a
// good row are taken.
TEST(FleetView, AnOwnersAnswerOfAnotherShapeIsNoPageAndNeverThrows) {
    const json::object good{{"id", "s1"},          {"state", "idle"},
                            {"owner", "w1"},       {"epoch", 3},
                            {"has_work", false},   {"paused", false},
                            {"lanes", json::object{{"system", 0}, {"steer", 1}, {"followUp", 2}}},
                            {"timers", 0},         {"last_activity", 1700000000000},
                            {"injected", "field"}};
    auto page_of = [](const json::object& row) {
        return json::serialize(json::object{
            {"ok", true}, {"sessions", json::array{row}}, {"complete", true}});
    };
    auto read = broker::read_owner_page(page_of(good));
    ASSERT_TRUE(read.has_value());
    ASSERT_EQ(read->rows.count("s1"), 1u);
    EXPECT_EQ(read->rows.at("s1").at("lanes").at("followUp"), 2);
    EXPECT_EQ(read->rows.at("s1").if_contains("injected"), nullptr);

    const std::vector<std::pair<const char*, json::value>> bad{
        {"id", 7},          {"id", "a b"},          {"id", "a.b.c"},
        {"state", "nope"},  {"state", "unowned"},   {"state", 1},
        {"owner", 5},       {"owner", "w1\r\nPUB x 0"}, {"owner", "*"},
        {"epoch", -1},      {"epoch", "3"},         {"has_work", "yes"},
        {"paused", nullptr}, {"lanes", json::array{}}, {"lanes", json::object{{"steer", 1}}},
        {"timers", 1.5},    {"last_activity", "now"}, {"next_timer", "soon"}};
    for (const auto& [field, value] : bad) {
        auto row = good;
        row[field] = value;
        std::optional<owner_page> got;
        EXPECT_NO_THROW(got = broker::read_owner_page(page_of(row)));
        EXPECT_FALSE(got.has_value()) << field << ": " << json::serialize(value);
    }
    for (const char* field : {"id", "state", "owner", "epoch", "has_work", "lanes"}) {
        auto row = good;
        row.erase(field);
        EXPECT_FALSE(broker::read_owner_page(page_of(row)).has_value()) << "without " << field;
    }
    for (const char* reply : {"", "[]", "{}", R"({"sessions":{},"complete":true})",
                              R"({"sessions":[1],"complete":true})",
                              R"({"sessions":[],"complete":"yes"})"}) {
        EXPECT_FALSE(broker::read_owner_page(reply).has_value()) << reply;
    }
    // An owner whose answer is no page: its sessions are unreachable, and the page still comes.
    protocol::sessions_query q;
    q.state = "idle";
    auto merged = json::parse(broker::merge_owner_pages(q, {{"w9", std::nullopt}}));
    EXPECT_EQ(merged.at("ok"), true);
    EXPECT_EQ(merged.at("unreachable").as_array().at(0), "w9");
}

}  // namespace wuhu::testing
