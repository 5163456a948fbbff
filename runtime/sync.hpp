// Coroutine synchronisation for one executor (a session's strand): a coalescing wake-up
// signal and a FIFO async mutex. Neither is thread-safe: use them from their executor only.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace wuhu::runtime {

namespace asio = boost::asio;

// notify() wakes one wait(); notifications that arrive while nobody waits coalesce into one.
class async_event {
  public:
    explicit async_event(asio::any_io_executor ex) : ch_(std::move(ex), 1) {}
    void notify() { ch_.try_send(boost::system::error_code{}); }
    // Forgets a pending notification.
    void reset() {
        while (ch_.try_receive([](boost::system::error_code) {})) {
        }
    }
    asio::awaitable<void> wait() { co_await ch_.async_receive(asio::use_awaitable); }
    // As wait(), but a cancelled wait completes too, without an exception: for the losing
    // side of a race (`||`), whose outcome nobody reads. (An exception a turn per race lost
    // cost a tenth of the worker's serving thread.)
    asio::awaitable<void> wait_or_cancelled() {
        co_await ch_.async_receive(asio::as_tuple(asio::use_awaitable));
    }

  private:
    asio::experimental::channel<void(boost::system::error_code)> ch_;
};

// A mutex for coroutines: lock() suspends until the holder unlocks; waiters go in FIFO order.
// The guard unlocks when destroyed, also when its coroutine is cancelled.
class async_mutex {
  public:
    class guard {
      public:
        explicit guard(async_mutex* m) : m_(m) {}
        guard(guard&& o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
        guard& operator=(guard&&) = delete;
        ~guard() {
            if (m_ != nullptr) {
                m_->unlock();
            }
        }

      private:
        async_mutex* m_;
    };

    explicit async_mutex(asio::any_io_executor ex) : ch_(std::move(ex), 1) {
        ch_.try_send(boost::system::error_code{});
    }
    asio::awaitable<guard> lock() {
        co_await ch_.async_receive(asio::use_awaitable);
        co_return guard(this);
    }

  private:
    void unlock() { ch_.try_send(boost::system::error_code{}); }
    asio::experimental::channel<void(boost::system::error_code)> ch_;
};

// A counting semaphore for coroutines: at most `n` holders at once; waiters go in FIFO order.
// The guard gives its unit back when destroyed, also when its coroutine is cancelled.
class async_semaphore {
  public:
    class guard {
      public:
        explicit guard(async_semaphore* s) : s_(s) {}
        guard(guard&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
        guard& operator=(guard&&) = delete;
        ~guard() {
            if (s_ != nullptr) {
                s_->ch_.try_send(boost::system::error_code{});
            }
        }

      private:
        async_semaphore* s_;
    };

    async_semaphore(asio::any_io_executor ex, std::size_t n) : ch_(std::move(ex), n) {
        for (std::size_t i = 0; i < n; ++i) {
            ch_.try_send(boost::system::error_code{});
        }
    }
    asio::awaitable<guard> acquire() {
        co_await ch_.async_receive(asio::use_awaitable);
        co_return guard(this);
    }

  private:
    asio::experimental::channel<void(boost::system::error_code)> ch_;
};

}  // namespace wuhu::runtime
