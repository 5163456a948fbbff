#include "storage/store.hpp"

#include "session/reducer.hpp"

#include <algorithm>

namespace wuhu::storage {

namespace s = wuhu::session;

bool matches(const catalog_query& q, const catalog_entry& e) {
    const auto& sum = e.summary;
    if (q.has_work && sum.has_work != *q.has_work) {
        return false;
    }
    if (q.needing_owner_by && !(sum.has_work && !sum.paused) &&
        !(sum.next_timer && *sum.next_timer <= *q.needing_owner_by)) {
        return false;
    }
    if (q.awaiting_approval && (sum.approvals > 0) != *q.awaiting_approval) {
        return false;
    }
    return in_scope(q.tenant, e.id) &&
           (!q.ids || std::find(q.ids->begin(), q.ids->end(), e.id) != q.ids->end());
}

bool after_cursor(const catalog_query& q, const catalog_entry& e) {
    if (!q.by_cost) {
        return !q.after || e.id > *q.after;
    }
    if (!q.after_cost) {
        return true;
    }
    const auto cost = e.summary.cost;
    return cost < *q.after_cost || (cost == *q.after_cost && (!q.after || e.id > *q.after));
}

void in_query_order(const catalog_query& q, std::vector<catalog_entry>& entries) {
    std::sort(entries.begin(), entries.end(), [&](const catalog_entry& a, const catalog_entry& b) {
        if (q.by_cost && a.summary.cost != b.summary.cost) {
            return a.summary.cost > b.summary.cost;
        }
        return a.id < b.id;
    });
}

bool in_scope(const std::optional<std::string>& tenant, const session_id& id) {
    return !tenant || id.tenant() == *tenant;
}

key_range range_of(const std::optional<std::string>& tenant,
                   const std::optional<session_id>& after) {
    key_range r;
    if (after) {
        r.after = after->str();
    }
    if (tenant && !tenant->empty()) {
        r.after = std::max(r.after, *tenant + ".");
        r.before = *tenant + "/";  // '/' follows '.' in byte order
    }
    return r;
}

result<void> session_log::commit(const session_state& before, const action_list& actions) {
    if (actions.empty()) {
        return {};
    }
    created_ = false;  // a later load reads what this stored
    return do_commit(before, actions);
}

result<action_list> session_log::commit_plan(const session_state& before,
                                             result<action_list> plan) {
    if (!plan) {
        return plan;
    }
    if (auto r = commit(before, *plan); !r) {
        return r.error();
    }
    return plan;
}

result<s::enqueue_outcome> session_log::enqueue(const session_state& before, s::enqueue_input in,
                                                unix_ms at) {
    auto out = s::plan_enqueue(before, std::move(in), at);
    if (!out) {
        return out.error();
    }
    if (auto r = commit(before, out->actions); !r) {
        return r.error();
    }
    return out;
}

result<s::cancel_outcome> session_log::cancel(const session_state& before, s::lane l,
                                              const s::queue_item_id& id, unix_ms at) {
    auto out = s::plan_cancel(before, l, id, at);
    if (!out) {
        return out.error();
    }
    if (auto r = commit(before, out->actions); !r) {
        return r.error();
    }
    return out;
}

result<s::enqueue_outcome> session_log::enqueue_and_drain(const session_state& before,
                                                          s::enqueue_input in, unix_ms at) {
    auto out = s::plan_enqueue_and_drain(before, std::move(in), at);
    if (!out) {
        return out.error();
    }
    if (auto r = commit(before, out->actions); !r) {
        return r.error();
    }
    return out;
}

result<action_list> session_log::append_response(const session_state& before,
                                                 s::assistant_message m,
                                                 const std::vector<s::tool_call_id>& starting,
                                                 bool settle, unix_ms at) {
    return commit_plan(before, s::plan_response(before, std::move(m), starting, settle, at));
}

result<action_list> session_log::tool_steps(const session_state& before,
                                            std::vector<s::entry_body> steps, bool drain,
                                            unix_ms at) {
    return commit_plan(before, s::plan_tool_steps(before, std::move(steps), drain, at));
}

result<action_list> session_log::drain(const session_state& before, s::checkpoint c, unix_ms at) {
    return commit_plan(before, s::plan_drain(before, c, at));
}

result<action_list> session_log::append_assistant(const session_state& before,
                                                  s::assistant_message m, unix_ms at) {
    return commit_plan(before, s::plan_append_assistant(before, std::move(m), at));
}

result<action_list> session_log::tool_will_execute(const session_state& before,
                                                   const s::tool_call_id& id, unix_ms at) {
    return commit_plan(before, s::plan_tool_will_execute(before, id, at));
}

result<action_list> session_log::tool_did_execute(const session_state& before, s::tool_result r,
                                                  unix_ms at) {
    return commit_plan(before, s::plan_tool_did_execute(before, std::move(r), at));
}

result<action_list> session_log::append_compaction(const session_state& before, s::compaction c,
                                                   unix_ms at) {
    return commit_plan(before, s::plan_append_compaction(before, std::move(c), at));
}

result<action_list> session_log::append_marker(const session_state& before,
                                               std::variant<s::interruption, s::diagnostic> m,
                                               unix_ms at) {
    return commit_plan(before, s::plan_append_marker(before, std::move(m), at));
}

result<action_list> session_log::set_settings(const session_state& before, s::settings next) {
    return commit_plan(before, s::plan_set_settings(before, std::move(next)));
}

result<action_list> session_log::mark_idle(const session_state& before) {
    return commit_plan(before, s::plan_mark_idle(before));
}

result<action_list> session_log::set_paused(const session_state& before, bool paused) {
    return commit_plan(before, s::plan_set_paused(before, paused));
}

result<action_list> session_log::schedule_timer(const session_state& before, s::timer t,
                                                unix_ms at) {
    return commit_plan(before, s::plan_schedule_timer(before, std::move(t), at));
}


result<action_list> session_log::fire_timer(const session_state& before, const s::queue_item_id& id,
                                            unix_ms at) {
    return commit_plan(before, s::plan_fire_timer(before, id, at));
}

}  // namespace wuhu::storage
