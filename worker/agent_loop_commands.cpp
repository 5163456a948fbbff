// AgentLoop's commands (worker/agent_loop.hpp): send(), an abort's request and its answer, and
// the plan of each command, made by the session's rules under the loop's section.
#include "worker/agent_loop.hpp"

#include "session/approval.hpp"
#include "session/loop_policy.hpp"
#include "session/overloaded.hpp"
#include "session/rules.hpp"
#include "session/text.hpp"

#include <algorithm>

namespace wuhu::worker {

namespace s = wuhu::session;

asio::awaitable<boost::system::result<command_reply>> agent_loop::send(command c) {
    if (auto* a = std::get_if<abort_command>(&c)) {
        // Not a store operation of its own: the loop records the interruption in its own
        // serialized step, and the reply waits for it.
        auto task = abort_turn(std::move(*a));
        co_return co_await std::move(task);
    }
    if (opts_->max_waiting_commands > 0 && commands_waiting_ >= opts_->max_waiting_commands) {
        co_return s::errc::overloaded;  // nothing is held for it: the client retries later
    }
    command_reply reply;
    bool wake = false;
    operation op = [this, &c, &reply, &wake] { return run_command(c, reply, wake); };
    ++commands_waiting_;
    auto task = persist(std::move(op));
    const auto ec = co_await std::move(task);
    --commands_waiting_;
    if (ec) {
        co_return ec;
    }
    if (wake) {
        wake_.notify();
    }
    co_return reply;
}

asio::awaitable<boost::system::result<command_reply>> agent_loop::abort_turn(abort_command a) {
    if (!loaded_ && !failed_) {
        // Loaded in the section (start() loads it first; a request can come before).
        auto guard = co_await section_.lock();
        if (!failed_) {
            if (auto ec = ensure_loaded()) {
                co_return ec;
            }
        }
    }
    if (failed_) {
        co_return failure_;
    }
    if (returned_) {
        co_return make_error_code(storage::errc::closed);  // nothing runs the turn any more
    }
    command_reply reply;
    if (!a.id.empty()) {
        if (auto seen = answered_abort(a.id)) {
            reply.aborted = *seen;
            reply.aborted.duplicate = true;
            co_return reply;
        }
    }
    if (!quiescent() || commands_waiting_ > 0 || s::awaiting_approval(state_)) {
        // A turn is in progress (or may be about to: work awaits the loop, or a command
        // received before this one is committing): the abort stops it where it is, and
        // answers once its interruption is durable. A loop that waits for work runs once to
        // find it (and settles the abort when it finds none).
        auto w = abort_.fire(std::move(a.reason), a.id);
        wake_.notify();
        co_await w->done.wait();
        if (!w->out) {
            co_return failure_ ? failure_ : make_error_code(storage::errc::closed);
        }
        reply.aborted = *w->out;
    }
    if (!a.id.empty()) {
        answered_aborts_.emplace_back(a.id, reply.aborted);
        if (answered_aborts_.size() > max_answered_aborts) {
            answered_aborts_.erase(answered_aborts_.begin());
        }
    }
    co_return reply;
}

std::optional<abort_outcome> agent_loop::answered_abort(const std::string& id) const {
    for (const auto& [seen, out] : answered_aborts_) {
        if (seen == id) {
            return out;
        }
    }
    // One that stopped a turn is in the transcript (a new owner answers it the same way).
    for (auto e = state_.transcript.rbegin(); e != state_.transcript.rend(); ++e) {
        if (const auto* i = std::get_if<s::interruption>(&e->body);
            i != nullptr && i->abort_id == id) {
            return abort_outcome{i->stopped, e->id, true};
        }
    }
    return std::nullopt;
}

asio::awaitable<bool> agent_loop::stop_turn(std::vector<s::entry_body> before,
                                            std::optional<s::tool_call_id> running) {
    const auto* p = abort_.pending_request();
    if (p == nullptr || failed_) {
        co_return false;
    }
    const s::abort_stage stopped =
        p->stopped != s::abort_stage::none ? p->stopped : s::abort_stage::step;
    s::interruption why{p->reason, s::interruption_kind::aborted, stopped, p->id};
    const std::function<bool(const s::tool_call_id&)> not_run = [this](const s::tool_call_id& id) {
        return started_here(id);
    };
    auto steps = s::stop_turn(state_, std::move(before), std::move(why),
                              running ? &*running : nullptr, not_run);
    auto task = record(s::tool_steps{std::move(steps), true});
    if (!co_await std::move(task)) {
        co_return false;
    }
    // The interruption: the newest one (the checkpoint's drained entries may follow it).
    s::entry_seq at;
    for (auto e = state_.transcript.rbegin(); e != state_.transcript.rend(); ++e) {
        if (std::holds_alternative<s::interruption>(e->body)) {
            at = e->id;
            break;
        }
    }
    abort_.settle(abort_outcome{stopped, at, false});
    co_return true;
}

agent_loop::written agent_loop::run_command(command& c, command_reply& reply, bool& wake) {
    const s::unix_ms now = clock_.now();
    written out;
    out.emit_unchanged = true;
    // A rule's refusal changes nothing (the store is not asked).
    auto take = [&](const boost::system::error_code& ec) { out.refused = ec; };
    std::visit(
        s::overloaded{
            [&](enqueue_command& x) {
                if (const auto full = s::lane_room(state_, x.in, opts_->lanes);
                    full != s::errc::ok) {
                    return take(full);
                }
                // Into a session whose loop waits for work, the item is materialized
                // at once when the loop's next step would be the checkpoint that
                // drains it: one commit instead of two (docs/agent-loop.md, "Fused
                // commits"); not past its budget, which keeps the input queued.
                const bool drain_now =
                    waiting_.load() && !s::exhausted(state_.usage, limits()) &&
                    s::next_step(state_, s::loop_position{compaction_tried_}, defaults_).kind ==
                        s::step_kind::checkpoint;
                auto r = drain_now ? s::plan_enqueue_and_drain(state_, std::move(x.in), now)
                                   : s::plan_enqueue(state_, std::move(x.in), now);
                if (!r) {
                    return take(r.error());
                }
                out.actions = std::move(r->actions);
                reply.id = r->id;
                reply.duplicate = r->duplicate;
                wake = !out.actions.empty();
            },
            [&](cancel_command& x) {
                auto r = s::plan_cancel(state_, x.in, x.id, now);
                if (!r) {
                    return take(r.error());
                }
                out.actions = std::move(r->actions);
                reply.canceled = r->canceled;
            },
            [&](configure_command& x) {
                auto next = x.update.applied_to(state_.config);
                if (!next) {
                    return take(next.error());
                }
                auto r = s::plan_set_settings(state_, *next);
                if (!r) {
                    return take(r.error());
                }
                out.actions = std::move(*r);
                reply.config = std::move(*next);
                // A new budget resumed a session its budget paused.
                wake = std::any_of(out.actions.begin(), out.actions.end(), [](const s::action& a) {
                    const auto* p = std::get_if<s::paused_set>(&a);
                    return p != nullptr && !p->value;
                });
            },
            [&](pause_command&) { out.actions = s::plan_set_paused(state_, true); },
            [&](resume_command&) {
                out.actions = s::plan_set_paused(state_, false);
                wake = true;
            },
            [&](decide_command& x) { out = decide(std::move(x.in), reply, wake); },
            [](abort_command&) {},
        },
        c);
    return out;
}

agent_loop::written agent_loop::decide(s::decision_input in, command_reply& reply, bool& wake) {
    written out;
    out.emit_unchanged = true;
    if (in.what == s::decision::approve && in.arguments) {
        // Edited arguments the tool's schema refuses are refused: the call waits on.
        const auto* call = state_.find_tool_call(in.call.str());
        const tools::tool* t = call != nullptr ? tools_.find(call->call.name, state_.config.tools,
                                                             tools_.tenant_of(id()))
                                               : nullptr;
        if (t != nullptr && s::awaits_decision(*call) &&
            tools::invalid_arguments(*t, *in.arguments)) {
            out.refused = s::errc::invalid_arguments;
            return out;
        }
    }
    // A person's text is held to the entry limit as a tool's output is (a reject's result
    // carries a sentence more: cut to leave room for it).
    if (opts_->max_entry_bytes > 0) {
        in.message = s::cut_to(
            std::move(in.message),
            opts_->max_entry_bytes - std::min<std::size_t>(opts_->max_entry_bytes / 2, 256),
            "message");
    }
    auto r = s::plan_decide(state_, std::move(in), clock_.now());
    if (!r) {
        out.refused = r.error();
        return out;
    }
    out.actions = std::move(r->actions);
    reply.decided = std::move(r->decided);
    reply.duplicate = r->duplicate;
    wake = !out.actions.empty();
    return out;
}

}  // namespace wuhu::worker
