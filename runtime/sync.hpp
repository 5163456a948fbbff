// Coroutine synchronisation for one executor (a session's strand): a coalescing wake-up
// signal and a FIFO async mutex. Neither is thread-safe: use them from their executor only.
// They keep no executor: each waiter completes through its own (a coroutine's).
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstddef>
#include <iterator>
#include <list>
#include <type_traits>
#include <utility>

namespace wuhu::runtime {

namespace asio = boost::asio;

namespace detail {

// The coroutines suspended on one of the primitives below, first come first served. Each
// completes once, through its own executor and never inside the call that completes it: woken
// (no error), or cancelled through its cancellation slot (operation_aborted). Nothing is
// allocated while nobody waits: the channels these were built on held a 512-byte buffer each
// from their construction, four of them in every loaded session (issue 36); nor is an
// executor kept (56 bytes each): a waiter completes through its own.
class waiters {
  public:
    using signature = void(boost::system::error_code);

    waiters() = default;
    waiters(const waiters&) = delete;
    waiters& operator=(const waiters&) = delete;
    ~waiters() {
        while (!queue_.empty()) {
            finish(queue_.begin(), asio::error::operation_aborted, true);
        }
    }

    // Suspends until wake_one() reaches this waiter, or its cancellation.
    template <class Token>
    auto wait(Token&& token) {
        return asio::async_initiate<Token, signature>([this](auto h) { enqueue(std::move(h)); },
                                                      token);
    }
    // The same, unless `pending` is set when the wait begins (not when it is made): then it
    // is cleared and the wait completes at once, through the waiter's executor.
    template <class Token>
    auto wait_unless(bool& pending, Token&& token) {
        return asio::async_initiate<Token, signature>(
            [this, &pending](auto h) {
                static_assert(has_executor<decltype(h)>, "a wait completes through its executor");
                if (std::exchange(pending, false)) {
                    const auto ex = asio::get_associated_executor(h);
                    asio::post(ex, asio::append(std::move(h), boost::system::error_code()));
                } else {
                    enqueue(std::move(h));
                }
            },
            token);
    }

    // Completes the first waiter without an error; false when none waits.
    bool wake_one() {
        if (queue_.empty()) {
            return false;
        }
        finish(queue_.begin(), {}, true);
        return true;
    }

  private:
    using handler = asio::any_completion_handler<signature>;
    struct waiter {
        handler h;
        asio::any_io_executor work;  // its executor, outstanding work while it waits
    };

    // A handler without an executor of its own would complete on another thread.
    template <class Handler>
    static constexpr bool has_executor =
        !std::is_same_v<asio::associated_executor_t<Handler>, asio::system_executor>;

    template <class Handler>
    void enqueue(Handler h) {
        static_assert(has_executor<Handler>, "a waiter completes through its own executor");
        // A waiter counts as outstanding work of its executor, as an operation on an I/O
        // object does: its io_context does not run out of work while it waits.
        auto work = asio::prefer(asio::get_associated_executor(h),
                                 asio::execution::outstanding_work.tracked);
        queue_.push_back(waiter{handler(std::move(h)), std::move(work)});
        const auto it = std::prev(queue_.end());
        if (auto slot = asio::get_associated_cancellation_slot(it->h); slot.is_connected()) {
            // Once: the handler stays in the slot until the posted completion runs, and a
            // signal may be emitted again meanwhile (a stop, then an unload).
            slot.assign([this, it, armed = true](asio::cancellation_type) mutable {
                if (std::exchange(armed, false)) {
                    finish(it, asio::error::operation_aborted, false);
                }
            });
        }
    }

    // `clear_slot`: the waiter's cancellation handler goes (not from inside that handler).
    void finish(std::list<waiter>::iterator it, boost::system::error_code ec, bool clear_slot) {
        handler h = std::move(it->h);
        const auto work = std::move(it->work);
        queue_.erase(it);
        if (auto slot = asio::get_associated_cancellation_slot(h);
            clear_slot && slot.is_connected()) {
            slot.clear();
        }
        // Through the handler's own executor (a coroutine's, or its strand). The waiter's work
        // ends after the post, which counts as work itself (in between, an io_context with
        // nothing else to do would stop).
        asio::post(work, asio::append(std::move(h), ec));
    }

    std::list<waiter> queue_;
};

// Resumes through the executor, as a woken waiter does: what was free or pending is taken at
// once, but the caller goes on only after what was queued before it (the commands of a burst
// each reach a session's section, and count as waiting, before the first one runs), as the
// channels these were built on did.
inline asio::awaitable<void> yield() {
    auto ex = co_await asio::this_coro::executor;
    auto posted = asio::post(ex, asio::use_awaitable);
    co_await std::move(posted);
}

}  // namespace detail

// notify() wakes one wait(); notifications that arrive while nobody waits coalesce into one.
class async_event {
  public:
    async_event() = default;
    void notify() {
        if (!waiters_.wake_one()) {
            pending_ = true;
        }
    }
    // Forgets a pending notification.
    void reset() { pending_ = false; }
    // A pending notification is taken when the wait begins, and it completes through the
    // executor as a woken one does. Not a coroutine of its own: an idle session's work loop
    // waits here, and a frame more would stay with each.
    asio::awaitable<void> wait() { return waiters_.wait_unless(pending_, asio::use_awaitable); }
    // As wait(), but a cancelled wait completes too, without an exception: for the losing
    // side of a race (`||`), whose outcome nobody reads. (An exception a turn per race lost
    // cost a tenth of the worker's serving thread.)
    asio::awaitable<void> wait_or_cancelled() {
        co_await waiters_.wait_unless(pending_, asio::as_tuple(asio::use_awaitable));
    }

  private:
    detail::waiters waiters_;
    bool pending_ = false;
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

    async_mutex() = default;
    asio::awaitable<guard> lock() {
        if (std::exchange(locked_, true)) {
            co_await waiters_.wait(asio::use_awaitable);  // unlock() handed it over
        } else {
            co_await detail::yield();
        }
        co_return guard(this);
    }

  private:
    // Handed to the first waiter (it stays locked), or unlocked when none waits.
    void unlock() {
        if (!waiters_.wake_one()) {
            locked_ = false;
        }
    }
    detail::waiters waiters_;
    bool locked_ = false;
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
                s_->release();
            }
        }

      private:
        async_semaphore* s_;
    };

    explicit async_semaphore(std::size_t n) : free_(n) {}
    asio::awaitable<guard> acquire() {
        if (free_ > 0) {
            --free_;
            co_await detail::yield();
        } else {
            co_await waiters_.wait(asio::use_awaitable);  // release() handed its unit over
        }
        co_return guard(this);
    }

  private:
    void release() {
        if (!waiters_.wake_one()) {
            ++free_;
        }
    }
    detail::waiters waiters_;
    std::size_t free_;
};

}  // namespace wuhu::runtime
