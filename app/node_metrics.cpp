// The node's metrics (app/node.hpp): what the loop events tell them, the gauges at each
// scrape, and the answers of /metrics, /healthz and /readyz.
#include "app/node.hpp"

#include "session/approval.hpp"

#include <boost/asio/post.hpp>

#include <future>

namespace wuhu::app {

worker::session_registry::event_forwarder node::measured(
    worker::session_registry::event_forwarder publish) {
    return [this, publish = std::move(publish)](const session::session_id& sid,
                                                const worker::loop_event& e) {
        if (const auto took = watchdog_->observe(sid, e)) {
            metrics_.inference(*took);
        }
        if (const auto* s = std::get_if<worker::state_event>(&e)) {
            metrics_.transition(s->from, s->to);
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
                    metrics_.inference_usage(m->model, m->usage, m->cost);
                } else if (const auto* k = std::get_if<session::compaction>(&body)) {
                    metrics_.compaction();
                    if (session::counts(body)) {
                        metrics_.inference_usage(k->model, k->usage, k->cost);
                    }
                } else if (const auto* d = std::get_if<session::diagnostic>(&body)) {
                    if (d->code == "budget_exhausted") {
                        metrics_.budget_exhausted();
                    } else if (session::counts(body)) {
                        metrics_.inference_usage(d->model, d->usage, d->cost);  // billed
                    }
                } else if (const auto* a = std::get_if<session::approval_decided>(&body)) {
                    metrics_.approval_decision(a->what, a->by_deadline);
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
        for (const auto& t : st.tool_calls) {
            s.approvals_pending += session::awaits_decision(t) ? 1 : 0;
        }
        return true;
    });
    s.leases_held = keeper_.held();
    s.stuck = watchdog_->stuck(false);
    return s;
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
