#include "worker/agent_loop.hpp"

#include "session/compaction.hpp"
#include "session/loop_policy.hpp"
#include "session/overloaded.hpp"
#include "session/reducer.hpp"
#include "worker/offload.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace wuhu::worker {

using namespace boost::asio::experimental::awaitable_operators;
namespace s = wuhu::session;

namespace {

bool is_storage_error(const boost::system::error_code& ec) {
    return ec.category() == storage::storage_category();
}

// Wrappers that turn a throwing provider or tool into an error value (named coroutines with
// by-value parameters, never lambdas, inside co_await expressions: see DEPENDENCIES.md G1).
// g++ 12 also mis-handles `co_return T{co_await f()}`: the result referred to f's freed frame
// (ASan caught it). Await into a named local first, then return it.
// The outcomes are wrapped in structs because the awaitable operators flatten variants.
struct inferred {
    inference_outcome outcome;
};
struct summarized {
    summary_outcome outcome;
};

asio::awaitable<inferred> guarded_infer(provider& p, inference_request req, stream_sink& sink) {
    try {
        inference_outcome out = co_await p.infer(std::move(req), sink);
        co_return inferred{std::move(out)};
    } catch (const std::exception& e) {
        co_return inferred{provider_error{provider_error_kind::fatal, e.what()}};
    }
}

asio::awaitable<summarized> guarded_summarize(provider& p, std::vector<s::llm_message> segment,
                                              std::uint64_t step) {
    try {
        summary_outcome out = co_await p.summarize(std::move(segment), step);
        co_return summarized{std::move(out)};
    } catch (const std::exception& e) {
        co_return summarized{provider_error{provider_error_kind::fatal, e.what()}};
    }
}

asio::awaitable<tool_output> guarded_execute(tool& t, std::string args, tool_call_context ctx) {
    try {
        tool_output out = co_await t.execute(std::move(args), ctx);
        co_return out;
    } catch (const std::exception& e) {
        co_return tool_output{std::string("tool failed: ") + e.what(), true};
    }
}

}  // namespace

class agent_loop::sink final : public stream_sink {
  public:
    explicit sink(agent_loop& l) : loop_(l) {}
    void text(std::string_view delta) override { loop_.on_text(delta); }
    void tool_call(const tool_call_delta& d) override { loop_.on_tool_call(d); }

  private:
    agent_loop& loop_;
};

struct agent_loop::attempt {
    enum kind_t { ok, error, aborted } kind = error;
    s::assistant_message message;
    provider_error err;
};

agent_loop::agent_loop(asio::any_io_executor ex, std::unique_ptr<storage::session_log> log,
                       provider& p, const tool_registry& tools, clock& clk, loop_options opts)
    : ex_(ex),
      log_(std::move(log)),
      provider_(p),
      tools_(tools),
      clock_(clk),
      opts_(opts),
      sink_(std::make_unique<sink>(*this)),
      hub_(std::make_shared<event_hub>()),
      section_(ex),
      wake_(ex),
      timers_changed_(ex),
      abort_(ex),
      rng_(opts.jitter_seed != 0 ? opts.jitter_seed : std::random_device{}()) {}

agent_loop::~agent_loop() = default;

bool agent_loop::quiescent() const {
    return loaded_ && !in_flight_ && loop_ == s::loop_state::idle &&
           (!state_.has_work || state_.paused || failed_);
}

observation agent_loop::observe(event_sink sink) {
    return observation{state_, loop_, inflight_, subscription(hub_, hub_->add(std::move(sink)))};
}

// ------------------------------------------------------------------------------ the section

boost::system::error_code agent_loop::ensure_loaded() {
    if (loaded_) {
        return {};
    }
    auto st = log_->load();
    if (!st) {
        close(st.error());
        return st.error();
    }
    preload(std::move(*st));
    return {};
}

boost::system::error_code agent_loop::load() {
    return failed_ ? failure_ : ensure_loaded();
}

void agent_loop::preload(s::session_state loaded) {
    state_ = std::move(loaded);
    step_ = s::assistant_count(state_);
    loaded_ = true;
}

void agent_loop::close(boost::system::error_code why) {
    if (failed_) {
        return;
    }
    failed_ = true;
    failure_ = why;
    wake_.notify();
    abort_.notify();
    timers_changed_.notify();
}

