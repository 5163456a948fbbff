// What a worker publishes for each loop event, the codes of its own errors; URLs in logs.
#include "broker/patch_batch.hpp"
#include "broker/server.hpp"
#include "nats/connection.hpp"
#include "storage/errc.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace json = boost::json;

TEST(Events, DeltasAndPatchesHaveTheDocumentedShape) {
    EXPECT_EQ(json::parse(*broker::delta_event(worker::stream_began_event{3, 7})),
              json::parse(R"({"type":"message.start","step":3,"epoch":7})"));
    EXPECT_EQ(
        json::parse(*broker::delta_event(worker::stream_delta_event{3, 7, 2, "Hi", std::nullopt})),
        json::parse(R"({"type":"text.delta","step":3,"epoch":7,"seq":2,"text":"Hi"})"));
    EXPECT_EQ(
        json::parse(*broker::delta_event(worker::stream_delta_event{
            3, 7, 4, "", providers::tool_call_delta{"c1", "echo", "{}"}})),
        json::parse(
            R"({"type":"tool_call.delta","step":3,"epoch":7,"seq":4,"id":"c1","name":"echo","arguments":"{}"})"));
    EXPECT_EQ(json::parse(*broker::delta_event(worker::stream_ended_event{3, 7, false})),
              json::parse(R"({"type":"message.discard","step":3,"epoch":7})"));
    EXPECT_FALSE(broker::delta_event(worker::stream_ended_event{3, 7, true}).has_value());
}

// The patches of one run of the executor, as patch_batch publishes them.
class PatchBatch : public ::testing::Test {
  protected:
    using sid_t = session::session_id;
    session::patch commit(std::uint64_t from, std::uint64_t to,
                          std::optional<session::status> st = std::nullopt) {
        session::patch p;
        p.from.transcript = from;
        p.to.transcript = to;
        for (auto id = from + 1; id <= to; ++id) {
            p.transcript.push_back(
                session::entry{session::entry_seq{id}, session::unix_ms{0}, reply("a")});
        }
        p.state = st;
        return p;
    }
    session::patch status(std::uint64_t at, session::loop_state l, bool has_work = true) {
        session::patch p;
        p.from.transcript = at;
        p.to.transcript = at;
        p.state = session::status{l, false, has_work, 1, ++seq_, {}};
        return p;
    }
    std::vector<std::pair<std::string, session::patch>> out;
    broker::patch_batch batch{[this](const sid_t& sid, const session::patch& p) {
        out.emplace_back(sid.str(), p);
    }};
    const sid_t a = session::session_id::parse("a").value();
    const sid_t b = session::session_id::parse("b").value();
    std::uint64_t seq_ = 0;
};

TEST_F(PatchBatch, ALoopStateAfterACommitRidesInItsPatch) {
    EXPECT_TRUE(batch.add(a, commit(1, 4), false)) << "the first: the caller flushes later";
    EXPECT_FALSE(batch.add(a, status(4, session::loop_state::executing_tools), true));
    EXPECT_TRUE(out.empty()) << "held until the flush";
    batch.flush();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].second.from.transcript, 1u);
    EXPECT_EQ(out[0].second.to.transcript, 4u);
    EXPECT_EQ(out[0].second.transcript.size(), 3u);
    EXPECT_EQ(out[0].second.state->state, session::loop_state::executing_tools);
    EXPECT_TRUE(batch.empty());
}

// DESIGN.md: every loop state change reaches watchers.
TEST_F(PatchBatch, TwoLoopStatesAreNeverMerged) {
    batch.add(a, status(4, session::loop_state::preparing), true);
    batch.add(a, status(4, session::loop_state::inferring), true);
    ASSERT_EQ(out.size(), 1u) << "the first went out when the second came";
    EXPECT_EQ(out[0].second.state->state, session::loop_state::preparing);
    batch.add(a, commit(4, 5), false);
    batch.add(a, status(5, session::loop_state::idle, false), true);
    batch.add(a, commit(5, 6), false);
    batch.flush();
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[1].second.state->state, session::loop_state::inferring);
    EXPECT_EQ(out[1].second.to.transcript, 5u) << "a commit after a state joins it";
    EXPECT_EQ(out[2].second.state->state, session::loop_state::idle);
    EXPECT_EQ(out[2].second.from.transcript, 5u);
    EXPECT_EQ(out[2].second.to.transcript, 6u);
}

// A commit's own status (has_work cleared with the answer) is no loop state change: the state
// that follows replaces it, and has_work stays as the commit left it.
TEST_F(PatchBatch, ACommitsStatusGivesWayToTheLoopStateThatFollows) {
    batch.add(a,
              commit(6, 7, session::status{session::loop_state::inferring, false, false, 1, 9, {}}),
              false);
    batch.add(a, status(7, session::loop_state::idle, false), true);
    batch.flush();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].second.state->state, session::loop_state::idle);
    EXPECT_FALSE(out[0].second.state->has_work);
}

TEST_F(PatchBatch, SessionsAreKeptApartInTheOrderTheyCame) {
    EXPECT_TRUE(batch.add(b, commit(0, 1), false));
    EXPECT_FALSE(batch.add(a, commit(2, 3), false));
    EXPECT_FALSE(batch.add(b, status(1, session::loop_state::preparing), true));
    batch.flush();
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].first, "b");
    EXPECT_EQ(out[0].second.state->state, session::loop_state::preparing);
    EXPECT_EQ(out[1].first, "a");
    EXPECT_FALSE(out[1].second.state.has_value());
    batch.flush();
    EXPECT_EQ(out.size(), 2u) << "nothing twice";
    EXPECT_TRUE(batch.add(a, commit(3, 4), false)) << "empty again: the next add asks a flush";
}

TEST(Replies, StoreAndLeaseErrorsKeepTheirCode) {
    auto l = json::parse(protocol::error_reply(make_error_code(storage::errc::lease_lost)));
    EXPECT_EQ(l.at("error").at("code"), "lease_lost");
    auto o = json::parse(protocol::error_reply(make_error_code(ownership::errc::owner_changed)));
    EXPECT_EQ(o.at("error").at("code"), "owner_changed");
}

}  // namespace wuhu::testing
