#include "worker/agent_loop.hpp"

#include "session/compaction.hpp"
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

// Thrown inside the loop when the session has failed; start() returns on it.
struct session_failure {};

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

void agent_loop::ensure_loaded() {
    if (loaded_) {
        return;
    }
    auto st = log_->load();
    if (!st) {
        fail(st.error());
    }
    state_ = std::move(*st);
    step_ = s::assistant_count(state_);
    loaded_ = true;
}

void agent_loop::fail(boost::system::error_code ec) {
    // Persist first: a store error or an unknown outcome is fatal for this session. Do not
    // guess what was written; stop writing and let the next owner rebuild from the store.
    close(ec);
    throw session_failure{};
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

void agent_loop::preload(s::session_state loaded) {
    state_ = std::move(loaded);
    step_ = s::assistant_count(state_);
    loaded_ = true;
}

void agent_loop::must(storage::result<s::action_list> r) {
    if (!r) {
        fail(r.error());  // the loop's own transitions are never refused by the rules
    }
    if (!r->empty()) {
        apply_committed(*r);
    }
}

boost::system::error_code agent_loop::command_result(const boost::system::error_code& ec) {
    if (is_storage_error(ec)) {
        try {
            fail(ec);
        } catch (const session_failure&) {
        }
    }
    return ec;
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
    auto guard = co_await section_.lock();
    if (failed_) {
        co_return failure_;
    }
    try {
        ensure_loaded();
    } catch (const session_failure&) {
        co_return failure_;
    }
    const s::unix_ms now = clock_.now();
    // The store operation runs on the store executor (when there is one): a commit's blocking
    // IO does not hold up the other sessions of this executor. The section stays held, so this
    // session's state is read there and changed only here, after the commit.
    auto op = [this, &c, now]() -> command_effect {
        command_effect out;
        std::visit(s::overloaded{
                       [&](enqueue_command& x) {
                           auto r = log_->enqueue(state_, std::move(x.in), now);
                           if (!r) {
                               out.ec = r.error();
                               return;
                           }
                           out.actions = std::move(r->actions);
                           out.reply.id = r->id;
                           out.reply.duplicate = r->duplicate;
                           out.wake = !out.actions.empty();
                       },
                       [&](cancel_command& x) {
                           auto r = log_->cancel(state_, x.in, x.id, now);
                           if (!r) {
                               out.ec = r.error();
                               return;
                           }
                           out.actions = std::move(r->actions);
                           out.reply.canceled = r->canceled;
                       },
                       [&](configure_command& x) {
                           auto next = x.update.applied_to(state_.config);
                           if (!next) {
                               out.refused = next.error();
                               return;
                           }
                           auto r = log_->set_settings(state_, std::move(*next));
                           if (!r) {
                               out.ec = r.error();
                               return;
                           }
                           out.actions = std::move(*r);
                       },
                       [&](pause_command&) {
                           auto r = log_->set_paused(state_, true);
                           if (!r) {
                               out.ec = r.error();
                               return;
                           }
                           out.actions = std::move(*r);
                       },
                       [&](resume_command&) {
                           auto r = log_->set_paused(state_, false);
                           if (!r) {
                               out.ec = r.error();
                               return;
                           }
                           out.actions = std::move(*r);
                           out.wake = true;
                       },
                       [](abort_command&) {},
                   },
                   c);
        return out;
    };
    auto stored = run_on<command_effect>(opts_.store_executor, std::move(op));
    command_effect effect = co_await std::move(stored);
    if (effect.refused) {
        co_return effect.refused;
    }
    if (effect.ec) {
        co_return command_result(effect.ec);
    }
    apply_committed(effect.actions);
    command_reply reply = std::move(effect.reply);
    if (std::holds_alternative<configure_command>(c)) {
        reply.config = state_.config;
    }
    if (effect.wake) {
        wake_.notify();
    }
    co_return reply;
}

asio::awaitable<void> agent_loop::commit(std::function<storage::result<s::action_list>()> op) {
    auto task = run_on<storage::result<s::action_list>>(opts_.store_executor, std::move(op));
    auto r = co_await std::move(task);
    must(std::move(r));
}

boost::system::error_code agent_loop::load() {
    try {
        ensure_loaded();
    } catch (const session_failure&) {
        return failure_;
    }
    return {};
}

// ------------------------------------------------------------------------------ lifecycle

asio::awaitable<void> agent_loop::recover_orphan() {
    // Takeover terminalizes orphans: input that awaits a response when the session is loaded
    // means the previous owner stopped during (or just before) an inference. Record it, so no
    // client waits for a message that will never end; the normal sequence then redoes the turn.
    if (s::needs_inference(state_) && !s::has_unfinished_tool_calls(state_)) {
        auto marked = append_marker_locked(
            s::interruption{"the previous owner stopped while this turn was in progress",
                            s::interruption_kind::owner_lost});
        co_await std::move(marked);
    }
}

asio::awaitable<void> agent_loop::start() {
    try {
        {
            auto guard = co_await section_.lock();
            ensure_loaded();
            co_await recover_orphan();
        }
        if (state_.has_work) {
            wake_.notify();
        }
        co_await (work_loop() && timer_loop());
    } catch (const session_failure&) {
    } catch (const asio::multiple_exceptions& e) {
        // Both children were cancelled: report the first (operation_aborted) as one.
        std::rethrow_exception(e.first_exception());
    }
    if (failed_) {
        set_loop(s::loop_state::idle);
    }
}

// Both children end normally when the session fails, so `&&` completes without an exception.
asio::awaitable<void> agent_loop::work_loop() {
    try {
        for (;;) {
            co_await wake_.wait();
            if (failed_) {
                co_return;
            }
            co_await run_until_idle();
        }
    } catch (const session_failure&) {
    }
}

asio::awaitable<void> agent_loop::timer_loop() {
    try {
        co_await fire_timers();
    } catch (const session_failure&) {
    }
}

asio::awaitable<void> agent_loop::fire_timers() {
    for (;;) {
        if (failed_) {
            co_return;
        }
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
                continue;  // a timer was added: maybe an earlier one
            }
        }
        auto guard = co_await section_.lock();
        auto op = [&] { return log_->fire_timer(state_, id, clock_.now()); };
        auto task = commit(std::move(op));
        co_await std::move(task);
        wake_.notify();
    }
}

