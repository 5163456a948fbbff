#include "tests/support/random_ops.hpp"

#include "session/compaction.hpp"
#include "session/ledger.hpp"

#include <algorithm>
#include "tests/support/builders.hpp"

namespace wuhu::testing {

namespace {

std::string random_text(std::mt19937_64& rng) {
    static const char* words[] = {"hello", "steer", "please", "stop", "résumé",
                                  "日本",  "tool",  "again",  "why",  "🙂"};
    std::string out;
    int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
        if (i > 0) {
            out.push_back(' ');
        }
        out.append(words[rng() % std::size(words)]);
    }
    return out;
}

template <class T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& v) {
    return v[rng() % v.size()];
}

// A response with up to two tool calls (echo, clock) and some usage; with `starting`, about
// two in three of its calls go there.
assistant_message random_reply(std::mt19937_64& rng, const session_state& s,
                               std::vector<tool_call_id>* starting = nullptr) {
    std::vector<std::pair<std::string, std::string>> calls;
    int n = static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) {
        calls.emplace_back("c" + std::to_string(s.transcript.size()) + "_" + std::to_string(i),
                           rng() % 2 ? "echo" : "clock");
        if (starting != nullptr && rng() % 3) {
            starting->push_back(call_id(calls.back().first));
        }
    }
    auto out = reply(random_text(rng), calls);
    out.usage = {rng() % 1000, rng() % 100, rng() % 500, rng() % 50, 0};
    out.usage.reasoning = rng() % (out.usage.output + 1);
    out.cost = rng() % 100'000;  // the ledger's totals are folded and stored (issue 33)
    return out;
}

std::variant<interruption, diagnostic> marker_of(const random_op& op) {
    if (op.flag) {
        return billed_attempt(op.reply.usage, "m1", op.reply.cost, "failed");
    }
    return interruption{"aborted"};
}

}  // namespace

