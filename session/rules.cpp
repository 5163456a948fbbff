#include "session/rules.hpp"

#include "session/approval.hpp"
#include "session/compaction.hpp"
#include "session/ledger.hpp"
#include "session/overloaded.hpp"
#include "session/text.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace wuhu::session {
namespace {

action_list append(const session_state& s, entry_body body, unix_ms at) {
    return {entry_appended{entry{entry_seq{s.transcript.size() + 1}, at, std::move(body)}}};
}

// Whether an entry decides needs_inference, walking back: nullopt to look further back.
std::optional<bool> awaits_response(const entry_body& b) {
    if (std::holds_alternative<tool_started>(b) || std::holds_alternative<compaction>(b) ||
        std::holds_alternative<approval_requested>(b) ||
        std::holds_alternative<approval_decided>(b)) {
        return std::nullopt;
    }
    if (const auto* i = std::get_if<interruption>(&b)) {
        if (i->kind == interruption_kind::owner_lost) {
            return std::nullopt;
        }
        return false;
    }
    if (const auto* d = std::get_if<diagnostic>(&b);
        d != nullptr && (d->code == "budget_exhausted" || d->code == billed_attempt_code)) {
        // The turn waits for a new budget, or retries the billed attempt: it is not over.
        return std::nullopt;
    }
    return std::holds_alternative<party_message>(b) || std::holds_alternative<system_message>(b) ||
           std::holds_alternative<tool_result>(b);
}

// The drain of checkpoint `c`, its entries numbered from `next_entry`.
action_list drain_from(const session_state& s, checkpoint c, unix_ms at, std::uint64_t next_entry) {
    action_list out;
    std::array<std::uint64_t, 3> next_journal{};
    for (lane l : all_lanes) {
        next_journal[index_of(l)] = s.in(l).journal.size() + 1;
    }
    for (const queue_item& q : select_checkpoint(s, c)) {
        entry_seq id{next_entry++};
        out.push_back(entry_appended{entry{id, at, materialize(q)}});
        journal_entry j{journal_seq{next_journal[index_of(q.in)]++}, at,
                        materialized_fact{q.id, id}};
        out.push_back(journal_recorded{q.in, std::move(j)});
    }
    return out;
}

}  // namespace

result<enqueue_outcome> plan_enqueue(const session_state& s, enqueue_input in, unix_ms at) {
    const bool system_payload = std::holds_alternative<system_input>(in.payload);
    if ((in.in == lane::system) != system_payload) {
        return errc::invalid_lane;
    }
    if (const auto* u = std::get_if<user_input>(&in.payload);
        u != nullptr && std::holds_alternative<system_author>(u->from)) {
        return errc::invalid_author;
    }
    if (s.find_item(in.id.str()) != nullptr) {
        return enqueue_outcome{{}, std::move(in.id), true};
    }
    enqueue_outcome out{{}, in.id, false};
    journal_entry j{journal_seq{s.in(in.in).journal.size() + 1}, at,
                    enqueued_fact{queue_item{std::move(in.id), in.in, at, std::move(in.payload)}}};
    out.actions.push_back(journal_recorded{in.in, std::move(j)});
    if (!s.has_work) {
        out.actions.push_back(has_work_set{true});
    }
    return out;
}

std::size_t content_bytes(const std::variant<user_input, system_input>& payload) {
    return std::visit([](const auto& x) { return x.content.size(); }, payload);
}

errc lane_room(const session_state& s, const enqueue_input& in, const lane_limits& limits) {
    if (s.find_item(in.id.str()) != nullptr) {
        return errc::ok;
    }
    const auto& ls = s.in(in.in);
    if (limits.max_items > 0 && ls.pending.size() >= limits.max_items) {
        return errc::lane_full;
    }
    if (limits.max_bytes > 0) {
        std::size_t bytes = content_bytes(in.payload);
        for (std::size_t i = 0; i < ls.pending.size(); ++i) {
            bytes += content_bytes(ls.pending_item(i).payload);
        }
        if (bytes > limits.max_bytes) {
            return errc::lane_full;
        }
    }
    return errc::ok;
}

