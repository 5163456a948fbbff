#include "storage/faulty_store.hpp"
#include "storage/memory_store.hpp"
#include "tests/storage/conformance.hpp"

#include <thread>

namespace wuhu::testing {

TEST(FaultyStore, AFailedCommitWritesNothing) {
    storage::memory_store inner;
    storage::faulty_store store(inner);
    auto log = store.open(session_id::parse("s").value(), lease_epoch{1}).value();
    session_state s = log->load().value();
    store.fail_next_commits(1);
    auto r = log->enqueue(s, user_in(lane::steer, "a", "x"), unix_ms{1});
    EXPECT_EQ(r.error(), make_error_code(storage::errc::unavailable));
    EXPECT_EQ(log->load().value(), s);
    EXPECT_EQ(inner.commits(), 0u);
    EXPECT_TRUE(log->enqueue(s, user_in(lane::steer, "a", "x"), unix_ms{1}).has_value());
}

TEST(FaultyStore, AnUncertainCommitMayHaveLandedSoTheOwnerMustReload) {
    storage::memory_store inner;
    storage::faulty_store store(inner);
    auto log = store.open(session_id::parse("s").value(), lease_epoch{1}).value();
    session_state s = log->load().value();
    store.fail_after_commit(1);
    auto r = log->enqueue(s, user_in(lane::steer, "a", "x"), unix_ms{1});
    EXPECT_EQ(r.error(), make_error_code(storage::errc::unavailable));
    // The write happened: an owner that guessed "not written" and retried from its old state
    // would be refused, which is why an uncertain write drops the session and reloads.
    EXPECT_EQ(log->load()->in(lane::steer).pending.size(), 1u);
    EXPECT_EQ(log->enqueue(s, user_in(lane::steer, "b", "y"), unix_ms{2}).error(),
              make_error_code(storage::errc::conflict));
}

TEST(FaultyStore, HeldCommitsWaitUntilReleasedAndThenLand) {
    storage::memory_store inner;
    storage::faulty_store store(inner);
    auto log = store.open(session_id::parse("s").value(), lease_epoch{1}).value();
    session_state s = log->load().value();
    store.hold_commits();
    std::thread committer([&] {
        EXPECT_TRUE(log->enqueue(s, user_in(lane::steer, "a", "x"), unix_ms{1}).has_value());
    });
    for (int i = 0; i < 10'000 && store.held_commits() == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(store.held_commits(), 1);
    EXPECT_EQ(inner.commits(), 0u);
    store.release_commits();
    committer.join();
    EXPECT_EQ(store.held_commits(), 0);
    EXPECT_EQ(inner.commits(), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    FaultyWrapperOfMemory, StoreConformance,
    ::testing::Values(store_factory{
        "faulty_memory",
        [] {
            struct owning : storage::forwarding_store {
                owning() : forwarding_store(static_cast<storage::session_store&>(outer)) {}
                storage::memory_store inner;
                storage::faulty_store outer{inner};
            };
            return std::unique_ptr<storage::session_store>(std::make_unique<owning>());
        }}),
    [](const auto& info) { return info.param.name; });

}  // namespace wuhu::testing
