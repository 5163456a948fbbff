// The gap-free watch's decisions (client/client.hpp watch_cursor), without NATS: duplicates
// from before the backfill are dropped, patches and deltas that do not follow are gaps, and a
// resync delivers exactly what was missed.
#include "client/client.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace json = boost::json;
using client::watch_cursor;

namespace {

json::value version(int transcript, int follow_up = 0) {
    return json::object{
        {"transcript", transcript}, {"system", 0}, {"steer", 0}, {"followUp", follow_up}};
}

json::object patch(json::value from, json::value to, json::array transcript = {}) {
    return json::object{{"from", std::move(from)},
                        {"to", std::move(to)},
                        {"transcript", std::move(transcript)},
                        {"journal", json::object{}}};
}

json::object assistant(const char* text) {
    return json::object{{"type", "assistant_message"}, {"text", text}};
}

json::object reply(json::object p, std::uint64_t step,
                   std::optional<json::object> inflight = std::nullopt) {
    json::object r{{"ok", true},
                   {"patch", std::move(p)},
                   {"status", json::object{{"has_work", true}}},
                   {"settings", json::object{}},
                   {"step", step}};
    if (inflight) {
        r["inflight"] = *inflight;
    }
    return r;
}

json::object text_delta(std::uint64_t step, std::uint64_t seq, const char* text) {
    return json::object{{"type", "text.delta"}, {"step", step}, {"seq", seq}, {"text", text}};
}

json::object start_of(std::uint64_t step, std::uint64_t epoch) {
    return json::object{{"type", "message.start"}, {"step", step}, {"epoch", epoch}};
}

json::object delta_of(std::uint64_t step, std::uint64_t epoch, std::uint64_t seq,
                      const char* text) {
    auto d = text_delta(step, seq, text);
    d["epoch"] = epoch;
    return d;
}

std::vector<std::string> types(const watch_cursor::delivery& d) {
    std::vector<std::string> out;
    for (const auto& x : d.deltas) {
        out.emplace_back(x.at("type").as_string());
    }
    return out;
}

std::string texts(const watch_cursor::delivery& d) {
    std::string out;
    for (const auto& x : d.deltas) {
        if (x.at("type") == "text.delta") {
            out += x.at("text").as_string();
        }
    }
    return out;
}

}  // namespace

TEST(WatchCursor, BackfillComesFirstWithItsRegistersAndInflightText) {
    watch_cursor c;
    auto d = c.start(reply(patch(version(0), version(2)), 0,
                           json::object{{"step", 0}, {"text", "Hel"}, {"seq", 1}}));
    ASSERT_EQ(d.patches.size(), 1u);
    EXPECT_TRUE(d.patches[0].contains("status"));
    ASSERT_EQ(d.deltas.size(), 2u);
    EXPECT_EQ(d.deltas[0].at("type"), "message.start");
    EXPECT_EQ(texts(d), "Hel");
    EXPECT_EQ(c.version(), version(2));
}

TEST(WatchCursor, EventsAtOrBelowTheBackfillAreDroppedAndLaterOnesDelivered) {
    watch_cursor c;
    c.start(reply(patch(version(0), version(2)), 0,
                  json::object{{"step", 0}, {"text", "Hel"}, {"seq", 1}}));
    // Queued before the backfill answered: all already in it.
    EXPECT_TRUE(c.patch(patch(version(1), version(2))).patches.empty());
    EXPECT_TRUE(c.delta(json::object{{"type", "message.start"}, {"step", 0}}).deltas.empty());
    EXPECT_TRUE(c.delta(text_delta(0, 1, "Hel")).deltas.empty());
    // New.
    EXPECT_EQ(texts(c.delta(text_delta(0, 2, "lo"))), "lo");
    auto d = c.patch(patch(version(2), version(3), json::array{assistant("Hello")}));
    ASSERT_EQ(d.patches.size(), 1u);
    EXPECT_FALSE(d.gap);
    EXPECT_EQ(c.version(), version(3));
    // A late delta of the committed message is dropped.
    EXPECT_TRUE(c.delta(text_delta(0, 3, "!")).deltas.empty());
}

TEST(WatchCursor, AMessageThatIsNotAnEventOfTheContractIsIgnored) {
    watch_cursor c;
    c.start(reply(patch(version(0), version(1)), 0));
    // Anyone may publish on the events subject: what is not a patch or a delta is no gap.
    for (const auto& junk :
         {json::object{}, json::object{{"from", 1}, {"to", "x"}}, json::object{{"to", version(5)}},
          json::object{{"from", version(1)}, {"to", version(2)}}}) {
        auto d = c.patch(junk);
        EXPECT_TRUE(d.patches.empty()) << json::serialize(junk);
        EXPECT_FALSE(d.gap) << json::serialize(junk);
    }
    EXPECT_TRUE(c.delta(json::object{{"seq", "one"}}).deltas.empty());
    EXPECT_EQ(c.version(), version(1));
    EXPECT_EQ(c.patch(patch(version(1), version(2))).patches.size(), 1u);
}

