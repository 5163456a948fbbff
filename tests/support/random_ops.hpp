// Random operation sequences over a session, for property tests: the same operation can run
// through the pure rules (no store) or through a store's session_log.
#pragma once

#include "session/approval.hpp"
#include "session/rules.hpp"
#include "storage/store.hpp"

#include <random>
#include <string>

namespace wuhu::testing {

using namespace wuhu::session;

struct random_op {
    enum kind {
        enqueue_user,
        enqueue_system,
        cancel,
        drain_steer,
        drain_follow_up,
        assistant,
        tool_will,
        tool_did,
        compact,
        marker,
        configure,
        mark_idle,
        pause,
        schedule_timer,
        fire_timer,
        cancel_timer,
        // The fused operations (session/rules.hpp).
        enqueue_and_drain,
        response,
        tool_steps,
        // Approvals (session/approval.hpp), planned by the rules and committed as planned.
        decide,
        deadline,
        await_approval,
    } what = enqueue_user;
    std::string name;  // for failure messages
    enqueue_input in = enqueue_input{lane::follow_up, queue_item_id::parse("x").value(),
                                     user_input{unknown_author{}, {}}};
    lane cancel_lane = lane::steer;
    std::string id;  // item or tool call id
    assistant_message reply;
    tool_result result{tool_call_id::parse("x").value(), "", "", false};
    compaction comp;
    settings config;
    timer t{queue_item_id::parse("t").value(), unix_ms{0},
            system_source::parse("scheduledCallback").value(), "wake"};
    bool flag = false;
    std::vector<tool_call_id> starting;  // response
    std::vector<entry_body> steps;       // tool_steps
    std::vector<approval_requested> asking;  // response
    decision what_decided = decision::approve;
    unix_ms at;
};

// A random operation that is usually valid for `s` (sometimes deliberately not: duplicate
// ids, unknown ids, cancel on the system lane).
random_op next_op(std::mt19937_64& rng, const session_state& s, unix_ms at);

// Runs `op` through the pure rules; the actions it would record, or its error.
result<action_list> run_pure(const random_op& op, const session_state& s);

// Runs `op` through a store.
boost::system::result<action_list> run_store(const random_op& op, storage::session_log& log,
                                             const session_state& s);

}  // namespace wuhu::testing