random_op next_op(std::mt19937_64& rng, const session_state& s, unix_ms at) {
    random_op op;
    op.at = at;
    // Ids from a small pool so that duplicates happen.
    auto fresh_id = [&] { return "q" + std::to_string(rng() % 40); };
    std::vector<std::string> pending_calls;
    for (const auto& t : s.tool_calls) {
        if (t.status != tool_status::finished) {
            pending_calls.push_back(t.call.id.str());
        }
    }
    switch (rng() % 24) {
        case 21:
        case 22:
            op.what = rng() % 3 ? random_op::decide : random_op::deadline;
            op.name = op.what == random_op::decide ? "decide" : "deadline";
            op.id = s.tool_calls.empty() ? "c0_0" : pick(rng, s.tool_calls).call.id.str();
            op.what_decided = static_cast<decision>(rng() % 3);
            op.flag = rng() % 2;  // approve: with edited arguments
            break;
        case 23:
            op.what = random_op::await_approval;
            op.name = "await_approval";
            break;
        case 18:
            op.what = random_op::enqueue_and_drain;
            op.name = "enqueue_and_drain";
            op.in = rng() % 3 ? user_in(rng() % 2 ? lane::steer : lane::follow_up, fresh_id(),
                                        random_text(rng), human("u1", "Ann"))
                              : system_in(fresh_id(), random_text(rng));
            break;
        case 19:
            op.what = random_op::response;
            op.name = "response";
            op.reply = random_reply(rng, s, &op.starting);
            op.flag = rng() % 2;  // settle
            for (const auto& c : op.reply.tool_calls) {
                if (std::find(op.starting.begin(), op.starting.end(), c.id) == op.starting.end() &&
                    rng() % 2) {
                    op.asking.push_back(request_of(
                        c,
                        tool_approval{approval_mode::always, rng() % 2 ? rng() % 1000 : 0,
                                      rng() % 2 ? decision::approve : decision::reject},
                        at));
                }
            }
            break;
        case 20: {
            op.what = random_op::tool_steps;
            op.name = "tool_steps";
            for (const auto& c : pending_calls) {
                switch (rng() % 5) {
                    case 0:
                        op.steps.push_back(tool_started{call_id(c), ""});
                        break;
                    case 1:
                        op.steps.push_back(result_of(c, random_text(rng), true));
                        break;
                    case 2:
                        op.steps.push_back(result_of(c, random_text(rng)));
                        break;
                    case 3:
                        op.steps.push_back(approval_requested{
                            call_id(c), "", "", unix_ms{at.value + 500}, decision::reject});
                        break;
                    default:
                        break;
                }
            }
            if (rng() % 4 == 0) {
                op.steps.push_back(interruption{"aborted"});
            }
            op.flag = rng() % 2;  // drain
            break;
        }
        case 16:
            op.what = random_op::schedule_timer;
            op.name = "schedule_timer";
            op.t.id = queue_item_id::parse("t" + std::to_string(rng() % 10)).value();
            op.t.due = unix_ms{at.value + static_cast<std::int64_t>(rng() % 1000)};
            break;
        case 17:
            if (rng() % 2) {
                op.what = random_op::fire_timer;
                op.name = "fire_timer";
            } else {
                op.what = random_op::cancel_timer;
                op.name = "cancel_timer";
            }
            op.id = "t" + std::to_string(rng() % 10);
            break;
        case 0:
        case 1:
        case 2:
            op.what = random_op::enqueue_user;
            op.name = "enqueue_user";
            op.in = user_in(rng() % 2 ? lane::steer : lane::follow_up, fresh_id(), random_text(rng),
                            rng() % 3 ? human("u" + std::to_string(rng() % 3), "Ann", "a@x.io")
                                      : author{unknown_author{}});
            break;
        case 3:
            op.what = random_op::enqueue_system;
            op.name = "enqueue_system";
            op.in = system_in(fresh_id(), random_text(rng));
            break;
        case 4: {
            op.what = random_op::cancel;
            op.name = "cancel";
            op.cancel_lane = all_lanes[rng() % 3];
            op.id = fresh_id();
            break;
        }
        case 5:
        case 6:
            op.what = random_op::drain_steer;
            op.name = "drain_steer";
            break;
        case 7:
            op.what = random_op::drain_follow_up;
            op.name = "drain_follow_up";
            break;
        case 8:
        case 9:
            op.what = random_op::assistant;
            op.name = "assistant";
            op.reply = random_reply(rng, s);
            break;
        case 10:
        case 11:
            op.what = random_op::tool_will;
            op.name = "tool_will";
            op.id = pending_calls.empty() ? "nope" : pick(rng, pending_calls);
            break;
        case 12:
            op.what = random_op::tool_did;
            op.name = "tool_did";
            op.result = result_of(pending_calls.empty() ? "nope" : pick(rng, pending_calls),
                                  random_text(rng), rng() % 4 == 0);
            break;
        case 13: {
            op.what = random_op::compact;
            op.name = "compact";
            session_state probe = s;
            probe.config.keep_recent_tokens = 1 + rng() % 40;
            auto plan = plan_compaction(probe, anthropic_roles);
            op.comp.summary = "summary " + random_text(rng);
            op.comp.first_kept = plan ? plan->first_kept : entry_seq{s.transcript.size() + 7};
            op.comp.tokens_before = plan ? plan->tokens_before : 0;
            if (rng() % 2) {  // what the summary's inference used (issue 33's ledger)
                const auto used = random_reply(rng, s);
                op.comp.usage = used.usage;
                op.comp.model = "m" + std::to_string(rng() % 3);
                op.comp.cost = used.cost;
            }
            break;
        }
        case 14:
            if (rng() % 2) {
                op.what = random_op::marker;
                op.name = "marker";
                op.flag = rng() % 2;  // a billed attempt (issue 33's ledger), else an abort's
                op.reply = random_reply(rng, s);
            } else {
                op.what = random_op::configure;
                op.name = "configure";
                op.config = s.config;
                op.config.system_prompt = random_text(rng);
                op.config.tools = {"echo"};
                if (rng() % 2) {
                    op.config.approval = approval_settings{
                        {{"echo", approval_mode::always}, {"*", approval_mode::never}},
                        rng() % 5000,
                        rng() % 2 ? std::optional(decision::approve) : std::nullopt};
                }
            }
            break;
        default:
            if (rng() % 2) {
                op.what = random_op::mark_idle;
                op.name = "mark_idle";
            } else {
                op.what = random_op::pause;
                op.name = "pause";
                op.flag = rng() % 2;
            }
            break;
    }
    return op;
}

