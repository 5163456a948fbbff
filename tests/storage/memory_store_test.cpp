#include "storage/memory_store.hpp"
#include "tests/storage/conformance.hpp"

namespace wuhu::testing {

INSTANTIATE_TEST_SUITE_P(Memory, StoreConformance,
                         ::testing::Values(store_factory{
                             "memory",
                             [] {
                                 return std::unique_ptr<storage::session_store>(
                                     std::make_unique<storage::memory_store>());
                             }}),
                         [](const auto& info) { return info.param.name; });

TEST(MemoryStore, OperationsThatRecordNothingDoNotCommit) {
    storage::memory_store store;
    auto log = store.open(session_id::parse("s").value(), lease_epoch{1}).value();
    session_state s = log->load().value();
    auto out = log->enqueue(s, user_in(lane::steer, "a", "x"), unix_ms{1}).value();
    s = applied(out.actions, s);
    EXPECT_EQ(store.commits(), 1u);
    ASSERT_TRUE(log->enqueue(s, user_in(lane::steer, "a", "x"), unix_ms{2}));  // duplicate
    ASSERT_TRUE(log->mark_idle(s));                                            // still pending
    ASSERT_TRUE(log->set_paused(s, false));                                    // unchanged
    EXPECT_EQ(store.commits(), 1u);
}

}  // namespace wuhu::testing
