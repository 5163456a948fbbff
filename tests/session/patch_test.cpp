#include "session/patch.hpp"
#include "session/reducer.hpp"
#include "tests/support/builders.hpp"
#include "tests/support/random_ops.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace {

// A random history and the versions it passed through.
struct history {
    session_state state;
    std::vector<version_vector> versions;
};

history random_history(std::uint64_t seed, int steps) {
    std::mt19937_64 rng(seed);
    history h;
    h.versions.push_back(h.state.version());
    for (int i = 0; i < steps; ++i) {
        auto op = next_op(rng, h.state, unix_ms{i});
        if (auto actions = run_pure(op, h.state); actions && !actions->empty()) {
            apply_actions(*actions, h.state);
            h.versions.push_back(h.state.version());
        }
    }
    return h;
}

}  // namespace

TEST(VersionVector, AdvancesWithEveryDurableMutationOfTranscriptOrLanes) {
    session_state s;
    EXPECT_EQ(s.version(), (version_vector{}));
    s = enqueued(s, user_in(lane::steer, "a", "x"), 1);
    s = enqueued(s, system_in("b", "y"), 2);
    EXPECT_EQ(s.version(), (version_vector{0, 1, 1, 0}));
    apply_actions(plan_drain(s, checkpoint::steer, unix_ms{3}), s);
    EXPECT_EQ(s.version(), (version_vector{2, 2, 2, 0}));
}

TEST(StablePatch, FromScratchEqualsEverythingSinceVersionZero) {
    session_state s = enqueued({}, user_in(lane::follow_up, "a", "x"), 1);
    auto p = since(s, {}).value();
    EXPECT_EQ(p.from, (version_vector{}));
    EXPECT_EQ(p.to, s.version());
    EXPECT_EQ(p.journal[index_of(lane::follow_up)].size(), 1u);
    ASSERT_TRUE(p.config.has_value());
    ASSERT_TRUE(p.state.has_value());
    EXPECT_TRUE(p.state->has_work);
}

TEST(StablePatch, CarriesOnlyWhatChangedAfterTheVersion) {
    session_state s = enqueued({}, user_in(lane::follow_up, "a", "x"), 1);
    auto v = s.version();
    s = enqueued(s, user_in(lane::follow_up, "b", "y"), 2);
    auto p = since(s, v).value();
    ASSERT_EQ(p.journal[index_of(lane::follow_up)].size(), 1u);
    EXPECT_EQ(p.journal[index_of(lane::follow_up)][0].item_id().str(), "b");
    EXPECT_TRUE(p.transcript.empty());
}

TEST(StablePatch, RejectsAVersionAheadOfTheState) {
    EXPECT_EQ(since({}, version_vector{1, 0, 0, 0}).error(),
              make_error_code(errc::invalid_version));
}

TEST(StablePatch, ItemsEnqueuedAndMaterializedInTheWindowAreCoalescedAway) {
    session_state s = enqueued({}, user_in(lane::steer, "old", "x"), 1);
    auto v = s.version();
    s = enqueued(s, user_in(lane::steer, "new", "y"), 2);
    s = enqueued(s, user_in(lane::follow_up, "later", "z"), 3);
    apply_actions(plan_drain(s, checkpoint::steer, unix_ms{4}), s);
    auto p = since(s, v).value();
    // "new" was enqueued and materialized in the window: only its transcript entry remains.
    // "old" was enqueued before: its materialization is kept. "later" is still pending.
    const auto& steer = p.journal[index_of(lane::steer)];
    ASSERT_EQ(steer.size(), 1u);
    EXPECT_EQ(steer[0].item_id().str(), "old");
    EXPECT_TRUE(std::holds_alternative<materialized_fact>(steer[0].fact));
    EXPECT_EQ(p.journal[index_of(lane::follow_up)].size(), 1u);
    EXPECT_EQ(p.transcript.size(), 2u);
    EXPECT_EQ(p.to, s.version());  // the cursors still advance past coalesced facts
}

TEST(StablePatch, ItemsEnqueuedAndCanceledInTheWindowAreCoalescedAway) {
    session_state s = enqueued({}, user_in(lane::steer, "a", "x"), 1);
    apply_actions(plan_cancel(s, lane::steer, item("a"), unix_ms{2})->actions, s);
    auto p = since(s, {}).value();
    EXPECT_TRUE(p.journal[index_of(lane::steer)].empty());
    EXPECT_EQ(p.to.steer, 2u);
}

TEST(CommittedPatch, OfOneOperationChainsFromTheVersionBefore) {
    session_state s = enqueued({}, user_in(lane::steer, "a", "x"), 1);
    auto before = s.version();
    auto actions = plan_drain(s, checkpoint::steer, unix_ms{2});
    apply_actions(actions, s);
    auto p = patch_of(before, actions, s);
    EXPECT_EQ(p.from, before);
    EXPECT_EQ(p.to, s.version());
    EXPECT_EQ(p.transcript.size(), 1u);
    EXPECT_FALSE(p.config.has_value());
    EXPECT_FALSE(p.state.has_value());
    auto stable = since(s, before).value();
    stable.config.reset();
    stable.state.reset();
    EXPECT_EQ(p, stable);
}

