// The pure rules of a session: given the state before and an input, which actions one durable
// operation records. Stores call these inside their transaction and persist the result, so the
// rules are written once for every backend.
//
// Every function is pure: timestamps and generated ids are inputs.
#pragma once

#include "session/action.hpp"
#include "session/state.hpp"

#include <variant>
#include <vector>

namespace wuhu::session {

struct enqueue_input {
    lane in = lane::follow_up;
    queue_item_id id;
    std::variant<user_input, system_input> payload;
};

struct enqueue_outcome {
    action_list actions;
    queue_item_id id;
    bool duplicate = false;  // the id existed: nothing changed, same reply
};

// Enqueue into a lane. The system lane takes a system_input, steer and followUp a user_input
// whose author is not system_author (invalid_lane / invalid_author otherwise). Sets has_work in
// the same operation when it was false. An id that exists already changes nothing.
result<enqueue_outcome> plan_enqueue(const session_state& s, enqueue_input in, unix_ms at);

// How much one lane may hold pending (DESIGN.md "Bounds"): items, and the bytes of their
// content. 0: no limit.
struct lane_limits {
    std::size_t max_items = 100;
    std::size_t max_bytes = 4 * 1024 * 1024;
};

// Whether a command may enqueue `in` (checked before plan_enqueue, for what clients send; the
// loop's own timers are never refused): lane_full when the lane would hold more than `limits`
// allow. An item whose id exists already is no new item (its duplicate reply is not refused).
errc lane_room(const session_state& s, const enqueue_input& in, const lane_limits& limits);
// The bytes a queued payload's content holds.
std::size_t content_bytes(const std::variant<user_input, system_input>& payload);

struct cancel_outcome {
    action_list actions;
    bool canceled = false;  // false when the item was materialized first
};

// Cancel a pending item. In the system lane, only a scheduled callback (a timer) can be
// canceled, before it fires (plan_cancel_timer); its items are not cancelable (not_cancelable).
// An id that is not in that lane is item_not_found; a canceled item reports canceled again and
// changes nothing; a materialized item reports canceled = false and changes nothing.
result<cancel_outcome> plan_cancel(const session_state& s, lane l, const queue_item_id& id,
                                   unix_ms at);

enum class checkpoint {
    steer,      // after all tool results: drains system + steer
    follow_up,  // at turn end: drains system + steer, and followUp only if both are empty
};

// The items a checkpoint materializes, ordered across lanes by enqueue timestamp (ties: system,
// steer, followUp) and FIFO within a lane.
std::vector<queue_item> select_checkpoint(const session_state& s, checkpoint c);

// Materializes the selected items: for each, a transcript entry and a `materialized` journal
// fact linking the item to that entry. Empty when there is nothing to drain.
action_list plan_drain(const session_state& s, checkpoint c, unix_ms at);

// The transcript entry a queue item becomes.
entry_body materialize(const queue_item& q);

// Appends the assistant response (tool call ids must be unique within it). Text, tool names and
// arguments are sanitized (NUL and invalid UTF-8 become U+FFFD), as are tool outputs below.
result<action_list> plan_append_assistant(const session_state& s, assistant_message m, unix_ms at);

// toolWillExecute: records that a call of the latest assistant message starts. A call already
// started (an idempotent tool re-run after a crash) records nothing.
result<action_list> plan_tool_will_execute(const session_state& s, const tool_call_id& id,
                                           unix_ms at);

// toolDidExecute: records the result of a call. A successful result needs a started call
// (tool_call_not_started otherwise); an error result may close a call that never started
// (aborted, or recovered after a crash).
result<action_list> plan_tool_did_execute(const session_state& s, tool_result r, unix_ms at);

// Appends a compaction entry; first_kept must be after the previous compaction's first_kept
// and no later than the next entry id.
result<action_list> plan_append_compaction(const session_state& s, compaction c, unix_ms at);

// Appends an interruption or diagnostic marker.
action_list plan_append_marker(const session_state& s, std::variant<interruption, diagnostic> m,
                               unix_ms at);

// A configure. One that changes the budget of a session its budget paused (its newest entry is
// the budget_exhausted diagnostic) also resumes it: the loop checks the new budget at once.
result<action_list> plan_set_settings(const session_state& s, settings next);
// The budget `limits` is spent: the budget_exhausted diagnostic naming the limit, and the
// session paused. Nothing when no limit is reached.
action_list plan_budget_spent(const session_state& s, const budget& limits, unix_ms at);
// The notice of the limit past its soft percent, into the system lane (source budgetNotice, an
// id that names the limit and its value: once per limit set). Nothing when none is.
result<action_list> plan_budget_notice(const session_state& s, const budget& limits, unix_ms at);
// The first limit past its soft percent whose notice the session has not had (by its item id).
std::optional<budget_limit> unnoticed_limit(const session_state& s, const budget& limits);
// Whether the budget paused the session: its newest entry is the budget_exhausted diagnostic.
bool paused_by_budget(const session_state& s);

// Clears has_work, but only when no lane has pending items (checked in the same operation, so
// an enqueue that raced the loop's last drain keeps the session running).
action_list plan_mark_idle(const session_state& s);

action_list plan_set_paused(const session_state& s, bool paused);

// Schedules a durable timer, recorded in the system lane's journal too (a scheduled fact, at
// `at`): it advances the version, and subscribers see it. An id that is already a timer or a
// queue item records nothing (so a re-run of the scheduling tool after a crash does not
// schedule twice).
action_list plan_schedule_timer(const session_state& s, timer t, unix_ms at);

// Cancels a pending timer (an unscheduled fact in the system lane): it never fires, and its id
// is spent. One that fired already reports canceled false, one canceled before true, and both
// change nothing; a system item that no timer enqueued is not_cancelable; an unknown id is
// item_not_found.
result<cancel_outcome> plan_cancel_timer(const session_state& s, const queue_item_id& id,
                                         unix_ms at);

// Fires a pending timer: its item enters the system lane (enqueued at `at`), then a fired
// fact ends the timer, and the timer is cleared, in one operation. A timer that is not pending
// records nothing.
action_list plan_fire_timer(const session_state& s, const queue_item_id& id, unix_ms at);

// The earliest pending timer, or nullptr.
const timer* next_timer(const session_state& s);

// ---- fused operations
//
// Adjacent durable steps of a turn in one operation (one transaction, one fsync), each step
// planned exactly as it would be on the state the steps before it leave: applying the fused
// actions equals applying the steps' actions one after the other. The loop fuses only steps
// that follow each other anyway (docs/agent-loop.md, "Fused commits"); a crash can then fall
// before the fused operation or after it, never between its steps.

// An enqueue whose checkpoint is the loop's next step (the session is idle: the loop is
// waiting, and nothing is pending): the item is materialized in the same operation when the
// checkpoint that applies now (current_checkpoint) drains its lane. Otherwise, for a duplicate,
// or in a paused session, what plan_enqueue plans.
result<enqueue_outcome> plan_enqueue_and_drain(const session_state& s, enqueue_input in,
                                               unix_ms at);

// A response and the tool_started markers of `starting` (ids of its calls, each once, in the
// order given): toolWillExecute for the calls before the first of them runs; none when the
// session is paused or the response calls for a compaction (the loop's next step is not to run
// them, and they are started one by one when it is). With `settle`, a
// response without tool calls also clears has_work when nothing is pending, the session is not
// paused and the response does not call for a compaction (the mark_idle that would follow).
// `asking`: approval requests of other calls of it (session/approval.hpp), recorded after the
// markers under the same condition (each call once, its tool and arguments the response's).
result<action_list> plan_response(const session_state& s, assistant_message m,
                                  const std::vector<tool_call_id>& starting, bool settle,
                                  unix_ms at, std::vector<approval_requested> asking = {});

// Entries of a response's tool calls in order: tool_started (checked as
// plan_tool_will_execute; refused for a call that waits for a decision), tool_result (as
// plan_tool_did_execute), approval_requested (of a call not started; nothing for one asked
// before), interruption and diagnostic markers, each on the state the ones before it leave; other
// entries are invalid_entry. Then, with `drain` and the session not paused, the drain of the
// checkpoint that applies after them (the steer checkpoint after a response's last result).
result<action_list> plan_tool_steps(const session_state& s, std::vector<entry_body> steps,
                                    bool drain, unix_ms at);

// ---- where the loop stands (pure reads of the transcript)

// True when the newest input has no response yet: walking back over tool_started, compaction
// and owner_lost interruption markers, the first entry is a party message, a system message or
// a tool result. An assistant message, an aborted interruption or a diagnostic means the model
// has nothing to answer (an abort is not re-done; a lost owner's turn is).
bool needs_inference(const session_state& s);

// True when a tool call of the latest assistant message has no result yet.
bool has_unfinished_tool_calls(const session_state& s);

// The checkpoint that applies now. Steer while input awaits a response (tool results, or
// input drained before a crash): only system + steer may join it. Follow-up when the turn is
// over (or nothing happened yet). So a restarted owner never pulls follow-ups into a turn that
// a crash interrupted between drain and inference.
checkpoint current_checkpoint(const session_state& s);

// The newest assistant message's usage triggers compaction (should_compact) and no compaction
// entry follows it: the id of that message, or 0. A state-driven check, so an owner that died
// between the response and its compaction compacts after the restart.
entry_seq compaction_due(const session_state& s);

// Number of assistant messages in the transcript.
std::uint64_t assistant_count(const session_state& s);

}  // namespace wuhu::session
