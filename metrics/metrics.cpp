#include "metrics/metrics.hpp"

#include <prometheus/text_serializer.h>

namespace wuhu::metrics {

namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

constexpr session::loop_state states[] = {
    session::loop_state::idle,       session::loop_state::preparing,
    session::loop_state::inferring,  session::loop_state::executing_tools,
    session::loop_state::compacting, session::loop_state::awaiting_approval};
constexpr const char* lanes[] = {"system", "steer", "followUp"};

// 100 µs to 10 min, about three buckets a decade.
prometheus::Histogram::BucketBoundaries seconds_buckets() {
    return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
            0.25,   0.5,     1,      2.5,   5,      10,    30,   60,    120,  300, 600};
}

std::size_t index_of(session::loop_state s) {
    return static_cast<std::size_t>(s);
}

}  // namespace

worker_metrics::worker_metrics(std::string_view store_backend)
    : registry_(std::make_shared<prometheus::Registry>()) {
    auto& r = *registry_;
    sessions_loaded_ = &BuildGauge()
                            .Name("wuhu_sessions_loaded")
                            .Help("Sessions loaded on this worker")
                            .Register(r)
                            .Add({});
    auto& per_state = BuildGauge()
                          .Name("wuhu_loop_sessions")
                          .Help("Loaded sessions per loop state")
                          .Register(r);
    auto& transitions = BuildCounter()
                            .Name("wuhu_loop_transitions_total")
                            .Help("Loop state changes")
                            .Register(r);
    for (auto from : states) {
        const std::string from_name(session::loop_state_name(from));
        loop_sessions_[index_of(from)] = &per_state.Add({{"state", from_name}});
        for (auto to : states) {
            if (from != to) {
                transitions_[index_of(from)][index_of(to)] = &transitions.Add(
                    {{"from", from_name}, {"to", std::string(session::loop_state_name(to))}});
            }
        }
    }
    auto& depth = BuildGauge()
                      .Name("wuhu_lane_depth")
                      .Help("Pending items in the input lanes of the loaded sessions")
                      .Register(r);
    for (std::size_t i = 0; i < std::size(lanes); ++i) {
        lane_depth_[i] = &depth.Add({{"lane", lanes[i]}});
    }
    commands_ = &BuildCounter()
                     .Name("wuhu_commands_total")
                     .Help("Commands answered, by verb and result")
                     .Register(r);
    command_seconds_ = &BuildHistogram()
                            .Name("wuhu_command_duration_seconds")
                            .Help("Time from a command's receipt to its reply")
                            .Register(r);
    inference_seconds_ = &BuildHistogram()
                              .Name("wuhu_inference_duration_seconds")
                              .Help("Inference attempts, from request to the end of the stream")
                              .Register(r)
                              .Add({}, seconds_buckets());
    tokens_ = &BuildCounter()
                   .Name("wuhu_inference_tokens_total")
                   .Help("Tokens of committed inferences, by kind and by the model that answered")
                   .Register(r);
    cost_ = &BuildCounter()
                 .Name("wuhu_cost_total")
                 .Help(
                     "What committed inferences cost by the providers file's prices, in US "
                     "dollars, by the model that answered")
                 .Register(r);
    budget_exhausted_ = &BuildCounter()
                             .Name("wuhu_budget_exhausted_total")
                             .Help("Sessions stopped by their budget (budget_exhausted entries)")
                             .Register(r)
                             .Add({});
    auto& decisions = BuildCounter()
                          .Name("wuhu_approval_decisions_total")
                          .Help(
                              "Decisions on tool calls that waited for approval, by decision "
                              "and by whom (person, or deadline)")
                          .Register(r);
    for (auto d :
         {session::decision::approve, session::decision::reject, session::decision::respond}) {
        for (int by = 0; by < 2; ++by) {
            decisions_[static_cast<std::size_t>(d)][static_cast<std::size_t>(by)] =
                &decisions.Add({{"decision", std::string(session::decision_name(d))},
                                {"by", by == 0 ? "person" : "deadline"}});
        }
    }
    mcp_calls_ = &BuildCounter()
                      .Name("wuhu_mcp_calls_total")
                      .Help("Calls of MCP servers' tools, by server and how they ended")
                      .Register(r);
    mcp_seconds_ = &BuildHistogram()
                        .Name("wuhu_mcp_call_duration_seconds")
                        .Help("How long calls of MCP servers' tools took, by server")
                        .Register(r);
    approvals_pending_ = &BuildGauge()
                              .Name("wuhu_approvals_pending")
                              .Help("Tool calls of the loaded sessions waiting for approval")
                              .Register(r)
                              .Add({});
    series_of("other");  // exported from the start (and the bucket past max_models)
    tool_seconds_ = &BuildHistogram()
                         .Name("wuhu_tool_duration_seconds")
                         .Help("Tool calls, by tool")
                         .Register(r);
    commit_seconds_ = &BuildHistogram()
                           .Name("wuhu_store_commit_duration_seconds")
                           .Help("Store commits, by backend")
                           .Register(r)
                           .Add({{"backend", std::string(store_backend)}}, seconds_buckets());
    leases_held_ =
        &BuildGauge().Name("wuhu_leases_held").Help("Leases this worker holds").Register(r).Add({});
    auto& lease_events = BuildCounter()
                             .Name("wuhu_lease_events_total")
                             .Help("Lease events of this worker, by event")
                             .Register(r);
    for (const char* e : {"acquired", "renewed", "lost", "released", "fenced"}) {
        lease_events_[e] = &lease_events.Add({{"event", e}});
    }
    compactions_ =
        &BuildCounter().Name("wuhu_compactions_total").Help("Compactions").Register(r).Add({});
    recoveries_ = &BuildCounter()
                       .Name("wuhu_recoveries_total")
                       .Help("Sessions recovered by the sweep")
                       .Register(r)
                       .Add({});
    without_owner_ = &BuildGauge()
                          .Name("wuhu_sessions_without_owner")
                          .Help("Sessions with work and no live owner that the last sweep claimed")
                          .Register(r)
                          .Add({});
    auto& published = BuildCounter()
                          .Name("wuhu_events_published_total")
                          .Help("Events published on NATS, by kind")
                          .Register(r);
    for (const char* kind : {"patch", "status", "delta"}) {
        published_[kind] = &published.Add({{"kind", kind}});
    }
    publish_failures_ = &BuildCounter()
                             .Name("wuhu_publish_failures_total")
                             .Help("Replies and events that could not be published")
                             .Register(r)
                             .Add({});
    index_write_failures_ =
        &BuildCounter()
             .Name("wuhu_store_index_write_failures_total")
             .Help("Writes of the store's index (the SQLite catalog) that failed and wait for the "
                   "next one")
             .Register(r)
             .Add({});
    forwards_rerouted_ =
        &BuildCounter()
             .Name("wuhu_forwards_rerouted_total")
             .Help("Requests forwarded to an owner that did not acknowledge them, routed again "
                   "once its lease expired or changed hands")
             .Register(r)
             .Add({});
    auto& refused = BuildCounter()
                        .Name("wuhu_requests_refused_total")
                        .Help("Requests refused by a bound (docs/operations.md, Limits), by reason")
                        .Register(r);
    for (const char* reason : {"overloaded", "lane_full", "rate_limited", "quota_exceeded"}) {
        refused_[reason] = &refused.Add({{"reason", reason}});
    }
    stuck_ = &BuildGauge()
                  .Name("wuhu_loop_stuck_sessions")
                  .Help("Sessions in one loop state for longer than its timeout")
                  .Register(r)
                  .Add({});
}