TEST(CommittedPatch, CarriesRegistersOnlyWhenTheyChanged) {
    session_state s;
    auto actions = plan_enqueue(s, user_in(lane::steer, "a", "x"), unix_ms{1})->actions;
    auto before = s.version();
    apply_actions(actions, s);
    auto p = patch_of(before, actions, s, loop_state::preparing);
    ASSERT_TRUE(p.state.has_value());
    EXPECT_TRUE(p.state->has_work);
    EXPECT_EQ(p.state->state, loop_state::preparing);
}

TEST(StatusPatch, ChangesNoVersionAndCarriesOnlyTheStatus) {
    session_state st;
    apply_actions(plan_enqueue(st, user_in(lane::steer, "s1", "x"), unix_ms{1})->actions, st);
    auto p = status_patch(st, loop_state::inferring);
    EXPECT_EQ(p.from, st.version());
    EXPECT_EQ(p.to, st.version());
    EXPECT_TRUE(p.transcript.empty());
    EXPECT_FALSE(p.config.has_value());
    ASSERT_TRUE(p.state.has_value());
    EXPECT_EQ(*p.state, (status{loop_state::inferring, false, true, 0, 0, {}}));
    EXPECT_EQ(compose(*since(st, version_vector{}), p).state, p.state) << "it composes";
}

TEST(PatchComposition, PatchAtoBThenBtoCEqualsPatchAtoC) {
    int checked = 0;
    for (std::uint64_t seed = 1; seed <= 30; ++seed) {
        history h = random_history(seed, 200);
        std::mt19937_64 rng(seed * 7919);
        for (int k = 0; k < 40; ++k) {
            std::size_t i = rng() % h.versions.size();
            std::size_t j = i + rng() % (h.versions.size() - i);
            std::size_t m = j + rng() % (h.versions.size() - j);
            auto ab = between(h.state, h.versions[i], h.versions[j]).value();
            auto bc = between(h.state, h.versions[j], h.versions[m]).value();
            auto ac = between(h.state, h.versions[i], h.versions[m]).value();
            ASSERT_EQ(compose(ab, bc), ac) << "seed " << seed << " " << i << "," << j << "," << m;
            ++checked;
        }
    }
    EXPECT_EQ(checked, 30 * 40);
}

TEST(PatchComposition, CommittedPatchesOfEveryOperationComposeToTheStablePatch) {
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        std::mt19937_64 rng(seed);
        session_state s;
        patch acc = since(s, {}).value();
        for (int i = 0; i < 200; ++i) {
            auto op = next_op(rng, s, unix_ms{i});
            auto actions = run_pure(op, s);
            if (!actions) {
                continue;
            }
            auto before = s.version();
            apply_actions(*actions, s);
            acc = compose(acc, patch_of(before, *actions, s));
        }
        auto expected = since(s, {}).value();
        acc.state = expected.state;  // registers of since() always carry the latest value
        acc.config = expected.config;
        EXPECT_EQ(acc, expected) << "seed " << seed;
    }
}

}  // namespace wuhu::testing

namespace wuhu::testing {

// Subscribe pages (issue 30): from any version, pages chain (each starts where the last ended),
// each moves on and holds at most its items (one larger than the bytes goes alone), the
// transcript comes first, and together they reach the current version with every entry once.
TEST(StablePatch, PagesChainToTheCurrentVersionWithinTheirLimits) {
    for (std::uint64_t seed = 1; seed <= 30; ++seed) {
        auto h = random_history(seed, 200);
        for (std::size_t start = 0; start < h.versions.size(); start += 37) {
            const version_vector from = h.versions[start];
            version_vector at = from;
            std::vector<entry> transcript;
            int pages = 0;
            while (at != h.state.version()) {
                const auto to = page_end(h.state, at, 5, 600);
                ASSERT_TRUE(at.le(to)) << "seed " << seed;
                ASSERT_NE(to, at) << "a page moves on";
                const std::uint64_t items = (to.transcript - at.transcript) +
                                            (to.system - at.system) + (to.steer - at.steer) +
                                            (to.follow_up - at.follow_up);
                EXPECT_LE(items, 5u);
                if (to.transcript < h.state.version().transcript) {
                    EXPECT_EQ(to.system, at.system) << "the lanes wait for the whole transcript";
                }
                auto p = between(h.state, at, to);
                ASSERT_TRUE(p);
                EXPECT_EQ(p->from, at);
                EXPECT_EQ(p->to, to);
                transcript.insert(transcript.end(), p->transcript.begin(), p->transcript.end());
                at = to;
                ASSERT_LT(++pages, 10'000);
            }
            EXPECT_EQ(transcript.size(), h.state.transcript.size() - from.transcript);
            EXPECT_TRUE(std::equal(transcript.begin(), transcript.end(),
                                   h.state.transcript.begin() +
                                       static_cast<std::ptrdiff_t>(from.transcript)));
        }
    }
    session_state one = enqueued({}, user_in(lane::follow_up, "big", std::string(5000, 'x')), 1);
    EXPECT_EQ(page_end(one, {}, 5, 600), one.version()) << "one fact larger than a page goes alone";
}

}  // namespace wuhu::testing
