// Concurrent inferences of one worker (DESIGN.md "Bounds": a fair share of the fleet's
// provider capacity): at most `total` at once, and at most `per_tenant` of one tenant (the
// fleet's sessions of no tenant count as one). A session that may not infer yet waits in its
// tenant's line (FIFO); a slot that frees goes to the waiting tenant with the fewest inferences
// running (ties in turn), so one tenant with many busy sessions cannot starve the others'
// turns.
//
// Executor: one (the worker's); not thread-safe.
#pragma once

#include "runtime/sync.hpp"

#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <string>

namespace wuhu::providers {

namespace asio = boost::asio;

class inference_slots {
  public:
    struct limits {
        std::size_t total = 0;       // 0: no limit
        std::size_t per_tenant = 0;  // 0: no limit
    };

    // Gives its slot back when destroyed.
    class slot {
      public:
        slot() = default;
        slot(inference_slots* owner, std::string tenant)
            : owner_(owner), tenant_(std::move(tenant)) {}
        slot(slot&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), tenant_(std::move(o.tenant_)) {}
        slot& operator=(slot&&) = delete;
        ~slot() {
            if (owner_ != nullptr) {
                owner_->release(tenant_);
            }
        }

      private:
        inference_slots* owner_ = nullptr;
        std::string tenant_;
    };

    explicit inference_slots(limits l) : limits_(l) {}
    inference_slots(const inference_slots&) = delete;
    inference_slots& operator=(const inference_slots&) = delete;

    // A slot for one inference of `tenant`, once there is one. Cancellable: a waiter that is
    // cancelled (an abort, a session unloaded) leaves the line, and a slot handed to it just
    // then goes to the next.
    asio::awaitable<slot> acquire(std::string tenant);

    std::size_t running() const { return total_running_; }
    std::size_t running(const std::string& tenant) const;
    std::size_t waiting() const;

  private:
    struct waiter {
        runtime::async_event ready;
        bool granted = false;
    };
    bool may_run(const std::string& tenant) const;
    void release(const std::string& tenant);
    // Hands free slots to the waiters, fairly.
    void hand_out();

    limits limits_;
    std::size_t total_running_ = 0;
    std::map<std::string, std::size_t, std::less<>> running_;
    std::map<std::string, std::deque<std::shared_ptr<waiter>>, std::less<>> lines_;
    std::string served_last_;  // ties go to the tenant after it
};

}  // namespace wuhu::providers