TEST(WatchCursor, StreamEventsOfAMessageCommittedBeforeTheBackfillAreDropped) {
    watch_cursor c;
    c.start(reply(patch(version(0), version(3), json::array{assistant("Hello")}), 1));
    EXPECT_TRUE(c.delta(json::object{{"type", "message.start"}, {"step", 0}}).deltas.empty());
    EXPECT_TRUE(c.delta(text_delta(0, 1, "Hello")).deltas.empty());
    EXPECT_FALSE(c.delta(text_delta(0, 1, "Hello")).gap);
}

TEST(WatchCursor, AMissingPatchIsAGapAndTheResyncDeliversIt) {
    watch_cursor c;
    c.start(reply(patch(version(0), version(1)), 0));
    auto d = c.patch(patch(version(2), version(3)));
    EXPECT_TRUE(d.gap);
    EXPECT_TRUE(d.patches.empty());
    auto r = c.resync(reply(patch(version(1), version(3), json::array{assistant("a")}), 1));
    ASSERT_EQ(r.patches.size(), 1u);
    EXPECT_EQ(r.patches[0].at("from"), version(1));
    EXPECT_EQ(c.version(), version(3));
    // The patch that showed the gap, seen again, is now covered.
    EXPECT_TRUE(c.patch(patch(version(2), version(3))).patches.empty());
}

TEST(WatchCursor, ASequenceGapResyncsAndDeliversOnlyTheMissingText) {
    watch_cursor c;
    c.start(reply(patch(version(0), version(1)), 0));
    c.delta(json::object{{"type", "message.start"}, {"step", 0}});
    EXPECT_EQ(texts(c.delta(text_delta(0, 1, "one "))), "one ");
    auto d = c.delta(text_delta(0, 3, "three "));  // seq 2 was lost
    EXPECT_TRUE(d.gap);
    auto r = c.resync(reply(patch(version(1), version(1)), 0,
                            json::object{{"step", 0}, {"text", "one two three "}, {"seq", 3}}));
    EXPECT_EQ(texts(r), "two three ");
    EXPECT_EQ(texts(c.delta(text_delta(0, 4, "four"))), "four");
}

TEST(WatchCursor, ADeltaOfAMessageWhoseStartWasMissedIsAGap) {
    watch_cursor c;
    c.start(reply(patch(version(0), version(1)), 0));
    EXPECT_TRUE(c.delta(text_delta(0, 2, "x")).gap);
    // The message ended meanwhile and was discarded: the resync says so.
    auto r = c.resync(reply(patch(version(1), version(1)), 0,
                            json::object{{"step", 0}, {"text", "x"}, {"seq", 2}}));
    EXPECT_EQ(r.deltas.front().at("type"), "message.start");
    auto gone = c.resync(reply(patch(version(1), version(1)), 0));
    ASSERT_EQ(gone.deltas.size(), 1u);
    EXPECT_EQ(gone.deltas[0].at("type"), "message.discard");
}

// Issue 31, defect 1: the owner was killed after streaming part of a message, and the next owner
// (a higher epoch) streamed the same step again from seq 1. The watch swallowed the new
// message.start and dropped the new deltas as repeats of the old owner's. Now the interruption
// ends the old message (a discard after its patch), the new owner's message is delivered
// whole, and the old owner's late events are dropped, not gaps.
TEST(WatchCursor, AMessageRestartedByANewOwnerIsDeliveredWholeAfterTheOldOnesDiscard) {
    watch_cursor c;
    c.start(reply(patch(version(0), version(1)), 0));
    EXPECT_EQ(types(c.delta(start_of(0, 1))), std::vector<std::string>{"message.start"});
    EXPECT_EQ(texts(c.delta(delta_of(0, 1, 1, "Alpha "))), "Alpha ");
    EXPECT_EQ(texts(c.delta(delta_of(0, 1, 2, "bravo "))), "bravo ");
    auto stopped = c.patch(patch(version(1), version(2),
                                 json::array{json::object{{"type", "interruption"},
                                                          {"kind", "owner_lost"}}}));
    ASSERT_EQ(stopped.patches.size(), 1u);
    EXPECT_EQ(types(stopped), std::vector<std::string>{"message.discard"});
    EXPECT_EQ(types(c.delta(start_of(0, 2))), std::vector<std::string>{"message.start"});
    EXPECT_EQ(texts(c.delta(delta_of(0, 2, 1, "Alpha "))), "Alpha ");
    EXPECT_EQ(texts(c.delta(delta_of(0, 2, 2, "bravo "))), "bravo ");
    auto late = c.delta(delta_of(0, 1, 3, "charlie "));  // the old owner's, arriving late
    EXPECT_TRUE(late.deltas.empty());
    EXPECT_FALSE(late.gap);
    EXPECT_TRUE(c.delta(start_of(0, 1)).deltas.empty()) << "an old owner's start is stale";
    EXPECT_EQ(texts(c.delta(delta_of(0, 2, 3, "charlie"))), "charlie");
    EXPECT_EQ(c.patch(patch(version(2), version(3), json::array{assistant("Alpha bravo charlie")}))
                  .patches.size(),
              1u);
}

