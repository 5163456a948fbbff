// Running blocking store IO off a session's executor.
//
// run_on(ex, op) runs `op` on `ex` (the bounded store pool) and resumes the caller on its own
// executor with the result; without an executor it runs `op` inline. Once started, `op` is not
// cancellable: a commit that began completes, and cancellation takes effect at the caller's
// next await (Asio 1.81 also throws out of the pool's thread when a co_spawn child is cancelled
// before it starts).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <functional>
#include <optional>

namespace wuhu::runtime {

namespace detail {

// A named coroutine taking its argument by value (see the g++ 12 note in docs/decisions.md).
template <class R>
boost::asio::awaitable<R> run_here(std::function<R()> op) {
    co_return op();
}

}  // namespace detail

template <class R>
boost::asio::awaitable<R> run_on(std::optional<boost::asio::any_io_executor> ex,
                                 std::function<R()> op) {
    namespace asio = boost::asio;
    if (!ex) {
        co_return op();
    }
    auto task = detail::run_here<R>(std::move(op));
    auto token = asio::bind_cancellation_slot(asio::cancellation_slot(), asio::use_awaitable);
    R out = co_await asio::co_spawn(*ex, std::move(task), std::move(token));
    co_return out;
}

}  // namespace wuhu::runtime