asio::awaitable<void> agent_loop::schedule_timer(s::timer t) {
    auto guard = co_await section_.lock();
    if (failed_) {
        throw session_failure{};
    }
    auto op = [&] { return log_->schedule_timer(state_, std::move(t)); };
    auto task = commit(std::move(op));
    co_await std::move(task);
}

// ------------------------------------------------------------------------------ the loop

asio::awaitable<void> agent_loop::run_until_idle() {
    for (;;) {
        if (failed_) {
            throw session_failure{};
        }
        if (state_.paused) {
            set_loop(s::loop_state::idle);
            co_return;
        }
        // Compaction after a response that crossed the threshold (tried once per response).
        if (auto due = s::compaction_due(state_); due.value != 0 && due != compaction_tried_) {
            compaction_tried_ = due;
            co_await compact(due);
            continue;
        }
        // Resume the tool calls of the latest response (after a crash too).
        if (s::has_unfinished_tool_calls(state_)) {
            set_loop(s::loop_state::executing_tools);
            co_await run_tools();
            continue;
        }
        set_loop(s::loop_state::preparing);
        {
            auto guard = co_await section_.lock();
            // Checkpoint: eager drain of what the checkpoint allows.
            auto drain = [&] {
                return log_->drain(state_, s::current_checkpoint(state_), clock_.now());
            };
            auto drained = commit(std::move(drain));
            co_await std::move(drained);
            if (!s::needs_inference(state_)) {
                // has_work is cleared in the same operation that checks the lanes are empty.
                auto idle = [&] { return log_->mark_idle(state_); };
                auto marked = commit(std::move(idle));
                co_await std::move(marked);
                if (!state_.has_work || state_.paused) {
                    set_loop(s::loop_state::idle);
                    co_return;
                }
                continue;
            }
        }
        co_await infer_turn();
    }
}

