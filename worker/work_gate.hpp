// A gate that background work passes through, so that a stop can wait for all of it.
//
// enter() returns a pass (from any thread); the work holds it until it is done. emptied()
// suspends until nobody holds a pass, or a deadline: the node's stop awaits it instead of
// polling counters. One waiter at a time, on the gate's executor.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <utility>

namespace wuhu::worker {

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

    explicit work_gate(boost::asio::any_io_executor ex) : ex_(ex), wake_(ex) {}
    work_gate(const work_gate&) = delete;
    work_gate& operator=(const work_gate&) = delete;

    pass enter() {
        ++inside_;
        return pass(this);
    }
    std::size_t inside() const { return inside_.load(); }

    // True once nobody holds a pass; false at `deadline` if somebody still does.
    boost::asio::awaitable<bool> emptied(std::chrono::steady_clock::time_point deadline) {
        namespace asio = boost::asio;
        while (inside_.load() > 0) {
            if (std::chrono::steady_clock::now() >= deadline) {
                co_return false;
            }
            wake_.expires_at(deadline);
            boost::system::error_code ec;
            co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
        co_return true;
    }

  private:
    void leave() {
        if (--inside_ == 0) {
            // The waiter checks the count on the executor before it waits, and this wake-up
            // runs on the executor after that: none is lost.
            boost::asio::post(ex_, [this] { wake_.cancel(); });
        }
    }

    boost::asio::any_io_executor ex_;
    boost::asio::steady_timer wake_;
    std::atomic<std::size_t> inside_{0};
};

}  // namespace wuhu::worker
