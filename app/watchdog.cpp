#include "app/watchdog.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace wuhu::app {

using steady = std::chrono::steady_clock;

std::optional<double> watchdog::observe(const session::session_id& sid,
                                        const worker::loop_event& e) {
    auto timed = [&]() -> timing& {
        auto it = timings_.find(sid.str());
        if (it == timings_.end()) {
            it = timings_.emplace(sid.str(), timing{}).first;
        }
        return it->second;
    };
    if (const auto* s = std::get_if<worker::state_event>(&e)) {
        auto& t = timed();
        t.state = s->to;
        t.since = steady::now();
        t.stuck_logged = false;
    } else if (std::holds_alternative<worker::stream_began_event>(e)) {
        timed().inferring = steady::now();
    } else if (std::holds_alternative<worker::stream_ended_event>(e)) {
        auto& t = timed();
        if (t.inferring != steady::time_point{}) {
            const double took = std::chrono::duration<double>(steady::now() - t.inferring).count();
            t.inferring = {};
            return took;
        }
    }
    return std::nullopt;
}

std::size_t watchdog::stuck(bool log_new) {
    const auto now = steady::now();
    const auto& o = limits_;
    const std::uint64_t round = ++round_;
    std::size_t n = 0;
    registry_.each([&](const worker::agent_loop& loop) {
        auto it = timings_.find(loop.id().str());
        if (it == timings_.end()) {
            return true;  // idle since it was loaded
        }
        auto& t = it->second;
        t.seen = round;
        const auto limit = t.state == session::loop_state::executing_tools ? o.tool_timeout
                           : t.state == session::loop_state::compacting    ? o.summary.total
                                                                           : o.inference.total;
        // Idle, or waiting for a person (as long as the call's deadline says): not stuck.
        if (t.state != session::loop_state::idle &&
            t.state != session::loop_state::awaiting_approval && limit.count() > 0 &&
            now - t.since > limit) {
            ++n;
            if (log_new && !t.stuck_logged) {
                t.stuck_logged = true;
                log_->warn(
                    "session {} has been {} for {} s, longer than its timeout ({} s): abort "
                    "frees it",
                    it->first, session::loop_state_name(t.state),
                    std::chrono::duration_cast<std::chrono::seconds>(now - t.since).count(),
                    std::chrono::duration_cast<std::chrono::seconds>(limit).count());
            }
        }
        return true;
    });
    std::erase_if(timings_, [round](const auto& kv) { return kv.second.seen != round; });
    return n;
}

asio::awaitable<void> watchdog::run([[maybe_unused]] runtime::work_gate::pass pass) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
        timer.expires_after(std::chrono::seconds(1));
        co_await timer.async_wait(asio::use_awaitable);
        if (stopping_) {
            co_return;
        }
        stuck(true);
    }
}

}  // namespace wuhu::app
