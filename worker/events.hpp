// What an agent loop tells its observers, and the hub that fans events out.
//
// Events are delivered synchronously on the loop's executor, in the order things happened:
// committed events advance the observer's state, stream events do not. A subscriber that calls
// agent_loop::observe() gets a snapshot and its subscription in one step, so it misses nothing.
#pragma once

#include "providers/provider.hpp"
#include "session/patch.hpp"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <variant>

namespace wuhu::worker {

// A durable change: the actions that were persisted and applied, and their patch.
struct committed_event {
    session::action_list actions;
    session::patch patch;
};
// The loop moved from one state to another; `patch` is the status-only patch that tells
// watchers (session::status_patch, stamped).
struct state_event {
    session::loop_state from;
    session::loop_state to;
    session::patch patch;
};
// An inference attempt started streaming (streamBegan).
struct stream_began_event {
    std::uint64_t step = 0;
    std::uint64_t epoch = 0;  // the owner's lease epoch (on every stream event)
};
// A streamed fragment of the message of `step`; `seq` counts its deltas from 1.
struct stream_delta_event {
    std::uint64_t step = 0;
    std::uint64_t epoch = 0;
    std::uint64_t seq = 0;
    std::string text;
    std::optional<providers::tool_call_delta> tool_call;
};
// The attempt ended (streamEnded). `committed`: its assistant entry was persisted (and its
// committed_event already delivered); false when it failed or was aborted.
struct stream_ended_event {
    std::uint64_t step = 0;
    std::uint64_t epoch = 0;
    bool committed = false;
};

// A tool call of this owner ran to its end (an output, or its timeout) in `took`, on the loop's
// clock (wuhu_tool_duration_seconds). Not for calls aborted, unknown or not run.
struct tool_ran_event {
    std::string tool;
    std::chrono::milliseconds took{0};
};

using loop_event = std::variant<committed_event, state_event, stream_began_event,
                                stream_delta_event, stream_ended_event, tool_ran_event>;
using event_sink = std::function<void(const loop_event&)>;

// Accumulated deltas of the message being streamed.
struct inflight_message {
    std::uint64_t step = 0;
    std::uint64_t epoch = 0;  // of the owner streaming it
    std::string text;
    std::vector<providers::tool_call_delta> tool_calls;
    std::uint64_t deltas = 0;
};

class event_hub {
  public:
    std::uint64_t add(event_sink s);
    void remove(std::uint64_t id);
    void emit(const loop_event& e);
    std::size_t size() const { return sinks_.size(); }

  private:
    std::map<std::uint64_t, event_sink> sinks_;
    std::uint64_t next_ = 1;
};

// Ends delivery when destroyed. Safe to outlive the loop.
class subscription {
  public:
    subscription() = default;
    subscription(std::weak_ptr<event_hub> hub, std::uint64_t id) : hub_(std::move(hub)), id_(id) {}
    subscription(subscription&& o) noexcept
        : hub_(std::move(o.hub_)), id_(std::exchange(o.id_, 0)) {}
    subscription& operator=(subscription&& o) noexcept;
    ~subscription() { reset(); }
    void reset();

  private:
    std::weak_ptr<event_hub> hub_;
    std::uint64_t id_ = 0;
};

struct observation {
    session::session_state state;
    session::loop_state loop = session::loop_state::idle;
    std::optional<inflight_message> inflight;
    subscription sub;
};

}  // namespace wuhu::worker
