#include "session/approval.hpp"

#include "session/text.hpp"

namespace wuhu::session {

namespace {

// The decision's entries, numbered from the next entry: the decision, then a refusal's result.
action_list decided_entries(const session_state& s, const approval_decided& d, unix_ms at) {
    std::uint64_t next = s.transcript.size() + 1;
    action_list out{entry_appended{entry{entry_seq{next++}, at, d}}};
    if (d.what != decision::approve) {
        out.push_back(entry_appended{entry{entry_seq{next}, at,
                                           tool_result{d.call, d.tool,
                                                       d.what == decision::respond ? d.message
                                                       : d.by_deadline ? expired_result()
                                                                       : rejected_result(d.message),
                                                       d.what == decision::reject}}});
    }
    if (!s.has_work) {
        out.push_back(has_work_set{true});  // the loop has a call to run, or a result to answer
    }
    return out;
}

}  // namespace

std::optional<tool_approval> approval_terms(const approval_settings& session,
                                            const std::string& tool, const tool_approval& file) {
    tool_approval terms = file;
    if (auto it = session.tools.find(tool); it != session.tools.end()) {
        terms.mode = it->second;
    } else if (auto all = session.tools.find("*"); all != session.tools.end()) {
        terms.mode = all->second;
    }
    if (terms.mode == approval_mode::never) {
        return std::nullopt;
    }
    if (session.deadline_ms != 0) {
        terms.deadline_ms = session.deadline_ms;
    }
    if (session.on_deadline) {
        terms.on_deadline = *session.on_deadline;
    }
    return terms;
}

approval_requested request_of(const tool_call& c, const tool_approval& terms, unix_ms at) {
    const std::int64_t span = static_cast<std::int64_t>(
        std::min<std::uint64_t>(terms.deadline_ms, max_approval_deadline_ms));
    return approval_requested{c.id, c.name, c.arguments,
                              unix_ms{terms.deadline_ms == 0 ? 0 : at.value + span},
                              terms.on_deadline};
}

bool awaits_decision(const tool_call_state& t) {
    return t.approval == approval_status::pending && t.status != tool_status::finished;
}

bool awaiting_approval(const session_state& s) {
    bool waits = false;
    for (const auto& t : s.tool_calls) {
        if (t.status == tool_status::finished) {
            continue;
        }
        if (!awaits_decision(t)) {
            return false;  // a call the loop can run
        }
        waits = true;
    }
    return waits;
}

const tool_call_state* next_deadline(const session_state& s) {
    const tool_call_state* best = nullptr;
    for (const auto& t : s.tool_calls) {
        if (awaits_decision(t) && t.deadline.value != 0 &&
            (best == nullptr || t.deadline < best->deadline)) {
            best = &t;
        }
    }
    return best;
}

result<decision_outcome> plan_decide(const session_state& s, decision_input in, unix_ms at) {
    const tool_call_state* t = s.find_tool_call(in.call.str());
    const bool decided = t == nullptr || t->approval == approval_status::approved ||
                         t->approval == approval_status::refused;
    if (decided) {
        // A call of an older response, or decided: the decision on record, if any (a call is
        // decided once), answers a retry however late.
        // The decision on record (the newest for this call: a call is decided once).
        for (auto e = s.transcript.rbegin(); e != s.transcript.rend(); ++e) {
            const auto* d = std::get_if<approval_decided>(&e->body);
            if (d != nullptr && d->call == in.call) {
                if (d->what != in.what) {
                    return errc::already_decided;
                }
                return decision_outcome{{}, *d, true};
            }
        }
        if (t == nullptr) {
            return errc::unknown_tool_call;
        }
    }
    if (!awaits_decision(*t)) {
        return errc::not_awaiting_approval;
    }
    approval_decided d{in.call, t->call.name, in.what, std::move(in.by), {}, {}, false};
    if (in.what == decision::approve) {
        d.arguments = sanitized(in.arguments.value_or(t->call.arguments));
    } else {
        d.message = sanitized(in.message);
    }
    auto actions = decided_entries(s, d, at);
    return decision_outcome{std::move(actions), std::move(d), false};
}

action_list plan_deadline(const session_state& s, const tool_call_id& call, unix_ms at) {
    const tool_call_state* t = s.find_tool_call(call.str());
    if (t == nullptr || !awaits_decision(*t) || t->deadline.value == 0 || at < t->deadline) {
        return {};
    }
    approval_decided d{call, t->call.name, t->on_deadline, system_author{}, {}, {}, true};
    if (d.what == decision::approve) {
        d.arguments = t->call.arguments;
    } else {
        d.what = decision::reject;
    }
    return decided_entries(s, d, at);
}

action_list plan_await_approval(const session_state& s) {
    if (!awaiting_approval(s) || !s.has_work || s.has_pending()) {
        return {};  // queued input keeps has_work (it waits for the results, then is taken)
    }
    return {has_work_set{false}};
}

std::string rejected_result(std::string_view message) {
    if (message.empty()) {
        return "A person rejected this call: it did not run.";
    }
    return "A person rejected this call: it did not run. They said: " + std::string(message);
}

std::string expired_result() {
    return "Nobody decided on this call before its deadline: it did not run.";
}

}  // namespace wuhu::session
