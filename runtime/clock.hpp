// Time for the worker: wall-clock timestamps and cancellable sleeps.
//
// `system_clock` is the real one. `manual_clock` is for deterministic tests: time moves only
// when the test calls `advance`, which wakes the sleepers whose deadline has passed. Both are
// used from the executor of the coroutines that sleep on them (not thread-safe).
#pragma once

#include "session/ids.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

namespace wuhu::runtime {

namespace asio = boost::asio;
using std::chrono::milliseconds;

class clock {
  public:
    virtual ~clock() = default;
    // Wall-clock time, for timestamps and durable timers.
    virtual session::unix_ms now() = 0;
    // Completes after `d`. Cancellable: a cancelled sleep throws operation_aborted.
    asio::awaitable<void> sleep(milliseconds d);
    // Completes after `d` (true), or when cancelled (false), without an exception: for the
    // losing side of a race, and for a sleep whose cancellation is part of the plan.
    virtual asio::awaitable<bool> elapsed(milliseconds d) = 0;
    // elapsed() for a side of a race (`||`): a cancelled side's outcome is never read.
    asio::awaitable<void> timeout(milliseconds d);
    // Completes at wall-clock time `t` (at once if it has passed).
    asio::awaitable<void> sleep_until(session::unix_ms t);
};

class system_clock final : public clock {
  public:
    session::unix_ms now() override;
    asio::awaitable<bool> elapsed(milliseconds d) override;
};

class manual_clock final : public clock {
  public:
    explicit manual_clock(session::unix_ms start) : now_(start) {}

    session::unix_ms now() override { return now_; }
    asio::awaitable<bool> elapsed(milliseconds d) override;

    // Moves time forward by `d` and wakes every sleeper whose deadline is now due.
    void advance(milliseconds d);
    // Moves time to the earliest deadline and wakes its sleepers; false if nobody sleeps.
    bool advance_to_next();
    std::optional<session::unix_ms> next_deadline() const;
    std::size_t sleepers() const { return sleepers_.size(); }

  private:
    struct sleeper {
        session::unix_ms due;
        std::unique_ptr<asio::steady_timer> timer;
        bool fired = false;
    };
    void wake_due();

    session::unix_ms now_;
    std::vector<std::shared_ptr<sleeper>> sleepers_;
};

}  // namespace wuhu::runtime
