// The coroutine event, mutex and semaphore of runtime/sync.hpp: coalescing, FIFO order, a free
// one resuming through the executor, and cancellation (once, however often it is signalled).
#include "runtime/sync.hpp"

#include <gtest/gtest.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace wuhu::testing {

namespace asio = boost::asio;
using runtime::async_event;
using runtime::async_mutex;
using runtime::async_semaphore;

namespace {

// How a spawned wait ended: nullopt while it waits, else its error (none: woken).
struct ending {
    std::optional<boost::system::error_code> ec;
    void operator()(const std::exception_ptr& e) {
        ec = boost::system::error_code{};
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (const boost::system::system_error& x) {
                ec = x.code();
            }
        }
    }
};

// Runs what is ready (an io_context that ran out of work stays stopped until restarted).
void poll(asio::io_context& io) {
    io.restart();
    io.poll();
}

// The completion handler of a spawned wait that records its ending in `e`.
auto on_end(ending& e) {
    return [&e](const std::exception_ptr& x) { e(x); };
}

asio::awaitable<void> wait_on(async_event& ev) {
    co_await ev.wait();
}

asio::awaitable<void> hold(async_mutex& mu, std::vector<std::string>& order, std::string name,
                           async_event& release) {
    auto guard = co_await mu.lock();
    order.push_back(name);
    co_await release.wait();
}

asio::awaitable<void> take(async_semaphore& sem, int& holding, async_event& release) {
    auto guard = co_await sem.acquire();
    ++holding;
    co_await release.wait();
    --holding;
}

}  // namespace

TEST(AsyncEvent, NotificationsWhileNobodyWaitsCoalesceIntoOne) {
    asio::io_context io;
    async_event ev;
    ev.notify();
    ev.notify();
    ending first, second;
    asio::co_spawn(io, wait_on(ev), on_end(first));
    asio::co_spawn(io, wait_on(ev), on_end(second));
    poll(io);
    EXPECT_EQ(first.ec, boost::system::error_code{});
    EXPECT_FALSE(second.ec) << "two notifications, one wake-up";
    ev.notify();
    poll(io);
    EXPECT_EQ(second.ec, boost::system::error_code{});
}

TEST(AsyncEvent, ResetForgetsAPendingNotification) {
    asio::io_context io;
    async_event ev;
    ev.notify();
    ev.reset();
    ending w;
    asio::co_spawn(io, wait_on(ev), on_end(w));
    poll(io);
    EXPECT_FALSE(w.ec);
    ev.notify();
    poll(io);
    EXPECT_EQ(w.ec, boost::system::error_code{});
}

// A wait takes a pending notification when it begins, not when it is made: one that arrives in
// between (as in a race `a || ev.wait()`, whose waits begin after the expression is made) wakes
// it.
asio::awaitable<void> made_then_notified(async_event& ev) {
    auto waiting = ev.wait();
    ev.notify();  // nobody waits yet: pending
    co_await std::move(waiting);
}

TEST(AsyncEvent, ANotificationBetweenMakingAWaitAndBeginningItWakesIt) {
    asio::io_context io;
    async_event ev;
    ending w;
    asio::co_spawn(io, made_then_notified(ev), on_end(w));
    poll(io);
    EXPECT_EQ(w.ec, boost::system::error_code{});
    ending next;
    asio::co_spawn(io, wait_on(ev), on_end(next));
    poll(io);
    EXPECT_FALSE(next.ec) << "the notification was taken by the first wait";
}

// A waiter's cancellation handler stays in its slot until its completion runs; a second signal
// in between must not complete it (or touch the list) again.
TEST(AsyncEvent, AWaitCancelledTwiceEndsOnceAndTheEventWorksOn) {
    asio::io_context io;
    async_event ev;
    asio::cancellation_signal stop;
    ending cancelled, other;
    asio::co_spawn(io, wait_on(ev), asio::bind_cancellation_slot(stop.slot(), on_end(cancelled)));
    asio::co_spawn(io, wait_on(ev), on_end(other));
    poll(io);
    ASSERT_FALSE(cancelled.ec);
    stop.emit(asio::cancellation_type::terminal);
    stop.emit(asio::cancellation_type::terminal);  // before the first one's completion ran
    poll(io);
    EXPECT_EQ(cancelled.ec, asio::error::operation_aborted);
    EXPECT_FALSE(other.ec) << "the other waiter still waits";
    ev.notify();
    poll(io);
    EXPECT_EQ(other.ec, boost::system::error_code{});
}

// A waiter is outstanding work, as an operation on an I/O object is: run() does not return
// while a coroutine waits, and the wake-up from another thread reaches it.
TEST(AsyncEvent, AWaiterKeepsRunFromReturning) {
    asio::io_context io;
    async_event ev;
    ending w;
    asio::co_spawn(io, wait_on(ev), on_end(w));
    std::thread runner([&] { io.run(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(io.stopped()) << "run() returned while a coroutine waited";
    asio::post(io, [&] { ev.notify(); });
    runner.join();  // returns once the waiter has ended
    EXPECT_EQ(w.ec, boost::system::error_code{});
}

TEST(AsyncMutex, WaitersGetTheLockInTheOrderTheyCameAndACancelledOneNever) {
    asio::io_context io;
    async_mutex mu;
    std::vector<std::string> order;
    async_event release_a, release_b, release_c;
    asio::cancellation_signal stop_b;
    ending a, b, c;
    asio::co_spawn(io, hold(mu, order, "a", release_a), on_end(a));
    asio::co_spawn(io, hold(mu, order, "b", release_b),
                   asio::bind_cancellation_slot(stop_b.slot(), on_end(b)));
    asio::co_spawn(io, hold(mu, order, "c", release_c), on_end(c));
    poll(io);
    EXPECT_EQ(order, std::vector<std::string>{"a"});
    stop_b.emit(asio::cancellation_type::terminal);
    poll(io);
    EXPECT_EQ(b.ec, asio::error::operation_aborted) << "b left the queue";
    release_a.notify();
    poll(io);
    EXPECT_EQ(a.ec, boost::system::error_code{});
    EXPECT_EQ(order, (std::vector<std::string>{"a", "c"})) << "handed to c, not to b";
    release_c.notify();
    poll(io);
    EXPECT_EQ(c.ec, boost::system::error_code{});
    // Free again: a new holder gets it.
    ending d;
    async_event release_d;
    asio::co_spawn(io, hold(mu, order, "d", release_d), on_end(d));
    poll(io);
    EXPECT_EQ(order.back(), "d");
    release_d.notify();
    poll(io);
    EXPECT_EQ(d.ec, boost::system::error_code{});
}

TEST(AsyncSemaphore, AtMostNHoldersAtOnce) {
    asio::io_context io;
    async_semaphore sem(2);
    int holding = 0;
    async_event release;
    std::vector<ending> ends(4);
    for (auto& e : ends) {
        asio::co_spawn(io, take(sem, holding, release), on_end(e));
    }
    poll(io);
    EXPECT_EQ(holding, 2);
    for (int round = 0; round < 4; ++round) {
        release.notify();
        poll(io);
        EXPECT_LE(holding, 2);
    }
    for (const auto& e : ends) {
        EXPECT_EQ(e.ec, boost::system::error_code{});
    }
    EXPECT_EQ(holding, 0);
}

}  // namespace wuhu::testing