result<cancel_outcome> plan_cancel(const session_state& s, lane l, const queue_item_id& id,
                                   unix_ms at) {
    if (l == lane::system) {
        return plan_cancel_timer(s, id, at);
    }
    const item_record* rec = s.find_item(id.str());
    if (rec == nullptr || rec->in != l) {
        return errc::item_not_found;
    }
    switch (rec->status) {
        case item_status::canceled:
            return cancel_outcome{{}, true};
        case item_status::materialized:
            return cancel_outcome{{}, false};
        case item_status::pending:
            break;
    }
    journal_entry j{journal_seq{s.in(l).journal.size() + 1}, at, canceled_fact{id}};
    return cancel_outcome{{journal_recorded{l, std::move(j)}}, true};
}

std::vector<queue_item> select_checkpoint(const session_state& s, checkpoint c) {
    std::vector<const lane_state*> sources{&s.in(lane::system), &s.in(lane::steer)};
    const bool urgent_empty = sources[0]->pending.empty() && sources[1]->pending.empty();
    if (c == checkpoint::follow_up && urgent_empty) {
        sources = {&s.in(lane::follow_up)};
    }
    // Stable k-way merge by enqueue time: FIFO inside a lane is kept even if a clock stepped
    // back between two enqueues, and ties go to the lane listed first.
    std::vector<std::size_t> pos(sources.size(), 0);
    std::vector<queue_item> out;
    for (;;) {
        std::size_t best = sources.size();
        for (std::size_t i = 0; i < sources.size(); ++i) {
            if (pos[i] >= sources[i]->pending.size()) {
                continue;
            }
            if (best == sources.size() || sources[i]->pending_item(pos[i]).enqueued_at <
                                              sources[best]->pending_item(pos[best]).enqueued_at) {
                best = i;
            }
        }
        if (best == sources.size()) {
            return out;
        }
        out.push_back(sources[best]->pending_item(pos[best]++));
    }
}

entry_body materialize(const queue_item& q) {
    return std::visit(overloaded{
                          [&](const user_input& u) -> entry_body {
                              return party_message{u.from, q.in, q.id, u.content,
                                                   q.enqueued_at};
                          },
                          [&](const system_input& x) -> entry_body {
                              return system_message{x.source, q.id, x.content};
                          },
                      },
                      q.payload);
}

action_list plan_drain(const session_state& s, checkpoint c, unix_ms at) {
    return drain_from(s, c, at, s.transcript.size() + 1);
}

result<action_list> plan_append_assistant(const session_state& s, assistant_message m, unix_ms at) {
    // Provider output is stored and published as JSON: no NUL, valid UTF-8.
    m.text = sanitized(m.text);
    m.model = sanitized(m.model);
    for (auto& c : m.tool_calls) {
        c.name = sanitized(c.name);
        c.arguments = sanitized(c.arguments);
    }
    std::set<std::string> ids;
    for (const auto& c : m.tool_calls) {
        if (!ids.insert(c.id.str()).second || c.name.empty()) {
            return errc::invalid_entry;
        }
    }
    return append(s, std::move(m), at);
}

// One entry of plan_tool_steps, checked as it checks each.
result<action_list> plan_tool_will_execute(const session_state& s, const tool_call_id& id,
                                           unix_ms at) {
    return plan_tool_steps(s, {tool_started{id, ""}}, false, at);
}

result<action_list> plan_tool_did_execute(const session_state& s, tool_result r, unix_ms at) {
    return plan_tool_steps(s, {std::move(r)}, false, at);
}

result<action_list> plan_append_compaction(const session_state& s, compaction c, unix_ms at) {
    std::uint64_t floor = 1;
    if (const entry* prev = s.last_compaction()) {
        floor = std::get<compaction>(prev->body).first_kept.value + 1;
    }
    if (c.first_kept.value < floor || c.first_kept.value > s.transcript.size() + 1) {
        return errc::invalid_entry;
    }
    return append(s, std::move(c), at);
}

action_list plan_append_marker(const session_state& s, std::variant<interruption, diagnostic> m,
                               unix_ms at) {
    return std::visit([&](auto&& x) { return append(s, std::move(x), at); }, std::move(m));
}