void worker_metrics::transition(session::loop_state from, session::loop_state to) {
    if (auto* c = transitions_[index_of(from)][index_of(to)]) {
        c->Increment();
    }
}

void worker_metrics::declare_verb(std::string_view verb) {
    command(verb, "ok", -1);
}

void worker_metrics::declare_tool(std::string_view name) {
    tool(name, -1);
}

void worker_metrics::command(std::string_view verb, std::string_view result, double seconds) {
    auto v = commands_by_verb_.find(verb);
    if (v == commands_by_verb_.end()) {
        v = commands_by_verb_.emplace(std::string(verb), decltype(v->second){}).first;
        command_seconds_by_verb_[std::string(verb)] =
            &command_seconds_->Add({{"verb", std::string(verb)}}, seconds_buckets());
    }
    auto c = v->second.find(result);
    if (c == v->second.end()) {
        c = v->second
                .emplace(std::string(result),
                         &commands_->Add({{"verb", std::string(verb)},
                                          {"result", std::string(result)}}))
                .first;
    }
    if (seconds >= 0) {  // else only declared
        c->second->Increment();
        command_seconds_by_verb_.find(verb)->second->Observe(seconds);
    }
}

void worker_metrics::inference(double seconds) {
    inference_seconds_->Observe(seconds);
}

void worker_metrics::approval_decision(session::decision what, bool by_deadline) {
    decisions_[static_cast<std::size_t>(what)][by_deadline ? 1 : 0]->Increment();
}

