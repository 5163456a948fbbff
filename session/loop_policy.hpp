// The agent loop's policy (docs/agent-loop.md), as pure functions: what the owner of a session
// does next, what it does about a failed inference, and what it does with each tool call of a
// response. worker/agent_loop.cpp drives them; it decides nothing of its own.
//
// The table of run-until-idle, first match wins:
//
//   pause       the session is paused                      stop (idle); commands still persist
//   compact     the newest response crossed the threshold  summarize, append the compaction
//               and has not been tried
//   await       every call of the newest response without  clear has_work, stop (waiting
//   approval    a result waits for a person's decision     for a decision or a deadline)
//   budget      ... a call has not started, none started   record budget_exhausted, pause
//               runs, and the budget is spent
//   run_tools   a call of the newest response has no       run the calls in order (asking
//               result                                     approval of those that need it)
//   checkpoint  no checkpoint since the last step          drain what the checkpoint allows
//   budget      input awaits a response, and the budget    record budget_exhausted, pause
//               (with the fleet's defaults) is spent
//   notice      ... and a limit is past its soft percent    enqueue the model's one notice
//               without its notice                          (then the checkpoint drains it)
//   infer       input awaits a response                    stream a response
//   idle        has_work is clear                          stop (idle)
//   mark_idle   not marked since the checkpoint            clear has_work if the lanes are empty
//   checkpoint  otherwise (input came after the checkpoint) drain again
#pragma once

#include "session/entry.hpp"
#include "session/state.hpp"

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace wuhu::session {

// ---- run until idle

// What the state does not say about where the loop is: the response whose compaction it last
// tried (tried once per response), whether it took the checkpoint since its last step, and
// whether it marked the session idle since that checkpoint.
struct loop_position {
    entry_seq compaction_tried;
    bool checkpoint_taken = false;
    bool idle_marked = false;
    bool operator==(const loop_position&) const = default;
};

enum class step_kind {
    pause,
    compact,
    run_tools,
    checkpoint,
    budget_spent,
    budget_notice,
    await_approval,
    infer,
    idle,
    mark_idle
};
std::string_view step_name(step_kind k);

struct loop_step {
    step_kind kind = step_kind::idle;
    entry_seq upto;  // compact: plan over the entries up to this response
    bool operator==(const loop_step&) const = default;
};

// How many of `wanted` more calls may start within the budget `limits` (with the defaults):
// none once it is spent, else up to its tool_calls limit.
std::size_t calls_within(const session_state& s, const budget& limits, std::size_t wanted);

// `fleet`: the worker's default budget (settings.hpp, `budget`).
loop_step next_step(const session_state& s, const loop_position& at, const budget& fleet = {});
// Where the loop is once it has carried out `done` (a pause or idle step ends the run).
loop_position after(const loop_step& done, const loop_position& at);

// ---- a failed inference

enum class inference_error_kind { transient, context_overflow, fatal };
std::string_view kind_name(inference_error_kind k);

struct inference_error {
    inference_error_kind kind = inference_error_kind::fatal;
    std::string message;
    // A transient error's wait the server asked for (HTTP Retry-After), if it did.
    std::optional<std::chrono::milliseconds> retry_after = std::nullopt;
};

// Capped exponential backoff with jitter for transient errors.
struct retry_policy {
    std::chrono::milliseconds base{500};
    std::chrono::milliseconds cap{30'000};
    int max_attempts = 6;  // attempts in all, the first included
    // A server's Retry-After is honoured (the wait is at least that long) up to this.
    std::chrono::milliseconds max_server_wait{300'000};
};

// The wait before retry number `retry` (1 for the first retry): d = min(cap, base * 2^(retry-1)),
// then "equal jitter": d/2 + unit * d/2, where unit in [0, 1) comes from the caller.
std::chrono::milliseconds backoff(const retry_policy& p, int retry, double unit);

// The failures of one turn's inference so far.
struct inference_attempts {
    int transient_failures = 0;
    bool overflow_retried = false;
    bool operator==(const inference_attempts&) const = default;
};

// Wait, then infer again.
struct retry_after {
    std::chrono::milliseconds wait;
    bool operator==(const retry_after&) const = default;
};
// Compact the whole context, then infer again (once per turn). If the compaction fails, ask
// again with `overflow_retried` set: the answer is then to give up.
struct compact_then_retry {
    bool operator==(const compact_then_retry&) const = default;
};
// Record this diagnostic and end the turn.
struct give_up {
    diagnostic report;
    bool operator==(const give_up&) const = default;
};
using inference_decision = std::variant<retry_after, compact_then_retry, give_up>;

// What to do about `e`, given the failures before it; `attempts` is updated to count it.
// `jitter` draws a unit in [0, 1) that spreads a backoff; it is called only for a retry (so a
// seeded caller's waits do not depend on the errors that were not retried).
inference_decision on_inference_error(const inference_error& e, inference_attempts& attempts,
                                      const retry_policy& p,
                                      const std::function<double()>& jitter);

// Input that does not fit the context window even after compaction (checked before the first
// attempt): reported, never staged.
// What a compaction did: recorded one, found nothing older to compact, or failed (its summary).
enum class compaction_result { done, nothing_to_compact, failed };
// The queued input does not fit in the context window, after the compaction `how` went.
diagnostic input_too_large(compaction_result how = compaction_result::done);
// A context overflow (the provider's `error`) that no compaction helped (`how` is not done).
diagnostic overflow_not_compacted(compaction_result how, std::string_view error);

// ---- a takeover

// What a new owner records when it loads a session whose previous owner stopped mid-turn, so
// that every client sees the owner changed (DESIGN.md: takeover terminalizes orphans): tool
// calls that had started and have no result (named: they are re-run if idempotent, else get an
// error result), or input that awaits a response (the turn is redone; not while the session is
// paused: it infers nothing then). None for a session between turns.
std::optional<interruption> takeover_interruption(const session_state& s);

// ---- an abort

// Whether a turn is in progress: a call of the newest response has no result, or input awaits
// a response (not while paused: the session runs nothing then). An abort stops only that.
bool turn_in_progress(const session_state& s);

// The entries that end the turn in progress for an abort, in one commit: `before` (entries a
// runner decided and has not committed), an error result for each call of the newest response
// that has none in the state or in `before`, then `why`. The result says what became of the
// call: `running` was stopped; a call not started, or started by this owner and not run
// (`not_run`), was not run; another started one may have run under an owner that stopped.
std::vector<entry_body> stop_turn(const session_state& s, std::vector<entry_body> before,
                                  interruption why, const tool_call_id* running,
                                  const std::function<bool(const tool_call_id&)>& not_run);

// ---- the tool calls of a response

// What the session knows of a call's tool.
enum class tool_kind {
    unavailable,     // no such tool, or not enabled for this session
    idempotent,      // may run again after an owner that started it stopped
    not_idempotent,  // runs at most once
};

// What the loop does with one call, given its tool.
enum class tool_action {
    skip,         // it has its result
    run,          // run it (tool_started is committed first when it has not started)
    unknown,      // an error result: no such tool, or not enabled for this session
    interrupted,  // started by an owner that stopped, and not idempotent: an error result,
                  // never a second run
};
tool_action next_tool_action(const tool_call_state& call, tool_kind tool);

// The error results of calls the loop does not run.
std::string unknown_tool_result(std::string_view name);
std::string interrupted_tool_result();

}  // namespace wuhu::session
