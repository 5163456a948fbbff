// The loop's own durable transitions, as pure data, and the one rule that plans each:
// plan(before, transition, at) is the actions that apply it to `before` (session/rules.hpp), or
// the rule's refusal. The loop plans on its own executor and gives the store the actions to
// commit (storage::session_log::commit), so a transition that changes nothing never reaches the
// store. Adding one: a struct here, its line in plan(), and its rule in rules.hpp.
#pragma once

#include "session/action.hpp"
#include "session/entry.hpp"
#include "session/errc.hpp"
#include "session/state.hpp"

#include <variant>
#include <vector>

namespace wuhu::session {

// Drain what the checkpoint that applies now allows (current_checkpoint).
struct take_checkpoint {};
// Clear has_work if the lanes are empty.
struct mark_idle {};
// A response, with the tool_started markers of the calls about to run (toolWillExecute for
// each, before the first runs) and, with `settle`, the mark_idle that follows a final answer:
// one operation (plan_response).
// `asking`: the approval requests of the calls that wait for a person (after the markers).
struct response {
    assistant_message message;
    std::vector<tool_call_id> starting = {};
    bool settle = false;
    std::vector<approval_requested> asking = {};
};
// Entries of the tool calls in order (tool_started, tool_result, approval_requested,
// interruption, diagnostic)
// and, with `drain`, the checkpoint after them: one operation (plan_tool_steps).
struct tool_steps {
    std::vector<entry_body> steps;
    bool drain = false;
};
// A due timer's content enters the system lane.
struct fire_timer {
    queue_item_id id;
};

// The budget (`limits`, with the fleet's defaults) is spent: its budget_exhausted diagnostic,
// and the session paused (plan_budget_spent).
struct budget_spent {
    budget limits;
};
// A limit is past its soft percent: the model's one notice enters the system lane
// (plan_budget_notice).
struct budget_notice {
    budget limits;
};

// Every call without a result waits for a person: has_work cleared (plan_await_approval).
struct await_approval {};
// A waiting call's deadline passed: its default decision (plan_deadline).
struct approval_deadline {
    tool_call_id call;
};

using transition = std::variant<take_checkpoint, mark_idle, interruption, diagnostic, response,
                                tool_steps, compaction, timer, fire_timer, budget_spent,
                                budget_notice, await_approval, approval_deadline>;

// The actions of `t` on `before` at `at` (empty: it changes nothing), or the rule's refusal.
result<action_list> plan(const session_state& before, transition t, unix_ms at);

}  // namespace wuhu::session