result<action_list> plan_set_settings(const session_state& s, settings next) {
    if (auto r = validate(next); !r) {
        return r.error();
    }
    if (next == s.config) {
        return action_list{};
    }
    const bool resume = s.paused && next.limits != s.config.limits && paused_by_budget(s);
    action_list out{settings_set{std::move(next)}};
    if (resume) {
        out.push_back(paused_set{false});
    }
    return out;
}

bool paused_by_budget(const session_state& s) {
    if (!s.paused || s.transcript.empty()) {
        return false;
    }
    const auto* d = std::get_if<diagnostic>(&s.transcript.back().body);
    return d != nullptr && d->code == "budget_exhausted";
}

action_list plan_budget_spent(const session_state& s, const budget& limits, unix_ms at) {
    const auto spent = exhausted(s.usage, limits);
    if (!spent) {
        return {};
    }
    auto out = append(s, budget_exhausted_report(*spent), at);
    if (!s.paused) {
        out.push_back(paused_set{true});
    }
    return out;
}

std::optional<budget_limit> unnoticed_limit(const session_state& s, const budget& limits) {
    for (const auto& l : nearly_exhausted(s.usage, limits)) {
        if (s.find_item(budget_notice_id(l)) == nullptr) {
            return l;
        }
    }
    return std::nullopt;
}

result<action_list> plan_budget_notice(const session_state& s, const budget& limits, unix_ms at) {
    const auto near = unnoticed_limit(s, limits);
    if (!near) {
        return action_list{};
    }
    auto id = queue_item_id::parse(budget_notice_id(*near));
    auto source = system_source::parse("budgetNotice");
    if (!id || !source) {
        return errc::invalid_item_id;
    }
    enqueue_input in{lane::system, *id,
                     system_input{*source, budget_notice_text(*near, limits.soft_percent)}};
    auto r = plan_enqueue(s, std::move(in), at);
    if (!r) {
        return r.error();
    }
    return std::move(r->actions);
}

action_list plan_mark_idle(const session_state& s) {
    if (!s.has_work || s.has_pending()) {
        return {};
    }
    return {has_work_set{false}};
}

action_list plan_set_paused(const session_state& s, bool paused) {
    if (s.paused == paused) {
        return {};
    }
    return {paused_set{paused}};
}

action_list plan_schedule_timer(const session_state& s, timer t, unix_ms at) {
    if (s.timers.contains(t.id.str()) || s.find_item(t.id.str()) != nullptr) {
        return {};
    }
    journal_entry j{journal_seq{s.in(lane::system).journal.size() + 1}, at, scheduled_fact{t}};
    return {timer_scheduled{std::move(t)}, journal_recorded{lane::system, std::move(j)}};
}

result<cancel_outcome> plan_cancel_timer(const session_state& s, const queue_item_id& id,
                                         unix_ms at) {
    if (!s.timers.contains(id.str())) {
        const item_record* rec = s.find_item(id.str());
        if (rec == nullptr || rec->in != lane::system) {
            return errc::item_not_found;
        }
        if (rec->status == item_status::canceled) {
            return cancel_outcome{{}, true};  // canceled before: again
        }
        // Fired already: nothing to cancel, as for a materialized item. An item enqueued into
        // the system lane (not by a timer) cannot be canceled.
        const auto& journal = s.in(lane::system).journal;
        for (auto it = journal.rbegin(); it != journal.rend(); ++it) {
            if (const auto* f = std::get_if<unscheduled_fact>(&it->fact); f && f->id == id) {
                return cancel_outcome{{}, false};
            }
        }
        return errc::not_cancelable;
    }
    journal_entry j{journal_seq{s.in(lane::system).journal.size() + 1}, at,
                    unscheduled_fact{id, false}};
    return cancel_outcome{{timer_cleared{id}, journal_recorded{lane::system, std::move(j)}}, true};
}