// A watcher that holds an old owner's message (its backfill came from that owner) and gets the
// new owner's start: the old message is discarded as the new one starts.
TEST(WatchCursor, ANewOwnersStartDiscardsTheOldOwnersMessageFirst) {
    watch_cursor c;
    c.start(reply(patch(version(0), version(1)), 0,
                  json::object{{"step", 0}, {"epoch", 1}, {"text", "Alpha "}, {"seq", 1}}));
    EXPECT_EQ(types(c.delta(start_of(0, 2))),
              (std::vector<std::string>{"message.discard", "message.start"}));
    EXPECT_EQ(texts(c.delta(delta_of(0, 2, 1, "Alpha "))), "Alpha ");
    EXPECT_TRUE(c.delta(delta_of(0, 1, 2, "bravo ")).deltas.empty()) << "the old owner's";
}

// The backfill's inflight holds the tool-call deltas streamed so far, and the owner's epoch.
TEST(WatchCursor, TheBackfillsInflightToolCallsAreDelivered) {
    watch_cursor c;
    json::array calls{json::object{{"id", "c1"}, {"name", "echo"}, {"arguments", "{\"te"}},
                      json::object{{"id", ""}, {"name", ""}, {"arguments", "xt\":1}"}}};
    auto d = c.start(reply(patch(version(0), version(1)), 0,
                           json::object{{"step", 0}, {"epoch", 4}, {"text", "Let me "},
                                        {"seq", 3}, {"tool_calls", calls}}));
    EXPECT_EQ(types(d), (std::vector<std::string>{"message.start", "text.delta",
                                                  "tool_call.delta", "tool_call.delta"}));
    EXPECT_EQ(d.deltas[0].at("epoch"), 4);
    EXPECT_EQ(d.deltas[2].at("name"), "echo");
    EXPECT_TRUE(c.delta(delta_of(0, 4, 3, "x")).deltas.empty()) << "seq 3 is in the backfill";
}

TEST(WatchCursor, ARegisterOnlyPatchAtTheCurrentVersionIsDelivered) {
    watch_cursor c;
    c.start(reply(patch(version(0), version(1)), 0));
    auto p = patch(version(1), version(1));
    p["status"] = json::object{{"has_work", false}};
    auto d = c.patch(p);
    ASSERT_EQ(d.patches.size(), 1u);
    EXPECT_FALSE(d.gap);
}

json::object stamped(const char* state, std::uint64_t epoch, std::uint64_t seq) {
    return json::object{
        {"state", state}, {"paused", false}, {"has_work", false}, {"epoch", epoch}, {"seq", seq}};
}

// A status patch published before the backfill was read can arrive after it: the watcher keeps
// the newer status (the backfill's), and the last status it holds is the session's.
TEST(WatchCursor, AStatusOlderThanTheOneHeldIsDropped) {
    watch_cursor c;
    auto r = reply(patch(version(0), version(1)), 0);
    r["status"] = stamped("idle", 3, 20);
    c.start(r);
    auto stale = patch(version(1), version(1));
    stale["status"] = stamped("preparing", 3, 19);
    EXPECT_TRUE(c.patch(stale).patches.empty()) << "older than the backfill's status";
    // A content patch that chains is delivered, without an older status it might carry.
    auto content = patch(version(1), version(2), json::array{assistant("hi")});
    content["status"] = stamped("inferring", 3, 18);
    auto d = c.patch(content);
    ASSERT_EQ(d.patches.size(), 1u);
    EXPECT_FALSE(d.patches[0].contains("status"));
    // Newer ones are delivered, whether from this owner or a later one (a higher epoch).
    auto newer = patch(version(2), version(2));
    newer["status"] = stamped("preparing", 3, 21);
    EXPECT_EQ(c.patch(newer).patches.size(), 1u);
    auto next_owner = patch(version(2), version(2));
    next_owner["status"] = stamped("idle", 4, 1);
    EXPECT_EQ(c.patch(next_owner).patches.size(), 1u);
    auto late = patch(version(2), version(2));
    late["status"] = stamped("inferring", 3, 22);
    EXPECT_TRUE(c.patch(late).patches.empty()) << "the previous owner's last words";
}

TEST(ClientSessionIds, BadIdsAreRefusedBeforeAnySubjectIsBuilt) {
    for (const char* bad : {"", "a.b", "*", ">", "a b", "a/b", "..", "tab\t",
                            "x12345678901234567890123456789012345678901234567890123456789012345"}) {
        EXPECT_FALSE(client::valid_session_id(bad)) << bad;
    }
    for (const char* good : {"a", "demo", "A-b_9", "s1"}) {
        EXPECT_TRUE(client::valid_session_id(good)) << good;
    }
}

}  // namespace wuhu::testing
