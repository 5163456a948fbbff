// Passivation: idle sessions unused for `after` are unloaded and their leases released, and the
// least recently used idle ones while more than `max_loaded` are loaded; the next request (or
// the sweep, once they have work or a timer coming due) loads them again, here or elsewhere. A
// session whose timer is due within two sweep rounds stays. Checked every quarter of `after`
// (at most every second); at most `batch` sessions a round; one log line per round.
//
// Executor: the node's (the registry's).
#pragma once

#include "ownership/lease_desk.hpp"
#include "runtime/clock.hpp"
#include "runtime/work_gate.hpp"
#include "worker/registry.hpp"

#include <spdlog/logger.h>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <memory>

namespace wuhu::app {

namespace asio = boost::asio;

class passivation {
  public:
    struct settings {
        std::chrono::milliseconds after{600000};  // 0: never for being unused
        std::size_t max_loaded = 10000;           // 0: no limit
        std::size_t batch = 1000;
        std::chrono::milliseconds sweep_interval;  // the horizon of timers kept loaded
    };

    // Whether it has anything to do (a limit of either kind).
    static bool wanted(const settings& s) { return s.after.count() > 0 || s.max_loaded > 0; }

    // `stopping`: read after each wait; once true it ends.
    passivation(settings s, worker::session_registry& registry, ownership::lease_desk& leases,
                runtime::clock& clock, std::shared_ptr<spdlog::logger> log, const bool& stopping)
        : settings_(s),
          registry_(registry),
          leases_(leases),
          clock_(clock),
          log_(std::move(log)),
          stopping_(stopping) {}

    // Passivates until the stop (or a cancellation), holding `pass` until it returns. Call once.
    asio::awaitable<void> run(runtime::work_gate::pass pass);

    // True while a round releases leases (each is a passivation: logged in the round's line).
    bool releasing() const { return releasing_; }

  private:
    void round();

    settings settings_;
    worker::session_registry& registry_;
    ownership::lease_desk& leases_;
    runtime::clock& clock_;
    std::shared_ptr<spdlog::logger> log_;
    const bool& stopping_;
    bool releasing_ = false;
    std::size_t trimmed_at_ = 0;  // registry_.freed() at the last trim
};

}  // namespace wuhu::app