asio::awaitable<void> agent_loop::close_after_pending(boost::system::error_code why) {
    auto guard = co_await section_.lock();
    close(why);
}

asio::awaitable<boost::system::error_code> agent_loop::persist(operation op) {
    auto guard = co_await section_.lock();
    if (failed_) {
        co_return failure_;
    }
    if (auto ec = ensure_loaded()) {
        co_return ec;
    }
    // The operation runs on the store executor (when there is one): a commit's blocking IO
    // does not hold up the other sessions of this executor. The section stays held, so this
    // session's state is read there and changed only here, after the commit.
    auto task = run_on<written>(opts_.store_executor, std::move(op));
    written w = co_await std::move(task);
    if (w.refused) {
        co_return w.refused;
    }
    if (w.failed) {
        // Persist first: a store error or an unknown outcome is fatal for this session. Do not
        // guess what was written; stop writing and let the next owner rebuild from the store.
        close(w.failed);
        co_return w.failed;
    }
    if (!w.actions.empty()) {
        apply_committed(w.actions);
    }
    co_return boost::system::error_code{};
}

asio::awaitable<bool> agent_loop::record(transition t) {
    // The loop's own transitions are never refused by the rules: any error fails the session.
    operation op = [this, t = std::move(t)]() mutable -> written {
        auto r = write(*log_, state_, std::move(t), clock_.now());
        return r ? written{{}, {}, std::move(*r)} : written{{}, r.error(), {}};
    };
    auto task = persist(std::move(op));
    const auto ec = co_await std::move(task);
    co_return !ec;
}

void agent_loop::apply_committed(const s::action_list& actions) {
    const s::version_vector from = state_.version();
    s::apply_actions(actions, state_);
    for (const auto& a : actions) {
        if (std::holds_alternative<s::timer_scheduled>(a)) {
            timers_changed_.notify();
        } else if (const auto* e = std::get_if<s::entry_appended>(&a);
                   e != nullptr && std::holds_alternative<s::assistant_message>(e->e.body)) {
            ++step_;
        }
    }
    auto p = s::patch_of(from, actions, state_, loop_);
    if (p.state) {
        stamp(*p.state);
    }
    hub_->emit(committed_event{actions, std::move(p)});
}

void agent_loop::stamp(s::status& st) {
    // Monotonic within this process (a reloaded loop of the same epoch goes on from where the
    // clock is); the epoch orders the statuses of different owners.
    const auto now =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now().time_since_epoch())
                                       .count());
    status_seq_ = std::max(status_seq_ + 1, now);
    st.epoch = log_->epoch().value;
    st.seq = status_seq_;
}

s::status agent_loop::status_now() {
    s::status st{loop_, state_.paused, state_.has_work};
    stamp(st);
    return st;
}

void agent_loop::set_loop(s::loop_state to) {
    if (loop_ == to) {
        return;
    }
    auto from = std::exchange(loop_, to);
    auto p = s::status_patch(state_, to);
    stamp(*p.state);
    hub_->emit(state_event{from, to, std::move(p)});
}

void agent_loop::on_text(std::string_view delta) {
    if (!inflight_) {
        return;  // late delta of a cancelled attempt
    }
    inflight_->text.append(delta);
    hub_->emit(
        stream_delta_event{inflight_->step, ++inflight_->deltas, std::string(delta), std::nullopt});
}

void agent_loop::on_tool_call(const tool_call_delta& d) {
    if (!inflight_) {
        return;
    }
    inflight_->tool_calls.push_back(d);
    hub_->emit(stream_delta_event{inflight_->step, ++inflight_->deltas, {}, d});
}

double agent_loop::jitter() {
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
}

// ------------------------------------------------------------------------------ commands

asio::awaitable<boost::system::result<command_reply>> agent_loop::send(command c) {
    if (const auto* a = std::get_if<abort_command>(&c)) {
        // Not a store operation: abort stops what is in flight, and the loop records the
        // interruption in its own serialized step.
        command_reply reply;
        if (in_flight_ && !failed_) {
            abort_reason_ = a->reason;
            abort_.notify();
            reply.aborted = true;
        }
        co_return reply;
    }
    command_reply reply;
    bool wake = false;
    operation op = [this, &c, &reply, &wake] { return run_command(c, reply, wake); };
    auto task = persist(std::move(op));
    const auto ec = co_await std::move(task);
    if (ec) {
        co_return ec;
    }
    if (wake) {
        wake_.notify();
    }
    co_return reply;
}