result<action_list> run_pure(const random_op& op, const session_state& s) {
    switch (op.what) {
        case random_op::enqueue_user:
        case random_op::enqueue_system: {
            auto out = plan_enqueue(s, op.in, op.at);
            if (!out) {
                return out.error();
            }
            return out->actions;
        }
        case random_op::cancel: {
            auto id = queue_item_id::parse(op.id).value();
            auto out = plan_cancel(s, op.cancel_lane, id, op.at);
            if (!out) {
                return out.error();
            }
            return out->actions;
        }
        case random_op::drain_steer:
            return plan_drain(s, checkpoint::steer, op.at);
        case random_op::drain_follow_up:
            return plan_drain(s, checkpoint::follow_up, op.at);
        case random_op::assistant:
            return plan_append_assistant(s, op.reply, op.at);
        case random_op::tool_will:
            return plan_tool_will_execute(s, tool_call_id::parse(op.id).value(), op.at);
        case random_op::tool_did:
            return plan_tool_did_execute(s, op.result, op.at);
        case random_op::compact:
            return plan_append_compaction(s, op.comp, op.at);
        case random_op::marker:
            return plan_append_marker(s, marker_of(op), op.at);
        case random_op::configure:
            return plan_set_settings(s, op.config);
        case random_op::mark_idle:
            return plan_mark_idle(s);
        case random_op::pause:
            return plan_set_paused(s, op.flag);
        case random_op::schedule_timer:
            return plan_schedule_timer(s, op.t, op.at);
        case random_op::fire_timer:
            return plan_fire_timer(s, queue_item_id::parse(op.id).value(), op.at);
        case random_op::cancel_timer: {
            auto out = plan_cancel_timer(s, queue_item_id::parse(op.id).value(), op.at);
            if (!out) {
                return out.error();
            }
            return out->actions;
        }
        case random_op::enqueue_and_drain: {
            auto out = plan_enqueue_and_drain(s, op.in, op.at);
            if (!out) {
                return out.error();
            }
            return out->actions;
        }
        case random_op::response:
            return plan_response(s, op.reply, op.starting, op.flag, op.at, op.asking);
        case random_op::tool_steps:
            return plan_tool_steps(s, op.steps, op.flag, op.at);
        case random_op::decide: {
            auto out = plan_decide(
                s,
                decision_input{
                    call_id(op.id), op.what_decided, human("u2", "Bea"),
                    op.flag ? std::optional<std::string>(R"({"text":"edited"})") : std::nullopt,
                    op.flag ? "" : "by hand"},
                op.at);
            if (!out) {
                return out.error();
            }
            return out->actions;
        }
        case random_op::deadline:
            return plan_deadline(s, call_id(op.id), unix_ms{op.at.value + 1000});
        case random_op::await_approval:
            return plan_await_approval(s);
    }
    return action_list{};
}

boost::system::result<action_list> run_store(const random_op& op, storage::session_log& log,
                                             const session_state& s) {
    switch (op.what) {
        case random_op::enqueue_user:
        case random_op::enqueue_system: {
            auto out = log.enqueue(s, op.in, op.at);
            if (!out) {
                return out.error();
            }
            return out->actions;
        }
        case random_op::cancel: {
            auto out = log.cancel(s, op.cancel_lane, queue_item_id::parse(op.id).value(), op.at);
            if (!out) {
                return out.error();
            }
            return out->actions;
        }
        case random_op::drain_steer:
            return log.drain(s, checkpoint::steer, op.at);
        case random_op::drain_follow_up:
            return log.drain(s, checkpoint::follow_up, op.at);
        case random_op::assistant:
            return log.append_assistant(s, op.reply, op.at);
        case random_op::tool_will:
            return log.tool_will_execute(s, tool_call_id::parse(op.id).value(), op.at);
        case random_op::tool_did:
            return log.tool_did_execute(s, op.result, op.at);
        case random_op::compact:
            return log.append_compaction(s, op.comp, op.at);
        case random_op::marker:
            return log.append_marker(s, marker_of(op), op.at);
        case random_op::configure:
            return log.set_settings(s, op.config);
        case random_op::mark_idle:
            return log.mark_idle(s);
        case random_op::pause:
            return log.set_paused(s, op.flag);
        case random_op::schedule_timer:
            return log.schedule_timer(s, op.t, op.at);
        case random_op::fire_timer:
            return log.fire_timer(s, queue_item_id::parse(op.id).value(), op.at);
        case random_op::cancel_timer: {
            auto out = log.cancel(s, lane::system, queue_item_id::parse(op.id).value(), op.at);
            if (!out) {
                return out.error();
            }
            return out->actions;
        }
        case random_op::enqueue_and_drain: {
            auto out = log.enqueue_and_drain(s, op.in, op.at);
            if (!out) {
                return out.error();
            }
            return out->actions;
        }
        case random_op::response:
            if (!op.asking.empty()) {
                break;  // planned, then committed (below)
            }
            return log.append_response(s, op.reply, op.starting, op.flag, op.at);
        case random_op::tool_steps:
            return log.tool_steps(s, op.steps, op.flag, op.at);
        case random_op::decide:
        case random_op::deadline:
        case random_op::await_approval:
            break;
    }
    // What the loop does: the rules plan, the store commits the actions.
    auto planned = run_pure(op, s);
    if (!planned) {
        return planned.error();
    }
    if (auto r = log.commit(s, *planned); !r) {
        return r.error();
    }
    return planned;
}

}  // namespace wuhu::testing
