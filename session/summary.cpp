#include "session/summary.hpp"

#include "session/approval.hpp"
#include "session/overloaded.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace wuhu::session {

session_summary summarize(const session_state& s) {
    return summarize(s, action_list{});
}

session_summary summarize(const session_state& before, const action_list& actions) {
    session_summary out;
    out.has_work = before.has_work;
    out.paused = before.paused;
    // Last activity: the time of the last entry and of each lane's last fact (the last ones,
    // not the latest times: a clock that went back must give what the stored state gives).
    std::array<std::int64_t, 3> depth{};
    std::array<unix_ms, 3> last_fact{};
    unix_ms last_entry{0};
    for (lane l : all_lanes) {
        const auto& ls = before.in(l);
        depth[index_of(l)] = static_cast<std::int64_t>(ls.pending.size());
        if (!ls.journal.empty()) {
            last_fact[index_of(l)] = ls.journal.back().at;
        }
    }
    if (!before.transcript.empty()) {
        last_entry = before.transcript.back().at;
    }
    std::set<std::string> cleared;          // of the timers pending before
    std::map<std::string, unix_ms> added;  // timers the actions schedule (and keep)
    std::int64_t timers = static_cast<std::int64_t>(before.timers.size());
    // The deadlines of the calls that wait for a decision (0: none), as the actions leave them.
    std::map<std::string, unix_ms> waiting;
    for (const auto& t : before.tool_calls) {
        if (awaits_decision(t)) {
            waiting[t.call.id.str()] = t.deadline;
        }
    }
    auto note_entry = [&](const entry_body& b) {
        std::visit(overloaded{
                       [&](const assistant_message&) { waiting.clear(); },
                       [&](const approval_requested& r) { waiting[r.call.str()] = r.deadline; },
                       [&](const approval_decided& d) { waiting.erase(d.call.str()); },
                       [&](const tool_result& r) { waiting.erase(r.call.str()); },
                       [](const auto&) {},
                   },
                   b);
    };
    for (const auto& a : actions) {
        std::visit(overloaded{
                       [&](const entry_appended& x) {
                           last_entry = x.e.at;
                           note_entry(x.e.body);
                       },
                       [&](const journal_recorded& x) {
                           last_fact[index_of(x.in)] = x.j.at;
                           if (std::holds_alternative<enqueued_fact>(x.j.fact)) {
                               ++depth[index_of(x.in)];
                           } else if (std::holds_alternative<canceled_fact>(x.j.fact) ||
                                      std::holds_alternative<materialized_fact>(x.j.fact)) {
                               --depth[index_of(x.in)];
                           }
                       },
                       [&](const has_work_set& x) { out.has_work = x.value; },
                       [&](const paused_set& x) { out.paused = x.value; },
                       [&](const timer_scheduled& x) {
                           ++timers;
                           added[x.t.id.str()] = x.t.due;
                       },
                       [&](const timer_cleared& x) {
                           --timers;
                           if (added.erase(x.id.str()) == 0) {
                               cleared.insert(x.id.str());
                           }
                       },
                       [](const settings_set&) {},
                   },
                   a);
    }
    for (std::size_t i = 0; i < depth.size(); ++i) {
        out.lanes[i] = static_cast<std::uint32_t>(std::max<std::int64_t>(depth[i], 0));
    }
    out.last_activity = std::max({last_entry, last_fact[0], last_fact[1], last_fact[2]});
    out.timers = static_cast<std::uint32_t>(std::max<std::int64_t>(timers, 0));
    auto earliest = [&](unix_ms due) {
        out.next_timer = out.next_timer ? std::min(*out.next_timer, due) : due;
    };
    for (const auto& [id, due] : added) {
        earliest(due);
    }
    for (const auto& [id, t] : before.timers) {
        if (!cleared.contains(id)) {
            earliest(t.due);
        }
    }
    for (const auto& [id, due] : waiting) {
        if (due.value != 0) {
            earliest(due);  // the deadline's decision needs an owner then
        }
    }
    out.approvals = static_cast<std::uint32_t>(waiting.size());
    const auto totals = counted(before.usage, actions);
    out.cost = totals.cost;
    out.tokens = totals.tokens.total();
    return out;
}

usage_totals counted(usage_totals t, const action_list& actions) {
    for (const auto& a : actions) {
        if (const auto* e = std::get_if<entry_appended>(&a)) {
            count(t, e->e.body);
        }
    }
    return t;
}

}  // namespace wuhu::session
