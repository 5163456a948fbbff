#include "worker/transition.hpp"

#include "session/overloaded.hpp"

namespace wuhu::worker {

namespace s = wuhu::session;

storage::result<s::action_list> write(storage::session_log& log, const s::session_state& before,
                                      transition t, s::unix_ms now) {
    using out = storage::result<s::action_list>;
    return std::visit(
        s::overloaded{
            [&](take_checkpoint) -> out {
                return log.drain(before, s::current_checkpoint(before), now);
            },
            [&](mark_idle) -> out { return log.mark_idle(before); },
            [&](s::interruption& m) -> out { return log.append_marker(before, std::move(m), now); },
            [&](s::diagnostic& m) -> out { return log.append_marker(before, std::move(m), now); },
            [&](response& r) -> out {
                return log.append_response(before, std::move(r.message), r.starting, r.settle,
                                           now);
            },
            [&](tool_steps& x) -> out {
                return log.tool_steps(before, std::move(x.steps), x.drain, now);
            },
            [&](s::compaction& c) -> out { return log.append_compaction(before, std::move(c), now); },
            [&](s::timer& x) -> out { return log.schedule_timer(before, std::move(x), now); },
            [&](fire_timer& x) -> out { return log.fire_timer(before, x.id, now); },
        },
        t);
}

}  // namespace wuhu::worker
