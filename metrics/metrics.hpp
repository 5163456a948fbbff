// A worker's Prometheus metrics (DESIGN.md "Metrics"; docs/operations.md lists them).
//
// Counters and histograms are recorded where the events already are (the node's loop-event
// forwarder, the request server's replies, the lease keeper's events); the gauges (sessions
// per loop state, lane depths, leases held, stuck sessions) are a snapshot the node takes on
// its executor when Prometheus scrapes, so they never drift and cost nothing between scrapes.
//
// Names follow Prometheus conventions: base units, `_total` counters, `_seconds` histograms
// with buckets from 100 µs to 10 min. No label takes a session id: verbs, results, states,
// lanes, kinds and tool names are bounded sets.
//
// Threads: command(), tool(), transition(), inference_usage(), inference() and published() are
// called
// on the node's executor (their series of unbounded-looking sets, verbs and tool names, are
// made there on first use, without a lock); commit(), lease_event() and refused() from any
// thread (their series are all made at construction); text() from any thread.
#pragma once

#include "session/settings.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace wuhu::metrics {

// What the node reports at each scrape.
struct snapshot {
    std::size_t sessions_loaded = 0;
    std::array<std::size_t, 6> per_state{};   // by session::loop_state
    std::size_t approvals_pending = 0;        // calls of loaded sessions waiting for a person
    std::array<std::size_t, 3> lane_depth{};  // system, steer, followUp: pending items
    std::size_t leases_held = 0;
    std::size_t stuck = 0;  // sessions in one loop state longer than its timeout
};

class worker_metrics {
  public:
    // `store_backend`: the commit histogram's label ("sqlite", "postgres", "memory").
    explicit worker_metrics(std::string_view store_backend);
    worker_metrics(const worker_metrics&) = delete;
    worker_metrics& operator=(const worker_metrics&) = delete;

    void transition(session::loop_state from, session::loop_state to);
    // A command answered: its verb (enqueue, cancel, ...), its result ("ok" or the error
    // code) and how long it took from receipt to reply.
    void command(std::string_view verb, std::string_view result, double seconds);
    void inference(double seconds);
    // What one committed inference used and cost (nano-dollars), by the model its provider
    // reported: tokens by kind (input, cached_input, cache_write, output, reasoning) and cost.
    // The first `max_models` models have series of their own; later ones count as "other"
    // (the name comes from a provider: the set of labels stays bounded).
    void inference_usage(std::string_view model, const session::token_usage& u, std::uint64_t cost);
    static constexpr std::size_t max_models = 16;
    // A session's budget was spent (its budget_exhausted diagnostic committed).
    void budget_exhausted();
    // A decision on a call that waited for approval was committed: approve, reject or respond,
    // by a person or by its deadline.
    void approval_decision(session::decision what, bool by_deadline);
    void tool(std::string_view name, double seconds);
    // The MCP servers of the tools file (their series exist from the start), and a call of one
    // of their tools ended: ok, error (the tool's isError), server_error (a JSON-RPC error),
    // failed (no answer: transport, HTTP status), cut_off (idle or deadline), cancelled (abort).
    void declare_mcp_server(const std::string& server);
    void mcp_call(std::string_view server, std::string_view result, double seconds);
    void commit(double seconds);
    // acquired, renewed, lost, released, fenced (others are not counted).
    void lease_event(std::string_view event, std::uint64_t n = 1);
    // A request refused by a bound: overloaded, lane_full, rate_limited, quota_exceeded (others
    // are not counted).
    void refused(std::string_view reason);
    void compaction();
    void recovery();
    // Sessions with work (or a timer due) and no live owner that the last sweep round found
    // and claimed: above zero round after round, sessions are not finding a home.
    void without_owner(std::size_t n);
    // An event published on NATS (patch, status, delta: others are not counted), or one that
    // could not be.
    void published(std::string_view kind);
    void publish_failed();
    void index_write_failed();
    // `n` more forwarded requests routed again because their owner did not acknowledge them
    // and its lease expired or changed hands.
    void forwards_rerouted(std::uint64_t n);

    // Makes the series of a verb (its "ok" result) and of a tool before any is recorded, so
    // that dashboards and rates see zeros rather than nothing. Before serving, on the executor.
    void declare_verb(std::string_view verb);
    void declare_tool(std::string_view name);

    void update(const snapshot& s);
    // The text exposition format (what /metrics serves).
    std::string text() const;
    prometheus::Registry& registry() { return *registry_; }

  private:
    std::shared_ptr<prometheus::Registry> registry_;
    // Series of bounded sets, made at construction: recording only finds them.
    prometheus::Gauge* sessions_loaded_;
    std::array<prometheus::Gauge*, 6> loop_sessions_{};
    std::array<std::array<prometheus::Counter*, 6>, 6> transitions_{};
    std::array<prometheus::Gauge*, 3> lane_depth_{};
    prometheus::Histogram* inference_seconds_;
    struct model_series {
        std::array<prometheus::Counter*, 5> tokens{};  // input, cached, cache_write, output,
                                                       // reasoning
        prometheus::Counter* cost = nullptr;
    };
    model_series& series_of(std::string_view model);
    prometheus::Family<prometheus::Counter>* tokens_;
    prometheus::Family<prometheus::Counter>* cost_;
    std::map<std::string, model_series, std::less<>> by_model_;
    prometheus::Histogram* commit_seconds_;
    prometheus::Gauge* leases_held_;
    std::map<std::string, prometheus::Counter*, std::less<>> lease_events_;
    std::map<std::string, prometheus::Counter*, std::less<>> refused_;
    prometheus::Counter* compactions_;
    prometheus::Counter* budget_exhausted_;
    std::array<std::array<prometheus::Counter*, 2>, 3> decisions_{};  // by decision, by_deadline
    prometheus::Gauge* approvals_pending_;
    prometheus::Counter* recoveries_;
    prometheus::Gauge* without_owner_;
    std::map<std::string, prometheus::Counter*, std::less<>> published_;
    prometheus::Counter* publish_failures_;
    prometheus::Counter* index_write_failures_;
    prometheus::Counter* forwards_rerouted_;
    prometheus::Gauge* stuck_;
    // Series made on first use, on the node's executor only (no lock: see command()).
    prometheus::Family<prometheus::Counter>* commands_;
    prometheus::Family<prometheus::Histogram>* command_seconds_;
    prometheus::Family<prometheus::Histogram>* tool_seconds_;
    std::map<std::string, std::map<std::string, prometheus::Counter*, std::less<>>, std::less<>>
        commands_by_verb_;
    std::map<std::string, prometheus::Histogram*, std::less<>> command_seconds_by_verb_;
    std::map<std::string, prometheus::Histogram*, std::less<>> tool_seconds_by_name_;
    prometheus::Family<prometheus::Counter>* mcp_calls_;
    prometheus::Family<prometheus::Histogram>* mcp_seconds_;
    struct mcp_series {
        std::map<std::string, prometheus::Counter*, std::less<>> by_result;
        prometheus::Histogram* seconds = nullptr;
    };
    std::map<std::string, mcp_series, std::less<>> mcp_;
};

}  // namespace wuhu::metrics