void worker_metrics::declare_mcp_server(const std::string& server) {
    auto& s = mcp_[server];
    if (s.seconds != nullptr) {
        return;
    }
    for (const char* result : {"ok", "error", "server_error", "failed", "cut_off", "cancelled"}) {
        s.by_result[result] = &mcp_calls_->Add({{"server", server}, {"result", result}});
    }
    s.seconds = &mcp_seconds_->Add({{"server", server}}, seconds_buckets());
}

void worker_metrics::mcp_call(std::string_view server, std::string_view result, double seconds) {
    auto s = mcp_.find(server);
    if (s == mcp_.end()) {
        return;  // only the declared servers (the set of labels stays bounded)
    }
    if (auto r = s->second.by_result.find(result); r != s->second.by_result.end()) {
        r->second->Increment();
    }
    s->second.seconds->Observe(seconds);
}

void worker_metrics::budget_exhausted() {
    budget_exhausted_->Increment();
}

worker_metrics::model_series& worker_metrics::series_of(std::string_view model) {
    // "other" is one more than the max_models models.
    if (model.empty() || model.size() > 128 ||
        (by_model_.size() > max_models && !by_model_.contains(model))) {
        model = "other";
    }
    auto it = by_model_.find(model);
    if (it == by_model_.end()) {
        const std::string m(model);
        model_series s;
        const char* kinds[] = {"input", "cached_input", "cache_write", "output", "reasoning"};
        for (std::size_t i = 0; i < s.tokens.size(); ++i) {
            s.tokens[i] = &tokens_->Add({{"kind", kinds[i]}, {"model", m}});
        }
        s.cost = &cost_->Add({{"model", m}});
        it = by_model_.emplace(m, s).first;
    }
    return it->second;
}

void worker_metrics::inference_usage(std::string_view model, const session::token_usage& u,
                                     std::uint64_t cost) {
    auto& s = series_of(model);
    const std::uint64_t n[] = {u.input, u.cached_input, u.cache_write, u.output, u.reasoning};
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
        s.tokens[i]->Increment(static_cast<double>(n[i]));
    }
    s.cost->Increment(static_cast<double>(cost) / 1e9);
}

void worker_metrics::tool(std::string_view name, double seconds) {
    auto it = tool_seconds_by_name_.find(name);
    if (it == tool_seconds_by_name_.end()) {
        it = tool_seconds_by_name_
                 .emplace(std::string(name),
                          &tool_seconds_->Add({{"tool", std::string(name)}}, seconds_buckets()))
                 .first;
    }
    if (seconds >= 0) {  // else only declared
        it->second->Observe(seconds);
    }
}

void worker_metrics::commit(double seconds) {
    commit_seconds_->Observe(seconds);
}

void worker_metrics::lease_event(std::string_view event, std::uint64_t n) {
    if (auto it = lease_events_.find(event); it != lease_events_.end() && n > 0) {
        it->second->Increment(static_cast<double>(n));
    }
}

void worker_metrics::refused(std::string_view reason) {
    if (auto it = refused_.find(reason); it != refused_.end()) {
        it->second->Increment();
    }
}

void worker_metrics::compaction() {
    compactions_->Increment();
}

void worker_metrics::recovery() {
    recoveries_->Increment();
}

void worker_metrics::without_owner(std::size_t n) {
    without_owner_->Set(static_cast<double>(n));
}

void worker_metrics::published(std::string_view kind) {
    if (auto it = published_.find(kind); it != published_.end()) {
        it->second->Increment();
    }
}

void worker_metrics::index_write_failed() {
    index_write_failures_->Increment();
}

void worker_metrics::forwards_rerouted(std::uint64_t n) {
    forwards_rerouted_->Increment(static_cast<double>(n));
}

void worker_metrics::publish_failed() {
    publish_failures_->Increment();
}

void worker_metrics::update(const snapshot& s) {
    sessions_loaded_->Set(static_cast<double>(s.sessions_loaded));
    for (std::size_t i = 0; i < loop_sessions_.size(); ++i) {
        loop_sessions_[i]->Set(static_cast<double>(s.per_state[i]));
    }
    approvals_pending_->Set(static_cast<double>(s.approvals_pending));
    for (std::size_t i = 0; i < lane_depth_.size(); ++i) {
        lane_depth_[i]->Set(static_cast<double>(s.lane_depth[i]));
    }
    leases_held_->Set(static_cast<double>(s.leases_held));
    stuck_->Set(static_cast<double>(s.stuck));
}

std::string worker_metrics::text() const {
    return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace wuhu::metrics
