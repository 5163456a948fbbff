// Lease renewal: renews a worker's leases every renew interval (through the lease desk, ahead of
// what waits on its strand), and gives up those past their deadline (a renewal failed, or the
// worker was frozen) at that deadline, not at the next renewal: the keeper's listener unloads
// each lost session at once. A failing renewal is logged once, and once again when it works.
//
// Executor: one (the serving executor, the lease desk's caller); not thread-safe.
#pragma once

#include "ownership/lease_desk.hpp"
#include "runtime/work_gate.hpp"

#include <spdlog/logger.h>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <memory>

namespace wuhu::ownership {

namespace asio = boost::asio;

class renewal {
  public:
    // `renewed(held)`: after each renewal that worked, with the number of leases held.
    renewal(asio::any_io_executor ex, keeper& k, lease_desk& desk,
            std::shared_ptr<spdlog::logger> log, std::function<void(std::size_t)> renewed)
        : keeper_(k), desk_(desk), log_(std::move(log)), renewed_(std::move(renewed)),
          timer_(std::move(ex)) {}

    // Renews until cancelled (a terminal cancellation of the awaiting coroutine), holding
    // `pass` until it returns (the stop awaits its gate). Call once.
    asio::awaitable<void> run(runtime::work_gate::pass pass);

    // Its turn now: the deadlines are checked at once (an event met an overdue lease).
    void hasten() { timer_.cancel(); }

  private:
    keeper& keeper_;
    lease_desk& desk_;
    std::shared_ptr<spdlog::logger> log_;
    std::function<void(std::size_t)> renewed_;
    asio::steady_timer timer_;
};

}  // namespace wuhu::ownership
