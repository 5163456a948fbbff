#include "app/watchdog.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace wuhu::app {

using steady = std::chrono::steady_clock;

std::optional<double> watchdog::observe(const session::session_id& sid,
                                        const worker::loop_event& e) {
    if (const auto* s = std::get_if<worker::state_event>(&e)) {
        if (s->to == session::loop_state::idle) {
            // Nothing of an idle session is kept: the count walks the busy ones only.
            if (auto it = timings_.find(sid.str()); it != timings_.end()) {
                timings_.erase(it);
            }
            return std::nullopt;
        }
        auto& t = timings_.try_emplace(sid.str(), timing{.id = sid, .since = {}, .inferring = {}})
                      .first->second;
        t.state = s->to;
        t.since = steady::now();
        t.stuck_logged = false;
        return std::nullopt;
    }
    auto it = timings_.find(sid.str());
    if (it == timings_.end()) {
        return std::nullopt;  // idle: a stream begins and ends in a busy state
    }
    auto& t = it->second;
    if (std::holds_alternative<worker::stream_began_event>(e)) {
        t.inferring = steady::now();
    } else if (std::holds_alternative<worker::stream_ended_event>(e) &&
               t.inferring != steady::time_point{}) {
        const double took = std::chrono::duration<double>(steady::now() - t.inferring).count();
        t.inferring = {};
        return took;
    }
    return std::nullopt;
}

std::size_t watchdog::stuck(bool log_new) {
    const auto now = steady::now();
    const auto& o = limits_;
    std::size_t n = 0;
    for (auto it = timings_.begin(); it != timings_.end();) {
        // No longer loaded, or the loop loaded now is idle: the record is a loop's that was
        // retired while busy (its idle event never came), reloaded within a count.
        if (const auto* loop = registry_.find_running(it->second.id);
            loop == nullptr || loop->current() == session::loop_state::idle) {
            it = timings_.erase(it);
            continue;
        }
        auto& t = it->second;
        const auto limit = t.state == session::loop_state::executing_tools ? o.tool_timeout
                           : t.state == session::loop_state::compacting    ? o.summary.total
                                                                           : o.inference.total;
        // Waiting for a person (as long as the call's deadline says): not stuck.
        if (t.state != session::loop_state::awaiting_approval && limit.count() > 0 &&
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
        ++it;
    }
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
