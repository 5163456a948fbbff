// A fault-injecting wrapper around any session store, for tests of the persist-first rule.
//
// `fail_next_commits(n)` makes the next n commits fail with `unavailable` before they reach the
// wrapped store (nothing is written: the failure is clean). `fail_after_commit(n)` lets the
// next n commits reach the store and then reports `unavailable` anyway: the write happened but
// the caller cannot know (an uncertain outcome). `crash_after_commits(n)` lets n more commits
// through and fails every one after that: the process "died" right after commit n.
// `hold_commits()` makes every commit wait on its thread until `release_commits()` (a disk that
// stalls), and `held_commits()` tells how many are waiting.
#pragma once

#include "storage/store.hpp"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace wuhu::storage {

class faulty_store final : public forwarding_store {
  public:
    explicit faulty_store(session_store& inner) : forwarding_store(inner) {}

    void fail_next_commits(int n) { fail_before_ = n; }
    void fail_after_commit(int n) { fail_after_ = n; }
    void crash_after_commits(int n) { crash_budget_ = n; }
    void hold_commits();
    void release_commits();
    int held_commits() const;
    // Commits that reached the wrapped store.
    int commits() const { return commits_; }
    // The thread the last commit ran on (to check where store IO runs).
    std::thread::id last_commit_thread() const {
        std::lock_guard lock(thread_mu_);
        return last_thread_;
    }

  protected:
    result<std::unique_ptr<session_log>> do_open(const session_id& id, lease_epoch epoch,
                                                 open_mode mode) override;

  private:
    friend class faulty_log;
    std::atomic<int> fail_before_{0};
    std::atomic<int> fail_after_{0};
    std::atomic<int> crash_budget_{-1};  // -1: no crash planned
    std::atomic<int> commits_{0};
    mutable std::mutex hold_mu_;
    std::condition_variable hold_cv_;
    bool holding_ = false;
    int held_ = 0;
    mutable std::mutex thread_mu_;
    std::thread::id last_thread_;
};

}  // namespace wuhu::storage
