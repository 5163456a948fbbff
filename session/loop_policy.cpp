#include "session/loop_policy.hpp"

#include "session/approval.hpp"
#include "session/rules.hpp"

#include <algorithm>

namespace wuhu::session {

std::string_view step_name(step_kind k) {
    switch (k) {
        case step_kind::pause:
            return "pause";
        case step_kind::compact:
            return "compact";
        case step_kind::run_tools:
            return "run_tools";
        case step_kind::checkpoint:
            return "checkpoint";
        case step_kind::infer:
            return "infer";
        case step_kind::idle:
            return "idle";
        case step_kind::mark_idle:
            return "mark_idle";
        case step_kind::budget_spent:
            return "budget_spent";
        case step_kind::budget_notice:
            return "budget_notice";
        case step_kind::await_approval:
            return "await_approval";
    }
    return "unknown";
}

namespace {

// A call of the newest response started and without its result.
bool has_started_call(const session_state& s) {
    return std::any_of(s.tool_calls.begin(), s.tool_calls.end(),
                       [](const tool_call_state& t) { return t.status == tool_status::started; });
}

}  // namespace

std::size_t calls_within(const session_state& s, const budget& limits, std::size_t wanted) {
    if (exhausted(s.usage, limits)) {
        return 0;
    }
    if (limits.tool_calls == 0) {
        return wanted;
    }
    const std::uint64_t used = std::min(s.usage.tool_calls, limits.tool_calls);
    return static_cast<std::size_t>(std::min<std::uint64_t>(wanted, limits.tool_calls - used));
}

loop_step next_step(const session_state& s, const loop_position& at, const budget& fleet) {
    if (s.paused) {
        return {step_kind::pause, {}};
    }
    const auto limits = effective(s.config.limits, fleet);
    if (auto due = compaction_due(s); due.value != 0 && due != at.compaction_tried) {
        // A summary is an inference too: none past the budget.
        if (exhausted(s.usage, limits)) {
            return {step_kind::budget_spent, {}};
        }
        return {step_kind::compact, due};
    }
    if (has_unfinished_tool_calls(s)) {
        // Calls that wait for a person: nothing to run until a decision or a deadline.
        if (awaiting_approval(s)) {
            return {step_kind::await_approval, {}};
        }
        // Past the budget no call starts (those started before it run).
        if (exhausted(s.usage, limits) && !has_started_call(s)) {
            return {step_kind::budget_spent, {}};
        }
        return {step_kind::run_tools, {}};
    }
    if (!at.checkpoint_taken) {
        // Input the checkpoint would take leads to an inference: a spent budget keeps it queued.
        if (exhausted(s.usage, limits) && !select_checkpoint(s, current_checkpoint(s)).empty()) {
            return {step_kind::budget_spent, {}};
        }
        return {step_kind::checkpoint, {}};
    }
    if (needs_inference(s)) {
        if (exhausted(s.usage, limits)) {
            return {step_kind::budget_spent, {}};
        }
        if (unnoticed_limit(s, limits)) {
            return {step_kind::budget_notice, {}};
        }
        return {step_kind::infer, {}};
    }
    if (!s.has_work) {
        return {step_kind::idle, {}};
    }
    if (!at.idle_marked) {
        return {step_kind::mark_idle, {}};
    }
    return {step_kind::checkpoint, {}};
}

loop_position after(const loop_step& done, const loop_position& at) {
    switch (done.kind) {
        case step_kind::compact:
            return loop_position{done.upto, false, false};
        case step_kind::run_tools:
        case step_kind::infer:
        case step_kind::budget_notice:  // the checkpoint drains the notice next
            return loop_position{at.compaction_tried, false, false};
        case step_kind::checkpoint:
            return loop_position{at.compaction_tried, true, false};
        case step_kind::mark_idle:
            return loop_position{at.compaction_tried, true, true};
        case step_kind::pause:
        case step_kind::idle:
        case step_kind::budget_spent:  // paused: the run ends
        case step_kind::await_approval:
            break;
    }
    return at;
}

std::string_view kind_name(inference_error_kind k) {
    switch (k) {
        case inference_error_kind::transient:
            return "transient";
        case inference_error_kind::context_overflow:
            return "context_overflow";
        case inference_error_kind::fatal:
            return "fatal";
    }
    return "fatal";
}

std::chrono::milliseconds backoff(const retry_policy& p, int retry, double unit) {
    long long d = p.base.count();
    for (int i = 1; i < retry && d < p.cap.count(); ++i) {
        d *= 2;
    }
    if (d > p.cap.count()) {
        d = p.cap.count();
    }
    return std::chrono::milliseconds(d / 2 +
                                     static_cast<long long>(unit * static_cast<double>(d) / 2));
}

inference_decision on_inference_error(const inference_error& e, inference_attempts& attempts,
                                      const retry_policy& p,
                                      const std::function<double()>& jitter) {
    switch (e.kind) {
        case inference_error_kind::context_overflow:
            if (!attempts.overflow_retried) {
                attempts.overflow_retried = true;
                return compact_then_retry{};
            }
            return give_up{diagnostic{
                "input_too_large", "the context overflowed even after compaction: " + e.message}};
        case inference_error_kind::transient:
            if (++attempts.transient_failures < p.max_attempts) {
                auto wait = backoff(p, attempts.transient_failures, jitter());
                if (e.retry_after) {
                    wait = std::max(wait, std::min(*e.retry_after, p.max_server_wait));
                }
                return retry_after{wait};
            }
            return give_up{diagnostic{"inference_failed",
                                      "gave up after " +
                                          std::to_string(attempts.transient_failures) +
                                          " attempts: " + e.message}};
        case inference_error_kind::fatal:
            break;
    }
    return give_up{diagnostic{"inference_failed", e.message}};
}

namespace {

std::string_view after_compaction(compaction_result how) {
    switch (how) {
        case compaction_result::done:
            return " even after compaction";
        case compaction_result::nothing_to_compact:
            return ", and nothing older could be compacted";
        case compaction_result::failed:
            break;
    }
    return ", and its compaction failed (the summary)";
}

}  // namespace

diagnostic input_too_large(compaction_result how) {
    return diagnostic{"input_too_large",
                      "the queued input does not fit in the context window" +
                          std::string(after_compaction(how))};
}

diagnostic overflow_not_compacted(compaction_result how, std::string_view error) {
    return diagnostic{"input_too_large", "the context overflowed" +
                                             std::string(after_compaction(how)) + ": " +
                                             std::string(error)};
}

std::optional<interruption> takeover_interruption(const session_state& s) {
    std::string cut;
    for (const auto& t : s.tool_calls) {
        if (t.status == tool_status::started) {
            cut.append(cut.empty() ? "" : ", ").append(t.call.id.str());
            cut.append(" (").append(t.call.name).append(")");
        }
    }
    if (!cut.empty()) {
        return interruption{"the previous owner stopped while running tool calls " + cut,
                            interruption_kind::owner_lost};
    }
    // A paused session infers nothing until `resume`: input that awaits a response there was
    // not being answered, and the turn is done when it resumes (a marker here would be added
    // at every load: passivation unloads paused sessions).
    if (!s.paused && needs_inference(s) && !has_unfinished_tool_calls(s)) {
        return interruption{"the previous owner stopped while this turn was in progress",
                            interruption_kind::owner_lost};
    }
    return std::nullopt;
}

bool turn_in_progress(const session_state& s) {
    return !s.paused && (has_unfinished_tool_calls(s) || needs_inference(s));
}

std::vector<entry_body> stop_turn(const session_state& s, std::vector<entry_body> before,
                                  interruption why, const tool_call_id* running,
                                  const std::function<bool(const tool_call_id&)>& not_run) {
    std::vector<entry_body> out = std::move(before);
    auto has_result = [&out](const tool_call_id& id) {
        return std::any_of(out.begin(), out.end(), [&id](const entry_body& b) {
            const auto* r = std::get_if<tool_result>(&b);
            return r != nullptr && r->call == id;
        });
    };
    for (const auto& t : s.tool_calls) {
        if (t.status == tool_status::finished || has_result(t.call.id)) {
            continue;
        }
        std::string text;
        if (running != nullptr && *running == t.call.id) {
            text = "aborted: " + why.reason;
        } else if (t.status == tool_status::not_started || not_run(t.call.id)) {
            text = "not run: the turn was aborted";
        } else {
            text = "aborted: the turn was aborted after an owner that stopped started this call "
                   "(it may have run)";
        }
        out.emplace_back(tool_result{t.call.id, t.call.name, std::move(text), true});
    }
    out.emplace_back(std::move(why));
    return out;
}

tool_action next_tool_action(const tool_call_state& call, tool_kind tool) {
    if (call.status == tool_status::finished) {
        return tool_action::skip;
    }
    switch (tool) {
        case tool_kind::unavailable:
            return tool_action::unknown;
        case tool_kind::not_idempotent:
            return call.status == tool_status::started ? tool_action::interrupted
                                                       : tool_action::run;
        case tool_kind::idempotent:
            return tool_action::run;
    }
    return tool_action::unknown;
}

std::string unknown_tool_result(std::string_view name) {
    return "unknown tool: " + std::string(name);
}

std::string interrupted_tool_result() {
    return "interrupted: the worker running this tool stopped, and the tool is not idempotent, "
           "so it was not run again";
}

}  // namespace wuhu::session
