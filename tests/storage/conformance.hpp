// The store conformance suite: every session_store backend runs these tests.
//
// A backend's test file defines a factory and instantiates the suite:
//
//     INSTANTIATE_TEST_SUITE_P(Memory, StoreConformance,
//                              ::testing::Values(store_factory{"memory", make_memory}));
//
// The central check is the invariant harness: after every operation,
// apply_actions(actions, state_before) == load(store), and a failed operation changes nothing.
#pragma once

#include "session/reducer.hpp"
#include "storage/store.hpp"
#include "tests/support/builders.hpp"
#include "tests/support/random_ops.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

namespace wuhu::testing {

struct store_factory {
    std::string name;
    // A new, empty store. Called once per test.
    std::function<std::unique_ptr<storage::session_store>()> make;
};

inline std::ostream& operator<<(std::ostream& os, const store_factory& f) {
    return os << f.name;
}

// Wraps a session_log and checks the invariant after each operation.
class checked_session {
  public:
    explicit checked_session(std::unique_ptr<storage::session_log> log)
        : log_(std::move(log)), state_(log_->load().value()) {}

    const session_state& state() const { return state_; }
    storage::session_log& log() { return *log_; }
    std::uint64_t operations() const { return operations_; }

    // Runs `op(log, state)`; on success applies its actions to the kept state; either way
    // checks that the kept state equals a fresh load. Returns the operation's result.
    template <class Op>
    auto run(Op&& op) {
        auto r = op(*log_, state_);
        if (r) {
            apply_actions(actions_of(*r), state_);
        }
        auto loaded = log_->load();
        EXPECT_TRUE(loaded.has_value());
        if (loaded) {
            EXPECT_EQ(*loaded, state_) << "apply_actions(actions, before) != load(store)";
        }
        ++operations_;
        return r;
    }

  private:
    static const action_list& actions_of(const action_list& a) { return a; }
    static const action_list& actions_of(const enqueue_outcome& o) { return o.actions; }
    static const action_list& actions_of(const cancel_outcome& o) { return o.actions; }

    std::unique_ptr<storage::session_log> log_;
    session_state state_;
    std::uint64_t operations_ = 0;
};

class StoreConformance : public ::testing::TestWithParam<store_factory> {
  protected:
    void SetUp() override { store_ = GetParam().make(); }
    storage::session_store& store() { return *store_; }
    std::unique_ptr<storage::session_log> open(const std::string& sid, std::uint64_t epoch) {
        return store_->open(session_id::parse_key(sid).value(), lease_epoch{epoch}).value();
    }

  private:
    std::unique_ptr<storage::session_store> store_;
};

}  // namespace wuhu::testing
