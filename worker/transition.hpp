// The loop's own durable transitions: each one store operation of the session's log
// (storage::session_log), which agent_loop::record() commits in its serialized section.
#pragma once

#include "session/entry.hpp"
#include "storage/store.hpp"

#include <variant>
#include <vector>

namespace wuhu::worker {

// Drain what the checkpoint that applies now allows (session::current_checkpoint).
struct take_checkpoint {};
// Clear has_work if the lanes are empty.
struct mark_idle {};
// A response, with the tool_started markers of the calls about to run (toolWillExecute for
// each, before the first runs) and, with `settle`, the mark_idle that follows a final answer:
// one operation (session::plan_response).
struct response {
    session::assistant_message message;
    std::vector<session::tool_call_id> starting = {};
    bool settle = false;
};
// Entries of the tool calls in order (tool_started, tool_result, interruption, diagnostic)
// and, with `drain`, the checkpoint after them: one operation (session::plan_tool_steps).
struct tool_steps {
    std::vector<session::entry_body> steps;
    bool drain = false;
};
// A due timer's content enters the system lane.
struct fire_timer {
    session::queue_item_id id;
};

using transition =
    std::variant<take_checkpoint, mark_idle, session::interruption, session::diagnostic, response,
                 tool_steps, session::compaction, session::timer, fire_timer>;

// Commits `t` to `log` (one transaction, epoch-checked) and returns what it changed.
storage::result<session::action_list> write(storage::session_log& log,
                                            const session::session_state& before, transition t,
                                            session::unix_ms now);

}  // namespace wuhu::worker
