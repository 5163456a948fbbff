#include "runtime/clock.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>

namespace wuhu::runtime {

asio::awaitable<void> clock::sleep_until(session::unix_ms t) {
    auto d = t.value - now().value;
    co_await sleep(milliseconds(d > 0 ? d : 0));
}

session::unix_ms system_clock::now() {
    auto since = std::chrono::system_clock::now().time_since_epoch();
    return {std::chrono::duration_cast<milliseconds>(since).count()};
}

asio::awaitable<void> clock::sleep(milliseconds d) {
    auto waiting = elapsed(d);
    const bool done = co_await std::move(waiting);
    if (!done) {
        throw boost::system::system_error(asio::error::operation_aborted);
    }
}

asio::awaitable<void> clock::timeout(milliseconds d) {
    auto waiting = elapsed(d);
    co_await std::move(waiting);
}

asio::awaitable<bool> system_clock::elapsed(milliseconds d) {
    if (d.count() <= 0) {
        // A yield to the executor, without a timer: a timer that becomes the earliest
        // reprograms the reactor's timerfd, twice (set, then reset once it fired), and that
        // syscall was a fifteenth of the worker's CPU with the scripted model's zero delays.
        // It ends after what is already posted, and before IO and timers that complete later.
        auto ex = co_await asio::this_coro::executor;
        co_await asio::post(ex, asio::use_awaitable);
        auto cs = co_await asio::this_coro::cancellation_state;
        co_return cs.cancelled() == asio::cancellation_type::none;
    }
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    co_return !ec;
}

asio::awaitable<bool> manual_clock::elapsed(milliseconds d) {
    if (d.count() <= 0) {
        co_return true;
    }
    auto s = std::make_shared<sleeper>();
    s->due = {now_.value + d.count()};
    s->timer = std::make_unique<asio::steady_timer>(co_await asio::this_coro::executor,
                                                    asio::steady_timer::time_point::max());
    sleepers_.push_back(s);
    boost::system::error_code ec;
    co_await s->timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    std::erase(sleepers_, s);
    // Not fired: cancelled by the caller (a race lost, an abort, a shutdown), not woken by
    // advance().
    co_return s->fired;
}

void manual_clock::wake_due() {
    for (auto& s : sleepers_) {
        if (!s->fired && s->due <= now_) {
            s->fired = true;
            s->timer->cancel();
        }
    }
}

void manual_clock::advance(milliseconds d) {
    now_.value += d.count();
    wake_due();
}

bool manual_clock::advance_to_next() {
    auto next = next_deadline();
    if (!next) {
        return false;
    }
    if (*next > now_) {
        now_ = *next;
    }
    wake_due();
    return true;
}

std::optional<session::unix_ms> manual_clock::next_deadline() const {
    std::optional<session::unix_ms> best;
    for (const auto& s : sleepers_) {
        if (!s->fired && (!best || s->due < *best)) {
            best = s->due;
        }
    }
    return best;
}

}  // namespace wuhu::runtime
