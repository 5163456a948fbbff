// The commands a session's owner takes (agent_loop::send), and what each one returns. The
// NATS contract's requests become these in broker/ (protocol::request_body -> command).
#pragma once

#include "session/approval.hpp"
#include "session/rules.hpp"
#include "session/settings.hpp"

#include <optional>
#include <string>
#include <variant>

namespace wuhu::worker {

struct enqueue_command {
    session::enqueue_input in;  // the id is chosen by the caller (client key or UUIDv7)
};
struct cancel_command {
    session::lane in = session::lane::steer;
    session::queue_item_id id;
};
struct configure_command {
    session::settings_update update;
};
struct abort_command {
    std::string reason = "aborted";
    std::string id = {};  // the request's idempotency key (empty: none)
};
struct pause_command {};
struct resume_command {};
// approve, reject or respond (session/approval.hpp): a decision on a call that waits for one.
struct decide_command {
    session::decision_input in;
};

using command = std::variant<enqueue_command, cancel_command, configure_command, abort_command,
                             pause_command, resume_command, decide_command>;

// What one abort request got: what it stopped (abort_stage::none: no turn was in progress)
// and the interruption entry that records it; `duplicate` when a request with its id had
// been answered before (this is that request's outcome).
struct abort_outcome {
    session::abort_stage stopped = session::abort_stage::none;
    session::entry_seq entry;
    bool duplicate = false;
};

struct command_reply {
    std::optional<session::queue_item_id> id;  // enqueue
    bool duplicate = false;                    // enqueue of an existing id
    std::optional<bool> canceled;              // cancel
    std::optional<session::settings> config;   // configure
    abort_outcome aborted;                     // abort
    std::optional<session::approval_decided> decided;  // approve, reject, respond (with duplicate)
};

}  // namespace wuhu::worker
