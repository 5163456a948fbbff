// Approval of tool calls (issue 33, docs/protocol.md "Approvals"), as pure rules: which calls
// wait for a person, and what a decision (or a deadline's default one) records.
//
// A call that needs approval gets an approval_requested entry before anything of it runs
// (with its response, or when the loop reaches it); it then waits, while the other calls of
// the response run. A decision is one commit: approve records the decision (the loop then
// starts and runs the call, with the arguments it names); reject and respond record the
// decision and the call's result (an error the model sees, or a person's answer). Each is keyed
// by the call id: the same decision again is a duplicate, another one already_decided.
#pragma once

#include "session/action.hpp"
#include "session/state.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace wuhu::session {

// What the tools file says of a tool's calls: whether they need approval, how long one waits
// (0: no deadline) and what is decided then.
struct tool_approval {
    approval_mode mode = approval_mode::never;
    std::uint64_t deadline_ms = 0;
    decision on_deadline = decision::reject;
    bool operator==(const tool_approval&) const = default;
};

// The terms of a call of `tool`: the tools file's (`file`) with the session's rules over them
// (the tool's own name, then "*"). nullopt when its calls need no approval.
std::optional<tool_approval> approval_terms(const approval_settings& session,
                                            const std::string& tool, const tool_approval& file);

// The request of call `c` on `terms`, asked at `at`.
approval_requested request_of(const tool_call& c, const tool_approval& terms, unix_ms at);

// Whether the call waits for a decision: asked, undecided, and without a result.
bool awaits_decision(const tool_call_state& t);
// Whether the newest response's calls without a result all wait for a decision (and one does):
// the loop has nothing to run until a decision or a deadline.
bool awaiting_approval(const session_state& s);
// The waiting call whose deadline comes first, or nullptr (none has one).
const tool_call_state* next_deadline(const session_state& s);

struct decision_input {
    tool_call_id call;
    decision what = decision::approve;
    author by = unknown_author{};
    // approve: the arguments to run with instead of the model's (checked against the tool's
    // schema by the caller, which knows the tool).
    std::optional<std::string> arguments;
    // reject: what the model is told (a default when empty); respond: the call's result.
    std::string message;
};

struct decision_outcome {
    action_list actions;
    approval_decided decided;  // what was decided (now, or before for a duplicate)
    bool duplicate = false;    // the call had this decision already: nothing changed
};

// A person's decision on a waiting call of the newest response: the decision entry (and a
// reject's or respond's result), has_work set. The same decision as the one on record (for a
// call of any response) is a duplicate. Errors: unknown_tool_call (no such call in the newest
// response, and no decision on record), not_awaiting_approval (never asked, or it has a result
// without a decision: an abort), already_decided (another decision).
result<decision_outcome> plan_decide(const session_state& s, decision_input in, unix_ms at);

// The default decision of a waiting call whose deadline passed by `at` (by the system author,
// by_deadline): nothing when the call does not wait or its deadline is still ahead.
action_list plan_deadline(const session_state& s, const tool_call_id& call, unix_ms at);

// The session waits for decisions: has_work cleared (a decision or a deadline sets it again),
// so that it is passivated like an idle session. Nothing when it does not wait, or when input
// is queued (pending input always leaves has_work set: the session then stays loaded).
action_list plan_await_approval(const session_state& s);

// What a reject without a message tells the model, and what a deadline's reject does.
std::string rejected_result(std::string_view message);
std::string expired_result();

}  // namespace wuhu::session
