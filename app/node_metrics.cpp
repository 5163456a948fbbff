// The node's metrics (app/node.hpp): what the loop events tell them, the gauges at each
// scrape, the watchdog of stuck sessions, and the answers of /metrics, /healthz and /readyz.
#include "app/node.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <future>

namespace wuhu::app {

worker::session_registry::event_forwarder node::measured(
    worker::session_registry::event_forwarder publish) {
    using steady = std::chrono::steady_clock;
    auto seconds_since = [](steady::time_point t) {
        return std::chrono::duration<double>(steady::now() - t).count();
    };
    return [this, seconds_since, publish = std::move(publish)](const session::session_id& sid,
                                                               const worker::loop_event& e) {
        auto timed = [&]() -> timing& {
            auto it = timings_.find(sid.str());
            if (it == timings_.end()) {
                it = timings_.emplace(sid.str(), timing{}).first;
            }
            return it->second;
        };
        if (const auto* s = std::get_if<worker::state_event>(&e)) {
            metrics_.transition(s->from, s->to);
            auto& t = timed();
            t.state = s->to;
            t.since = steady::now();
            t.stuck_logged = false;
        } else if (std::holds_alternative<worker::stream_began_event>(e)) {
            timed().inferring = steady::now();
        } else if (std::holds_alternative<worker::stream_ended_event>(e)) {
            auto& t = timed();
            if (t.inferring != steady::time_point{}) {
                metrics_.inference(seconds_since(t.inferring));
                t.inferring = {};
            }
        } else if (const auto* ran = std::get_if<worker::tool_ran_event>(&e)) {
            // Measured by the runner around the call itself (fused commits start every call
            // of a response at once: the commits do not tell when each ran).
            metrics_.tool(ran->tool, std::chrono::duration<double>(ran->took).count());
        } else if (const auto* c = std::get_if<worker::committed_event>(&e)) {
            for (const auto& a : c->actions) {
                const auto* appended = std::get_if<session::entry_appended>(&a);
                if (appended == nullptr) {
                    continue;
                }
                const auto& body = appended->e.body;
                if (const auto* m = std::get_if<session::assistant_message>(&body)) {
                    metrics_.tokens("input", m->usage.input);
                    metrics_.tokens("cached_input", m->usage.cached_input);
                    metrics_.tokens("cache_write", m->usage.cache_write);
                    metrics_.tokens("output", m->usage.output);
                } else if (std::holds_alternative<session::compaction>(body)) {
                    metrics_.compaction();
                }
            }
        }
        publish(sid, e);
    };
}

metrics::snapshot node::take_snapshot() {
    metrics::snapshot s;
    s.sessions_loaded = registry_->size();
    registry_->each([&](const worker::agent_loop& loop) {
        ++s.per_state[static_cast<std::size_t>(loop.current())];
        const auto& st = loop.state();
        s.lane_depth[0] += st.in(session::lane::system).pending.size();
        s.lane_depth[1] += st.in(session::lane::steer).pending.size();
        s.lane_depth[2] += st.in(session::lane::follow_up).pending.size();
        return true;
    });
    s.leases_held = keeper_.held();
    s.stuck = stuck(false);
    return s;
}

std::size_t node::stuck(bool log_new) {
    const auto now = std::chrono::steady_clock::now();
    const auto& o = options_.loop;
    const std::uint64_t round = ++watch_round_;
    std::size_t n = 0;
    registry_->each([&](const worker::agent_loop& loop) {
        auto it = timings_.find(loop.id().str());
        if (it == timings_.end()) {
            return true;  // idle since it was loaded
        }
        auto& t = it->second;
        t.seen = round;
        const auto limit = t.state == session::loop_state::executing_tools ? o.tool_timeout
                           : t.state == session::loop_state::compacting    ? o.summary.total
                                                                           : o.inference.total;
        if (t.state != session::loop_state::idle && limit.count() > 0 && now - t.since > limit) {
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

asio::awaitable<void> node::watch(node* self) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
        timer.expires_after(std::chrono::seconds(1));
        co_await timer.async_wait(asio::use_awaitable);
        if (self->stopping_) {
            co_return;
        }
        self->stuck(true);
    }
}

// On the endpoint's thread: the gauges come from the executor (at most a second old: a
// worker whose executor is stuck still answers, with the last figures).
std::string node::scrape() {
    auto taken = std::make_shared<std::promise<metrics::snapshot>>();
    auto future = taken->get_future();
    asio::post(io_, [this, taken] { taken->set_value(take_snapshot()); });
    if (future.wait_for(std::chrono::seconds(1)) == std::future_status::ready) {
        metrics_.update(future.get());
    }
    for (const auto missed = store_.index_write_failures(); index_failures_seen_ < missed;
         ++index_failures_seen_) {
        metrics_.index_write_failed();
    }
    const auto failures = server_->publish_failures();
    for (; publish_failures_seen_ < failures; ++publish_failures_seen_) {
        metrics_.publish_failed();
    }
    const auto rerouted = server_->rerouted();
    metrics_.forwards_rerouted(rerouted - std::min(rerouted, rerouted_seen_));
    rerouted_seen_ = std::max(rerouted, rerouted_seen_);
    return metrics_.text();
}

bool node::turning(std::chrono::milliseconds within) {
    auto turned = std::make_shared<std::promise<void>>();
    auto future = turned->get_future();
    asio::post(io_, [turned] { turned->set_value(); });
    return future.wait_for(within) == std::future_status::ready;
}

std::optional<std::string> node::unready() {
    if (stop_asked_) {
        return "stopping";
    }
    if (options_.nats_connected && !options_.nats_connected()) {
        return "not connected to NATS";
    }
    if (!store_.available()) {
        return "the session store does not answer";
    }
    return std::nullopt;
}

}  // namespace wuhu::app
