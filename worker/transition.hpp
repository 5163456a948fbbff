// The loop's own durable transitions: each one store operation of the session's log
// (storage::session_log), which agent_loop::record() commits in its serialized section.
#pragma once

#include "session/entry.hpp"
#include "storage/store.hpp"

#include <variant>

namespace wuhu::worker {

// Drain what the checkpoint that applies now allows (session::current_checkpoint).
struct take_checkpoint {};
// Clear has_work if the lanes are empty.
struct mark_idle {};
// The call is about to run (toolWillExecute).
struct tool_started {
    session::tool_call_id id;
};
// A due timer's content enters the system lane.
struct fire_timer {
    session::queue_item_id id;
};

using transition =
    std::variant<take_checkpoint, mark_idle, session::interruption, session::diagnostic,
                 session::assistant_message, tool_started, session::tool_result,
                 session::compaction, session::timer, fire_timer>;

// Commits `t` to `log` (one transaction, epoch-checked) and returns what it changed.
storage::result<session::action_list> write(storage::session_log& log,
                                            const session::session_state& before, transition t,
                                            session::unix_ms now);

}  // namespace wuhu::worker
