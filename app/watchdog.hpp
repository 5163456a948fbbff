// The watchdog of stuck sessions: what the loop events say of each busy session's timing (its
// loop state and since when, when its inference began), and every second, each session that has
// just been in one loop state for longer than that state's timeout is logged once (the gauge
// counts them at each scrape: stuck(false)). Only sessions that are not idle have a record (it
// goes when the session is idle again), so a count walks the busy sessions, not every loaded
// one; the records of sessions no longer loaded, or whose loop loaded now is idle (a busy loop
// retired and reloaded within a count), go at the next count.
//
// Executor: the node's (the registry's); not thread-safe.
#pragma once

#include "runtime/work_gate.hpp"
#include "worker/registry.hpp"

#include <spdlog/logger.h>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace wuhu::app {

namespace asio = boost::asio;

class watchdog {
  public:
    // `limits`: the loop's timeouts (inference, summary, tool); `stopping`: read after each
    // wait; once true it ends.
    watchdog(const worker::session_registry& registry, const worker::loop_options& limits,
             std::shared_ptr<spdlog::logger> log, const bool& stopping)
        : registry_(registry), limits_(limits), log_(std::move(log)), stopping_(stopping) {}

    // Notes what `e` says of its session's timing; when it ends an inference, how long that
    // took (seconds).
    std::optional<double> observe(const session::session_id& sid, const worker::loop_event& e);

    // The loaded sessions past their state's timeout; with `log_new`, each one not logged yet
    // is logged.
    std::size_t stuck(bool log_new);

    // Every second until the stop (or a cancellation), holding `pass` until it returns.
    asio::awaitable<void> run(runtime::work_gate::pass pass);

  private:
    // A session's, while it is not idle.
    struct timing {
        session::session_id id;
        session::loop_state state = session::loop_state::idle;
        std::chrono::steady_clock::time_point since, inferring;
        bool stuck_logged = false;
    };

    const worker::session_registry& registry_;
    const worker::loop_options& limits_;
    std::shared_ptr<spdlog::logger> log_;
    const bool& stopping_;
    std::map<std::string, timing, std::less<>> timings_;
};

}  // namespace wuhu::app