action_list plan_fire_timer(const session_state& s, const queue_item_id& id, unix_ms at) {
    auto it = s.timers.find(id.str());
    if (it == s.timers.end()) {
        return {};
    }
    const timer& t = it->second;
    auto out =
        plan_enqueue(s, enqueue_input{lane::system, t.id, system_input{t.source, t.content}}, at);
    action_list actions = out ? std::move(out->actions) : action_list{};
    // The timer's end, after its item's enqueue (a client that saw it scheduled sees it end
    // even when its item is enqueued and materialized within one patch).
    std::uint64_t seq = s.in(lane::system).journal.size() + 1;
    for (const auto& a : actions) {
        if (std::holds_alternative<journal_recorded>(a)) {
            ++seq;
        }
    }
    actions.push_back(journal_recorded{
        lane::system, journal_entry{journal_seq{seq}, at, unscheduled_fact{id, true}}});
    actions.push_back(timer_cleared{id});
    return actions;
}

bool needs_inference(const session_state& s) {
    for (auto it = s.transcript.rbegin(); it != s.transcript.rend(); ++it) {
        if (const auto decided = awaits_response(it->body)) {
            return *decided;
        }
    }
    return false;
}

result<enqueue_outcome> plan_enqueue_and_drain(const session_state& s, enqueue_input in,
                                               unix_ms at) {
    const lane into = in.in;
    auto out = plan_enqueue(s, std::move(in), at);
    if (!out || out->duplicate || s.paused || s.has_pending() ||
        (current_checkpoint(s) == checkpoint::steer && into == lane::follow_up)) {
        return out;
    }
    // The enqueued item, the only one pending, is what the checkpoint takes.
    const auto enqueued = std::get<journal_recorded>(out->actions.front()).j;
    const queue_item& item = std::get<enqueued_fact>(enqueued.fact).item;
    const entry_seq id{s.transcript.size() + 1};
    out->actions.push_back(entry_appended{entry{id, at, materialize(item)}});
    out->actions.push_back(journal_recorded{
        into, journal_entry{journal_seq{enqueued.seq.value + 1}, at, materialized_fact{item.id, id}}});
    return out;
}

result<action_list> plan_response(const session_state& s, assistant_message m,
                                  const std::vector<tool_call_id>& starting, bool settle,
                                  unix_ms at, std::vector<approval_requested> asking) {
    auto out = plan_append_assistant(s, std::move(m), at);
    if (!out) {
        return out;
    }
    // A copy: the list grows below.
    const assistant_message msg =
        std::get<assistant_message>(std::get<entry_appended>(out->front()).e.body);
    std::uint64_t next = s.transcript.size() + 2;
    std::set<std::string> started;
    // Paused, or with a compaction due, the loop's next step is neither to run the calls
    // (they start when it is) nor to mark the session idle.
    const bool goes_on = !s.paused && !should_compact(msg.usage, s.config);
    for (const auto& id : starting) {
        if (!goes_on) {
            break;
        }
        auto call = std::find_if(msg.tool_calls.begin(), msg.tool_calls.end(),
                                 [&](const tool_call& c) { return c.id == id; });
        if (call == msg.tool_calls.end()) {
            return errc::unknown_tool_call;
        }
        if (!started.insert(id.str()).second) {
            return errc::invalid_entry;
        }
        out->push_back(entry_appended{entry{entry_seq{next++}, at, tool_started{id, call->name}}});
    }
    for (auto& a : asking) {
        if (!goes_on) {
            break;
        }
        auto call = std::find_if(msg.tool_calls.begin(), msg.tool_calls.end(),
                                 [&](const tool_call& c) { return c.id == a.call; });
        if (call == msg.tool_calls.end()) {
            return errc::unknown_tool_call;
        }
        if (!started.insert(a.call.str()).second) {
            return errc::invalid_entry;  // asked twice, or started and asked
        }
        a.tool = call->name;
        a.arguments = call->arguments;
        out->push_back(entry_appended{entry{entry_seq{next++}, at, std::move(a)}});
    }
    if (settle && goes_on && msg.tool_calls.empty() && s.has_work && !s.has_pending()) {
        out->push_back(has_work_set{false});
    }
    return out;
}

