// A gate that background work passes through, so that a stop can wait for all of it.
//
// enter() returns a pass (from any thread); the work holds it until it is done. emptied()
// suspends until nobody holds a pass, or a deadline: the node's stop awaits it instead of
// polling counters. One waiter at a time, always on the same executor. The gate does not need
// that executor until the first wait, so it can outlive the io_context (declare it before):
// work destroyed with the context (a node that never ran) gives its passes back safely.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <utility>

namespace wuhu::runtime {

class work_gate {
  public:
    class pass {
      public:
        pass() = default;
        explicit pass(work_gate* g) : g_(g) {}
        pass(pass&& o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
        pass& operator=(pass&& o) noexcept {
            if (this != &o) {
                leave();
                g_ = std::exchange(o.g_, nullptr);
            }
            return *this;
        }
        pass(const pass&) = delete;
        pass& operator=(const pass&) = delete;
        ~pass() { leave(); }

      private:
        void leave() {
            if (g_ != nullptr) {
                std::exchange(g_, nullptr)->leave();
            }
        }
        work_gate* g_ = nullptr;
    };

    work_gate() = default;
    work_gate(const work_gate&) = delete;
    work_gate& operator=(const work_gate&) = delete;

    pass enter() {
        ++inside_;
        return pass(this);
    }
    std::size_t inside() const { return inside_.load(); }

    // True once nobody holds a pass; false at `deadline` if somebody still does. From the first
    // call on, passes are given back through the caller's executor, so that the last one is
    // counted there, after whichever thread gave it back has let go of the gate.
    boost::asio::awaitable<bool> emptied(std::chrono::steady_clock::time_point deadline) {
        namespace asio = boost::asio;
        {
            std::lock_guard lock(mu_);
            ex_ = co_await asio::this_coro::executor;
        }
        wake_.emplace(*ex_);
        bool empty = true;
        while (inside_.load() > 0) {
            if (std::chrono::steady_clock::now() >= deadline) {
                empty = false;
                break;
            }
            wake_->expires_at(deadline);
            boost::system::error_code ec;
            co_await wake_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
        wake_.reset();  // a timer must not outlive its executor's context
        co_return empty;
    }

  private:
    void leave() {
        std::optional<boost::asio::any_io_executor> ex;
        {
            std::lock_guard lock(mu_);
            ex = ex_;
            if (!ex) {
                --inside_;  // nobody waits yet: the waiter reads the count when it starts
                return;
            }
        }
        boost::asio::post(*ex, [this] {
            if (--inside_ == 0 && wake_) {
                wake_->cancel();
            }
        });
    }

    std::mutex mu_;  // guards ex_
    std::optional<boost::asio::any_io_executor> ex_;
    std::optional<boost::asio::steady_timer> wake_;  // the waiter's, while it waits
    std::atomic<std::size_t> inside_{0};
};

}  // namespace wuhu::runtime