agent_loop::written agent_loop::run_command(command& c, command_reply& reply, bool& wake) {
    const s::unix_ms now = clock_.now();
    written out;
    // A rule's refusal changes nothing; a store error fails the session.
    auto take = [&](const boost::system::error_code& ec) {
        (is_storage_error(ec) ? out.failed : out.refused) = ec;
    };
    std::visit(s::overloaded{
                   [&](enqueue_command& x) {
                       auto r = log_->enqueue(state_, std::move(x.in), now);
                       if (!r) {
                           return take(r.error());
                       }
                       out.actions = std::move(r->actions);
                       reply.id = r->id;
                       reply.duplicate = r->duplicate;
                       wake = !out.actions.empty();
                   },
                   [&](cancel_command& x) {
                       auto r = log_->cancel(state_, x.in, x.id, now);
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
                       auto r = log_->set_settings(state_, *next);
                       if (!r) {
                           return take(r.error());
                       }
                       out.actions = std::move(*r);
                       reply.config = std::move(*next);
                   },
                   [&](pause_command&) {
                       auto r = log_->set_paused(state_, true);
                       if (!r) {
                           return take(r.error());
                       }
                       out.actions = std::move(*r);
                   },
                   [&](resume_command&) {
                       auto r = log_->set_paused(state_, false);
                       if (!r) {
                           return take(r.error());
                       }
                       out.actions = std::move(*r);
                       wake = true;
                   },
                   [](abort_command&) {},
               },
               c);
    return out;
}

// ------------------------------------------------------------------------------ lifecycle

agent_loop::written agent_loop::recover_orphan() {
    // Takeover terminalizes orphans: input that awaits a response when the session is loaded
    // means the previous owner stopped during (or just before) an inference. Record it, so no
    // client waits for a message that will never end; the normal sequence then redoes the turn.
    if (!s::needs_inference(state_) || s::has_unfinished_tool_calls(state_)) {
        return {};
    }
    auto r = write(*log_, state_,
                   s::interruption{"the previous owner stopped while this turn was in progress",
                                   s::interruption_kind::owner_lost},
                   clock_.now());
    return r ? written{{}, {}, std::move(*r)} : written{{}, r.error(), {}};
}

asio::awaitable<void> agent_loop::start() {
    // Loads the session and terminalizes an orphaned turn before any command runs.
    operation recover = [this] { return recover_orphan(); };
    auto recovering = persist(std::move(recover));
    const auto ec = co_await std::move(recovering);
    if (!ec) {
        if (state_.has_work) {
            wake_.notify();
        }
        try {
            co_await (work_loop() && timer_loop());
        } catch (const asio::multiple_exceptions& e) {
            // Both children were cancelled: report the first (operation_aborted) as one.
            std::rethrow_exception(e.first_exception());
        }
    }
    if (failed_) {
        set_loop(s::loop_state::idle);
    }
}

// Both children return when the session fails (close() wakes every wait), so `&&` completes.
asio::awaitable<void> agent_loop::work_loop() {
    while (!failed_) {
        co_await wake_.wait();
        if (!failed_) {
            co_await run_until_idle();
        }
    }
}

asio::awaitable<void> agent_loop::timer_loop() {
    while (!failed_) {
        const s::timer* next = s::next_timer(state_);
        if (next == nullptr) {
            co_await timers_changed_.wait();
            continue;
        }
        const s::queue_item_id id = next->id;
        const s::unix_ms due = next->due;
        timers_changed_.reset();
        if (due > clock_.now()) {
            auto r = co_await (clock_.sleep_until(due) || timers_changed_.wait());
            if (r.index() == 1) {
                continue;  // a timer was added (or the loop closed): maybe an earlier one
            }
        }
        auto firing = record(fire_timer{id});
        if (co_await std::move(firing)) {
            wake_.notify();
        }
    }
}

asio::awaitable<bool> agent_loop::schedule_timer(s::timer t) {
    auto task = record(std::move(t));
    const bool ok = co_await std::move(task);
    co_return ok;
}

// ------------------------------------------------------------------------------ the loop