asio::awaitable<void> agent_loop::append_marker_locked(
    std::variant<s::interruption, s::diagnostic> m) {
    auto op = [&] { return log_->append_marker(state_, std::move(m), clock_.now()); };
    auto task = commit(std::move(op));
    co_await std::move(task);
}

asio::awaitable<void> agent_loop::infer_turn() {
    // Eager draining's hard error: input that cannot fit even after compaction is reported,
    // never staged.
    if (!fits()) {
        co_await compact(s::entry_seq{});
        if (!fits()) {
            {
                auto guard = co_await section_.lock();
                auto marked = append_marker_locked(s::diagnostic{
                    "input_too_large",
                    "the queued input does not fit in the context window even after compaction"});
                co_await std::move(marked);
            }
            co_return;
        }
    }
    bool overflow_retried = false;
    int transient_failures = 0;
    for (;;) {
        set_loop(s::loop_state::inferring);
        attempt a = co_await infer_once();
        if (a.kind == attempt::aborted) {
            {
                auto guard = co_await section_.lock();
                auto marked = append_marker_locked(
                    s::interruption{abort_reason_, s::interruption_kind::aborted});
                co_await std::move(marked);
            }
            co_return;
        }
        if (a.kind == attempt::ok) {
            {
                auto guard = co_await section_.lock();
                auto op = [&] {
                    return log_->append_assistant(state_, std::move(a.message), clock_.now());
                };
                auto task = commit(std::move(op));
                co_await std::move(task);
                const std::uint64_t step = inflight_ ? inflight_->step : step_;
                inflight_.reset();
                hub_->emit(stream_ended_event{step, true});
            }
            co_return;  // compaction, if due, is the next step of run_until_idle
        }
        switch (a.err.kind) {
            case provider_error_kind::context_overflow:
                // Fallback: compact, then retry once with the already materialized input.
                if (!overflow_retried && co_await compact(s::entry_seq{})) {
                    overflow_retried = true;
                    continue;
                }
                {
                    auto guard = co_await section_.lock();
                    auto marked = append_marker_locked(s::diagnostic{
                        "input_too_large",
                        "the context overflowed even after compaction: " + a.err.message});
                    co_await std::move(marked);
                }
                co_return;
            case provider_error_kind::transient:
                if (++transient_failures < opts_.retry.max_attempts) {
                    if (co_await abortable_sleep(
                            backoff(opts_.retry, transient_failures, jitter()))) {
                        {
                            auto guard = co_await section_.lock();
                            auto marked = append_marker_locked(
                                s::interruption{abort_reason_, s::interruption_kind::aborted});
                            co_await std::move(marked);
                        }
                        co_return;
                    }
                    continue;
                }
                {
                    auto guard = co_await section_.lock();
                    auto marked = append_marker_locked(s::diagnostic{
                        "inference_failed", "gave up after " + std::to_string(transient_failures) +
                                                " attempts: " + a.err.message});
                    co_await std::move(marked);
                }
                co_return;
            case provider_error_kind::fatal: {
                auto guard = co_await section_.lock();
                auto marked =
                    append_marker_locked(s::diagnostic{"inference_failed", a.err.message});
                co_await std::move(marked);
            }
                co_return;
        }
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
        throw session_failure{};
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
    if (failed_) {
        throw session_failure{};
    }
    co_return r.index() == 1;
}

asio::awaitable<bool> agent_loop::compact(s::entry_seq upto) {
    auto plan = s::plan_compaction(state_, opts_.roles, upto);
    if (!plan) {
        co_return false;
    }
    set_loop(s::loop_state::compacting);
    auto r = co_await (guarded_summarize(provider_, plan->segment, step_) ||
                       clock_.sleep(opts_.summary_timeout));
    if (failed_) {
        throw session_failure{};
    }
    if (r.index() != 0 || std::holds_alternative<provider_error>(std::get<0>(r).outcome)) {
        co_return false;  // the next response triggers compaction again
    }
    auto guard = co_await section_.lock();
    auto op = [&] {
        return log_->append_compaction(state_,
                                       s::compaction{std::get<std::string>(std::get<0>(r).outcome),
                                                     plan->first_kept, plan->tokens_before},
                                       clock_.now());
    };
    auto task = commit(std::move(op));
    co_await std::move(task);
    co_return true;
}

asio::awaitable<void> agent_loop::close_call_locked(s::tool_call call, std::string output) {
    auto op = [&] {
        return log_->tool_did_execute(
            state_, s::tool_result{call.id, call.name, std::move(output), true}, clock_.now());
    };
    auto task = commit(std::move(op));
    co_await std::move(task);
}

asio::awaitable<void> agent_loop::run_tools() {
    // The calls of one response run in order.
    for (std::size_t i = 0; i < state_.tool_calls.size(); ++i) {
        const s::tool_call_state tc = state_.tool_calls[i];  // a copy: state_ changes below
        if (tc.status == s::tool_status::finished) {
            continue;
        }
        tool* t = tools_.find(tc.call.name, state_.config.tools);
        if (t == nullptr) {
            {
                auto guard = co_await section_.lock();
                auto marked = close_call_locked(tc.call, "unknown tool: " + tc.call.name);
                co_await std::move(marked);
            }
            continue;
        }
        if (tc.status == s::tool_status::started && !t->idempotent()) {
            // Recovery: it may have run, and running it again could repeat its effect.
            {
                auto guard = co_await section_.lock();
                auto marked = close_call_locked(
                    tc.call,
                    "interrupted: the worker running this tool stopped, and the tool "
                    "is not idempotent, so it was not run again");
                co_await std::move(marked);
            }
            continue;
        }
        if (tc.status == s::tool_status::not_started) {
            auto guard = co_await section_.lock();
            auto op = [&] { return log_->tool_will_execute(state_, tc.call.id, clock_.now()); };
            auto task = commit(std::move(op));
            co_await std::move(task);
        }
        abort_.reset();
        in_flight_ = true;
        tool_call_context ctx{tc.call.id, *this};
        auto r = co_await (guarded_execute(*t, tc.call.arguments, ctx) || abort_.wait() ||
                           clock_.sleep(opts_.tool_timeout));
        in_flight_ = false;
        if (failed_) {
            throw session_failure{};
        }
        if (r.index() == 1) {
            // Abort: this call and the ones after it get error results, then the interruption.
            {
                auto guard = co_await section_.lock();
                auto marked = close_call_locked(tc.call, "aborted: " + abort_reason_);
                co_await std::move(marked);
            }
            for (std::size_t j = i + 1; j < state_.tool_calls.size(); ++j) {
                const s::tool_call rest = state_.tool_calls[j].call;
                {
                    auto guard = co_await section_.lock();
                    auto marked = close_call_locked(rest, "not run: the turn was aborted");
                    co_await std::move(marked);
                }
            }
            {
                auto guard = co_await section_.lock();
                auto marked = append_marker_locked(
                    s::interruption{abort_reason_, s::interruption_kind::aborted});
                co_await std::move(marked);
            }
            co_return;
        }
        tool_output out = r.index() == 0
                              ? std::get<0>(std::move(r))
                              : tool_output{"timed out after " +
                                                std::to_string(opts_.tool_timeout.count()) + " ms",
                                            true};
        auto guard = co_await section_.lock();
        auto op = [&] {
            return log_->tool_did_execute(
                state_, s::tool_result{tc.call.id, tc.call.name, std::move(out.text), out.is_error},
                clock_.now());
        };
        auto task = commit(std::move(op));
        co_await std::move(task);
    }
}

}  // namespace wuhu::worker
