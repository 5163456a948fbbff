// The patches a worker publishes, batched within one run of the executor.
//
// A loop commits, then usually changes its loop state at once (the assistant entry, then
// executing_tools; the tool results, then preparing; the answer, then idle). Each was a NATS
// message of its own. The batch holds a session's patch until the executor has run what was
// ready, composing what follows it (session::compose), so one message carries both. It never
// merges two loop state changes: a watcher still sees every state the loop passed through
// (DESIGN.md), and the last status it holds is the one subscribe returns.
#pragma once

#include "session/patch.hpp"
#include "session/state.hpp"

#include <functional>
#include <vector>

namespace wuhu::broker {

class patch_batch {
  public:
    using sink = std::function<void(const session::session_id&, const session::patch&)>;
    explicit patch_batch(sink out) : out_(std::move(out)) {}

    // Holds `p` (a commit's patch, or a status patch when `loop_change`: it moves the loop to
    // another state) after what the session already holds. True when the batch was empty: the
    // caller arranges a flush() once the executor has run what is ready.
    bool add(const session::session_id& sid, session::patch p, bool loop_change);
    // Publishes every held patch, sessions in the order they first joined.
    void flush();
    bool empty() const { return held_.empty(); }

  private:
    struct held {
        session::session_id sid;
        session::patch p;
        bool loop_change = false;
    };
    sink out_;
    std::vector<held> held_;  // a handful at a time: searched in order
};

}  // namespace wuhu::broker