asio::awaitable<void> agent_loop::run_until_idle() {
    s::loop_position at{compaction_tried_};
    while (!failed_) {
        const s::loop_step step = s::next_step(state_, at);
        switch (step.kind) {
            case s::step_kind::pause:
            case s::step_kind::idle:
                set_loop(s::loop_state::idle);
                co_return;
            case s::step_kind::compact: {
                auto task = compact(step.upto);
                co_await std::move(task);
                break;
            }
            case s::step_kind::run_tools:
                set_loop(s::loop_state::executing_tools);
                co_await run_tools();
                break;
            case s::step_kind::checkpoint: {
                set_loop(s::loop_state::preparing);
                auto task = record(take_checkpoint{});
                co_await std::move(task);
                break;
            }
            case s::step_kind::mark_idle: {
                auto task = record(mark_idle{});
                co_await std::move(task);
                break;
            }
            case s::step_kind::infer:
                co_await infer_turn();
                break;
        }
        at = s::after(step, at);
        compaction_tried_ = at.compaction_tried;
    }
}

asio::awaitable<void> agent_loop::infer_turn() {
    // Eager draining's hard error: input that cannot fit even after compaction is reported,
    // never staged.
    if (!fits()) {
        co_await compact(s::entry_seq{});
        if (!fits()) {
            auto task = record(s::input_too_large());
            co_await std::move(task);
            co_return;
        }
    }
    s::inference_attempts attempts;
    for (;;) {
        set_loop(s::loop_state::inferring);
        attempt a = co_await infer_once();
        if (failed_) {
            co_return;  // closed while inferring: nothing of this attempt is ours to write
        }
        if (a.kind == attempt::aborted) {
            auto task = record(s::interruption{abort_reason_, s::interruption_kind::aborted});
            co_await std::move(task);
            co_return;
        }
        if (a.kind == attempt::ok) {
            auto task = record(std::move(a.message));
            if (co_await std::move(task)) {
                const std::uint64_t step = inflight_ ? inflight_->step : step_;
                inflight_.reset();
                hub_->emit(stream_ended_event{step, true});
            }
            co_return;  // compaction, if due, is the next step of run_until_idle
        }
        // The jitter is drawn only for a transient error, so a seeded loop's waits do not
        // depend on the other errors of the turn.
        const double unit = a.err.kind == provider_error_kind::transient ? jitter() : 0.0;
        auto decision = s::on_inference_error(a.err, attempts, opts_.retry, unit);
        if (const auto* wait = std::get_if<s::retry_after>(&decision)) {
            if (co_await abortable_sleep(wait->wait)) {
                auto task = record(s::interruption{abort_reason_, s::interruption_kind::aborted});
                co_await std::move(task);
                co_return;
            }
            continue;
        }
        if (std::holds_alternative<s::compact_then_retry>(decision)) {
            if (co_await compact(s::entry_seq{})) {
                continue;
            }
            decision = s::on_inference_error(a.err, attempts, opts_.retry, unit);
        }
        auto task = record(std::get<s::give_up>(std::move(decision)).report);
        co_await std::move(task);
        co_return;
    }
}

bool agent_loop::fits() {
    // The projection is kept for the request that follows, so it is built once per attempt.
    context_ = s::project_context(state_, opts_.roles);
    context_version_ = state_.version();
    return s::check_fits(context_, state_.config).has_value();
}

asio::awaitable<agent_loop::attempt> agent_loop::infer_once() {
    if (context_version_ != state_.version() || context_.empty()) {
        context_ = s::project_context(state_, opts_.roles);
    }
    inference_request req{std::move(context_), tools_.specs(state_.config.tools),
                          state_.config.model, step_};
    context_.clear();
    abort_.reset();
    in_flight_ = true;
    inflight_ = inflight_message{step_, {}, {}, 0};
    hub_->emit(stream_began_event{step_});
    auto r = co_await (guarded_infer(provider_, std::move(req), *sink_) || abort_.wait() ||
                       clock_.sleep(opts_.inference_timeout));
    in_flight_ = false;
    attempt a;
    if (failed_) {
        co_return a;  // the caller returns
    }
    switch (r.index()) {
        case 0: {
            auto& out = std::get<0>(r).outcome;
            if (auto* m = std::get_if<s::assistant_message>(&out)) {
                a.kind = attempt::ok;  // inflight_ stays until the entry is committed
                a.message = std::move(*m);
                co_return a;
            }
            a.err = std::get<provider_error>(out);
            break;
        }
        case 1:
            a.kind = attempt::aborted;
            break;
        default:
            a.err = {provider_error_kind::transient,
                     "inference timed out after " +
                         std::to_string(opts_.inference_timeout.count()) + " ms"};
            break;
    }
    const std::uint64_t step = inflight_->step;
    inflight_.reset();
    hub_->emit(stream_ended_event{step, false});
    co_return a;
}

