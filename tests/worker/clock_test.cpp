// The clocks' sleeps, and the sides of a race that lose it.
#include "runtime/clock.hpp"
#include "worker/writer.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <gtest/gtest.h>

#include <optional>
#include <variant>

namespace wuhu::testing {

namespace {

namespace asio = boost::asio;
using namespace boost::asio::experimental::awaitable_operators;
using std::chrono::milliseconds;

// Runs `f` on a fresh io_context until it completes; its exception, if any, is rethrown.
template <class F>
void run(F f) {
    asio::io_context io;
    std::exception_ptr failed;
    asio::co_spawn(io, f(io.get_executor()), [&](std::exception_ptr e) { failed = e; });
    io.run();
    if (failed) {
        std::rethrow_exception(failed);
    }
}

asio::awaitable<int> answer_now() {
    co_return 42;
}

// An answer after a real millisecond: the other sides of its race are waiting by then.
asio::awaitable<int> answer_soon() {
    asio::steady_timer t(co_await asio::this_coro::executor, milliseconds(1));
    co_await t.async_wait(asio::use_awaitable);
    co_return 42;
}

asio::awaitable<void> zero_sleep(runtime::clock* c, std::optional<bool>* out) {
    *out = co_await c->elapsed(milliseconds(0));
}

}  // namespace

TEST(Clock, ElapsedSaysWhetherTheTimePassedOrTheSleepWasCancelled) {
    run([](asio::any_io_executor) -> asio::awaitable<void> {
        runtime::manual_clock clock(session::unix_ms{1000});
        runtime::system_clock real;
        // The quick side wins: the sleeps are cancelled and say so, without an exception.
        auto r = co_await (real.elapsed(milliseconds(1)) || clock.elapsed(milliseconds(50)));
        EXPECT_EQ(r.index(), 0u);
        EXPECT_TRUE(std::get<0>(r));
        EXPECT_EQ(clock.sleepers(), 0u);  // the cancelled sleeper is gone
        auto zero = co_await clock.elapsed(milliseconds(0));
        EXPECT_TRUE(zero);
    });
}

TEST(Clock, AManualSleepEndsWhenTimeIsAdvancedPastIt) {
    asio::io_context io;
    runtime::manual_clock clock(session::unix_ms{1000});
    std::optional<bool> slept;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> { slept = co_await clock.elapsed(milliseconds(50)); },
        asio::detached);
    io.run_for(milliseconds(5));
    EXPECT_FALSE(slept.has_value());
    clock.advance(milliseconds(49));
    io.run_for(milliseconds(5));
    EXPECT_FALSE(slept.has_value());
    clock.advance(milliseconds(1));
    io.run_for(milliseconds(5));
    EXPECT_EQ(slept, std::optional<bool>(true));
}

TEST(Clock, ACancelledSleepStillThrows) {
    EXPECT_THROW(run([](asio::any_io_executor) -> asio::awaitable<void> {
                     runtime::manual_clock clock(session::unix_ms{1000});
                     // sleep() is what the callers that do not race use: cancelled, it throws
                     // (here through a race it loses, whose outcome is then the winner's).
                     auto r = co_await (answer_now() || clock.sleep(milliseconds(50)));
                     EXPECT_EQ(r.index(), 0u);
                     throw std::runtime_error("the race completed");
                 }),
                 std::runtime_error);
}

// A zero sleep yields (what was posted before it runs first) and needs no timer; cancelled,
// it says so like any sleep.
TEST(Clock, AZeroSleepYieldsToTheExecutor) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        runtime::system_clock real;
        bool ran = false;
        asio::post(ex, [&] { ran = true; });
        auto zero = co_await real.elapsed(milliseconds(0));
        EXPECT_TRUE(zero);
        EXPECT_TRUE(ran);
        // The other side of a race wins while the zero sleep waits for its turn.
        auto r = co_await (answer_now() || real.elapsed(milliseconds(0)));
        EXPECT_EQ(r.index(), 0u);
        auto negative = co_await real.elapsed(milliseconds(-5));
        EXPECT_TRUE(negative);
    });
}

// The losing side of a race whose winner ended before it ran: cancelled, it says so.
TEST(Clock, AZeroSleepCancelledBeforeItsTurnSaysSo) {
    run([](asio::any_io_executor) -> asio::awaitable<void> {
        runtime::system_clock real;
        std::optional<bool> zero;
        auto r = co_await (answer_now() || zero_sleep(&real, &zero));
        EXPECT_EQ(r.index(), 0u);
        EXPECT_EQ(zero, std::optional<bool>(false));
    });
}

// How a wait ends when cancelled: `f` is spawned, cancelled once it waits, and run to its end.
struct ending {
    bool returned = false;  // ran on past its wait
    bool threw = false;
};

template <class F>
ending cancelled(F f) {
    asio::io_context io;
    asio::cancellation_signal sig;
    ending out;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            auto task = f(io.get_executor());
            co_await std::move(task);
            out.returned = true;
        },
        asio::bind_cancellation_slot(sig.slot(),
                                     [&](std::exception_ptr e) { out.threw = e != nullptr; }));
    io.run_for(milliseconds(5));
    sig.emit(asio::cancellation_type::all);
    io.run_for(milliseconds(50));
    return out;
}

// The losing sides of a race (a timeout, an abort) end without an exception when the race is
// decided: an exception a side, a few a turn, cost a tenth of the worker's serving thread.
TEST(Clock, TheLosingSidesOfARaceEndWithoutAnException) {
    runtime::manual_clock clock(session::unix_ms{1000});
    runtime::system_clock real;
    for (runtime::clock* c :
         {static_cast<runtime::clock*>(&clock), static_cast<runtime::clock*>(&real)}) {
        auto timeout =
            cancelled([c](asio::any_io_executor) { return c->timeout(milliseconds(10'000)); });
        EXPECT_TRUE(timeout.returned);
        EXPECT_FALSE(timeout.threw);
        auto sleep =
            cancelled([c](asio::any_io_executor) { return c->sleep(milliseconds(10'000)); });
        EXPECT_FALSE(sleep.returned);
        EXPECT_TRUE(sleep.threw);
    }
    auto waited = cancelled([](asio::any_io_executor) -> asio::awaitable<void> {
        worker::abort_signal abort;
        abort.arm(session::abort_stage::inference);
        co_await abort.wait();
    });
    EXPECT_TRUE(waited.returned);
    EXPECT_FALSE(waited.threw);
}

// A fired abort still wins its race, and a race an answer wins returns the answer.
TEST(Clock, AnAbortOrAnAnswerStillWinsItsRace) {
    run([](asio::any_io_executor) -> asio::awaitable<void> {
        runtime::manual_clock clock(session::unix_ms{1000});
        worker::abort_signal abort;
        abort.arm(session::abort_stage::inference);
        auto answered =
            co_await (answer_soon() || abort.wait() || clock.timeout(milliseconds(50)));
        EXPECT_EQ(answered.index(), 0u);
        EXPECT_EQ(std::get<0>(answered), 42);
        EXPECT_EQ(clock.sleepers(), 0u);
        worker::abort_signal stop;
        stop.arm(session::abort_stage::inference);
        EXPECT_TRUE(stop.fire("stop", "") != nullptr);
        auto aborted = co_await (clock.timeout(milliseconds(50)) || stop.wait());
        EXPECT_EQ(aborted.index(), 1u);
    });
}

}  // namespace wuhu::testing
