#include "session/transition.hpp"

#include "session/approval.hpp"
#include "session/overloaded.hpp"
#include "session/rules.hpp"

namespace wuhu::session {

result<action_list> plan(const session_state& before, transition t, unix_ms at) {
    using out = result<action_list>;
    return std::visit(
        overloaded{
            [&](take_checkpoint) -> out {
                return plan_drain(before, current_checkpoint(before), at);
            },
            [&](mark_idle) -> out { return plan_mark_idle(before); },
            [&](interruption& m) -> out { return plan_append_marker(before, std::move(m), at); },
            [&](diagnostic& m) -> out { return plan_append_marker(before, std::move(m), at); },
            [&](response& r) -> out {
                return plan_response(before, std::move(r.message), r.starting, r.settle, at,
                                     std::move(r.asking));
            },
            [&](tool_steps& x) -> out {
                return plan_tool_steps(before, std::move(x.steps), x.drain, at);
            },
            [&](compaction& c) -> out { return plan_append_compaction(before, std::move(c), at); },
            [&](timer& x) -> out { return plan_schedule_timer(before, std::move(x), at); },
            [&](fire_timer& x) -> out { return plan_fire_timer(before, x.id, at); },
            [&](budget_spent& x) -> out { return plan_budget_spent(before, x.limits, at); },
            [&](budget_notice& x) -> out { return plan_budget_notice(before, x.limits, at); },
            [&](await_approval) -> out { return plan_await_approval(before); },
            [&](approval_deadline& x) -> out { return plan_deadline(before, x.call, at); },
        },
        t);
}

}  // namespace wuhu::session