asio::awaitable<bool> agent_loop::abortable_sleep(milliseconds d) {
    abort_.reset();
    in_flight_ = true;
    auto r = co_await (clock_.sleep(d) || abort_.wait());
    in_flight_ = false;
    co_return r.index() == 1 || failed_;
}

asio::awaitable<bool> agent_loop::compact(s::entry_seq upto) {
    auto plan = s::plan_compaction(state_, opts_.roles, upto);
    if (!plan) {
        co_return false;
    }
    set_loop(s::loop_state::compacting);
    auto r = co_await (guarded_summarize(provider_, plan->segment, step_) ||
                       clock_.sleep(opts_.summary_timeout));
    if (r.index() != 0 || std::holds_alternative<provider_error>(std::get<0>(r).outcome)) {
        co_return false;  // the next response triggers compaction again
    }
    s::compaction c{std::get<std::string>(std::get<0>(r).outcome), plan->first_kept,
                    plan->tokens_before};
    auto task = record(std::move(c));
    const bool ok = co_await std::move(task);
    co_return ok;
}

asio::awaitable<bool> agent_loop::close_call(s::tool_call call, std::string output) {
    auto task = record(s::tool_result{call.id, call.name, std::move(output), true});
    const bool ok = co_await std::move(task);
    co_return ok;
}

asio::awaitable<void> agent_loop::run_tools() {
    // The calls of one response run in order.
    for (std::size_t i = 0; i < state_.tool_calls.size(); ++i) {
        const s::tool_call_state tc = state_.tool_calls[i];  // a copy: state_ changes below
        tool* t = tools_.find(tc.call.name, state_.config.tools);
        const auto action = s::next_tool_action(tc, t != nullptr, t != nullptr && t->idempotent());
        if (action == s::tool_action::skip) {
            continue;
        }
        if (action != s::tool_action::run) {
            // An unknown tool; or recovery of a call that may have run, where running it again
            // could repeat its effect.
            auto closing = close_call(tc.call, action == s::tool_action::unknown
                                                   ? s::unknown_tool_result(tc.call.name)
                                                   : s::interrupted_tool_result());
            if (!co_await std::move(closing)) {
                co_return;
            }
            continue;
        }
        if (tc.status == s::tool_status::not_started) {
            auto task = record(tool_started{tc.call.id});
            if (!co_await std::move(task)) {
                co_return;
            }
        }
        abort_.reset();
        in_flight_ = true;
        tool_call_context ctx{tc.call.id, *this};
        auto r = co_await (guarded_execute(*t, tc.call.arguments, ctx) || abort_.wait() ||
                           clock_.sleep(opts_.tool_timeout));
        in_flight_ = false;
        if (r.index() == 1) {
            // Abort: this call and the ones after it get error results, then the interruption.
            auto closing = close_call(tc.call, "aborted: " + abort_reason_);
            if (!co_await std::move(closing)) {
                co_return;
            }
            for (std::size_t j = i + 1; j < state_.tool_calls.size(); ++j) {
                auto skipping = close_call(state_.tool_calls[j].call, "not run: the turn was aborted");
                if (!co_await std::move(skipping)) {
                    co_return;
                }
            }
            auto task = record(s::interruption{abort_reason_, s::interruption_kind::aborted});
            co_await std::move(task);
            co_return;
        }
        tool_output out = r.index() == 0
                              ? std::get<0>(std::move(r))
                              : tool_output{"timed out after " +
                                                std::to_string(opts_.tool_timeout.count()) + " ms",
                                            true};
        auto task = record(s::tool_result{tc.call.id, tc.call.name, std::move(out.text),
                                          out.is_error});
        if (!co_await std::move(task)) {
            co_return;
        }
    }
}

}  // namespace wuhu::worker