result<action_list> plan_tool_steps(const session_state& s, std::vector<entry_body> steps,
                                    bool drain, unix_ms at) {
    action_list out;
    std::uint64_t next = s.transcript.size() + 1;
    std::map<std::string, tool_status, std::less<>> now;  // statuses the steps changed
    // A call of the newest response that has no result yet (as the steps before left it).
    struct open_call {
        const tool_call_state* call = nullptr;
        tool_status status = tool_status::not_started;
    };
    auto open = [&](const tool_call_id& id) -> result<open_call> {
        const tool_call_state* t = s.find_tool_call(id.str());
        if (t == nullptr) {
            return errc::unknown_tool_call;
        }
        auto it = now.find(id.str());
        const auto st = it != now.end() ? it->second : t->status;
        if (st == tool_status::finished) {
            return errc::tool_call_finished;
        }
        return open_call{t, st};
    };
    std::optional<bool> awaiting;  // needs_inference after the steps, once an entry decides it
    std::set<std::string> asking;  // calls the steps ask approval for
    for (auto& body : steps) {
        if (auto* started = std::get_if<tool_started>(&body)) {
            auto c = open(started->call);
            if (!c) {
                return c.error();
            }
            if (c->status == tool_status::started) {
                continue;  // an idempotent call run again: nothing more to record
            }
            if (awaits_decision(*c->call) || asking.contains(started->call.str())) {
                return errc::not_awaiting_approval;  // nothing of it runs before a decision
            }
            started->tool = c->call->call.name;
            now[started->call.str()] = tool_status::started;
        } else if (auto* asked = std::get_if<approval_requested>(&body)) {
            auto c = open(asked->call);
            if (!c) {
                return c.error();
            }
            if (c->call->approval != approval_status::none || asking.contains(asked->call.str())) {
                continue;  // asked before: nothing more to record
            }
            if (c->status != tool_status::not_started) {
                return errc::invalid_entry;  // a call asks before anything of it runs
            }
            asked->tool = c->call->call.name;
            asked->arguments = c->call->call.arguments;
            asking.insert(asked->call.str());
        } else if (auto* r = std::get_if<tool_result>(&body)) {
            auto c = open(r->call);
            if (!c) {
                return c.error();
            }
            if (c->status == tool_status::not_started && !r->is_error) {
                return errc::tool_call_not_started;
            }
            r->tool = c->call->call.name;
            r->output = sanitized(r->output);
            now[r->call.str()] = tool_status::finished;
        } else if (!std::holds_alternative<interruption>(body) &&
                   !std::holds_alternative<diagnostic>(body)) {
            return errc::invalid_entry;
        }
        if (const auto decided = awaits_response(body)) {
            awaiting = decided;
        }
        out.push_back(entry_appended{entry{entry_seq{next++}, at, std::move(body)}});
    }
    if (drain && !s.paused) {
        const bool input_awaits = awaiting ? *awaiting : needs_inference(s);
        auto drained =
            drain_from(s, input_awaits ? checkpoint::steer : checkpoint::follow_up, at, next);
        out.insert(out.end(), std::make_move_iterator(drained.begin()),
                   std::make_move_iterator(drained.end()));
    }
    return out;
}

bool has_unfinished_tool_calls(const session_state& s) {
    for (const auto& t : s.tool_calls) {
        if (t.status != tool_status::finished) {
            return true;
        }
    }
    return false;
}

checkpoint current_checkpoint(const session_state& s) {
    return needs_inference(s) ? checkpoint::steer : checkpoint::follow_up;
}

entry_seq compaction_due(const session_state& s) {
    for (auto it = s.transcript.rbegin(); it != s.transcript.rend(); ++it) {
        if (std::holds_alternative<compaction>(it->body)) {
            return {};
        }
        if (const auto* m = std::get_if<assistant_message>(&it->body)) {
            return should_compact(m->usage, s.config) ? it->id : entry_seq{};
        }
    }
    return {};
}

std::uint64_t assistant_count(const session_state& s) {
    std::uint64_t n = 0;
    for (const auto& e : s.transcript) {
        n += std::holds_alternative<assistant_message>(e.body) ? 1 : 0;
    }
    return n;
}

const timer* next_timer(const session_state& s) {
    const timer* best = nullptr;
    for (const auto& [id, t] : s.timers) {
        if (best == nullptr || t.due < best->due) {
            best = &t;
        }
    }
    return best;
}

}  // namespace wuhu::session
