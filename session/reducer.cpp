#include "session/reducer.hpp"

#include "session/assert.hpp"
#include "session/overloaded.hpp"

#include <algorithm>

namespace wuhu::session {
namespace {

tool_call_state* call_of(session_state& s, const tool_call_id& id) {
    for (auto& t : s.tool_calls) {
        if (t.call.id == id) {
            return &t;
        }
    }
    return nullptr;
}

void mark_tool(session_state& s, const tool_call_id& id, tool_status st) {
    if (auto* t = call_of(s, id)) {
        t->status = st;
    }
}

void append_entry(session_state& s, const entry& e) {
    WUHU_ASSERT(e.id.value == s.transcript.size() + 1, "entry ids are consecutive");
    s.transcript.push_back(e);
    count(s.usage, e.body);
    std::visit(overloaded{
                   [&](const assistant_message& m) {
                       s.tool_calls.clear();
                       for (const auto& c : m.tool_calls) {
                           s.tool_calls.push_back(tool_call_state{c,
                                                                  tool_status::not_started,
                                                                  approval_status::none,
                                                                  {},
                                                                  decision::reject,
                                                                  {}});
                       }
                       s.tool_calls_entry = e.id;
                   },
                   [&](const tool_started& t) { mark_tool(s, t.call, tool_status::started); },
                   [&](const tool_result& t) { mark_tool(s, t.call, tool_status::finished); },
                   [&](const approval_requested& a) {
                       if (auto* t = call_of(s, a.call)) {
                           t->approval = approval_status::pending;
                           t->deadline = a.deadline;
                           t->on_deadline = a.on_deadline;
                       }
                   },
                   [&](const approval_decided& d) {
                       if (auto* t = call_of(s, d.call)) {
                           t->approval = d.what == decision::approve ? approval_status::approved
                                                                     : approval_status::refused;
                           t->deadline = unix_ms{0};
                           t->on_deadline = decision::reject;
                           t->arguments = d.what == decision::approve ? d.arguments : "";
                       }
                   },
                   [](const auto&) {},
               },
               e.body);
}

void remove_pending(lane_state& ls, const queue_item_id& id) {
    auto it = std::find_if(ls.pending.begin(), ls.pending.end(), [&](std::size_t at) {
        return std::get<enqueued_fact>(ls.journal[at].fact).item.id == id;
    });
    WUHU_ASSERT(it != ls.pending.end(), "a terminal fact refers to a pending item");
    ls.pending.erase(it);
}

void record(session_state& s, lane l, const journal_entry& j) {
    lane_state& ls = s.lanes[index_of(l)];
    WUHU_ASSERT(j.seq.value == ls.journal.size() + 1, "journal cursors are consecutive");
    ls.journal.push_back(j);
    std::visit(overloaded{
                   [&](const enqueued_fact& f) {
                       WUHU_ASSERT(f.item.in == l, "item lane matches journal lane");
                       auto [it, fresh] = s.items.emplace(f.item.id.str(),
                                                          item_record{l, item_status::pending, {}});
                       WUHU_ASSERT(fresh, "queue item ids are unique in a session");
                       ls.pending.push_back(ls.journal.size() - 1);  // its fact, just recorded
                   },
                   [&](const canceled_fact& f) {
                       remove_pending(ls, f.id);
                       s.items.at(f.id.str()).status = item_status::canceled;
                   },
                   [&](const materialized_fact& f) {
                       remove_pending(ls, f.id);
                       auto& rec = s.items.at(f.id.str());
                       rec.status = item_status::materialized;
                       rec.entry = f.entry;
                   },
                   // The timers themselves are the timer actions' (timer_scheduled, _cleared):
                   // these facts make them visible and advance the system lane's version.
                   [&](const scheduled_fact&) {
                       WUHU_ASSERT(l == lane::system, "timers are of the system lane");
                   },
                   [&](const unscheduled_fact& f) {
                       WUHU_ASSERT(l == lane::system, "timers are of the system lane");
                       if (!f.fired) {
                           // Its id is spent, as a canceled item's: never scheduled or
                           // enqueued again (a client never sees it come back).
                           auto [it, fresh] = s.items.emplace(
                               f.id.str(), item_record{l, item_status::canceled, {}});
                           WUHU_ASSERT(fresh, "a canceled timer never was an item");
                       }
                   },
               },
               j.fact);
}

}  // namespace

void apply_actions(const action& a, session_state& s) {
    std::visit(overloaded{
                   [&](const entry_appended& x) { append_entry(s, x.e); },
                   [&](const journal_recorded& x) { record(s, x.in, x.j); },
                   [&](const settings_set& x) { s.config = x.value; },
                   [&](const has_work_set& x) { s.has_work = x.value; },
                   [&](const paused_set& x) { s.paused = x.value; },
                   [&](const timer_scheduled& x) {
                       auto [it, fresh] = s.timers.emplace(x.t.id.str(), x.t);
                       WUHU_ASSERT(fresh, "timer ids are unique");
                   },
                   [&](const timer_cleared& x) {
                       WUHU_ASSERT(s.timers.erase(x.id.str()) == 1, "a cleared timer exists");
                   },
               },
               a);
}

void apply_actions(const action_list& actions, session_state& s) {
    for (const auto& a : actions) {
        apply_actions(a, s);
    }
}

session_state applied(const action_list& actions, session_state s) {
    apply_actions(actions, s);
    return s;
}

}  // namespace wuhu::session
