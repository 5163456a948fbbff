#include "worker/agent_loop.hpp"

#include "runtime/offload.hpp"
#include "session/approval.hpp"
#include "session/loop_policy.hpp"
#include "session/overloaded.hpp"
#include "session/reducer.hpp"
#include "session/rules.hpp"
#include "session/text.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>

namespace wuhu::worker {

using namespace boost::asio::experimental::awaitable_operators;
namespace s = wuhu::session;

namespace {

// How long a loop waits for the MCP servers' first offer of their tools at start (one that does
// not answer within it is offered later, when it does).
constexpr std::chrono::milliseconds tools_first_offer_wait{10'000};

}  // namespace

agent_loop::agent_loop(asio::any_io_executor ex, std::unique_ptr<storage::session_log> log,
                       providers::provider& p, const tools::tool_registry& tools,
                       runtime::clock& clk, loop_options opts)
    : agent_loop(std::move(ex), std::move(log), p, tools, clk,
                 std::make_shared<const loop_options>(std::move(opts))) {}

agent_loop::agent_loop(asio::any_io_executor ex, std::unique_ptr<storage::session_log> log,
                       providers::provider& p, const tools::tool_registry& tools,
                       runtime::clock& clk, std::shared_ptr<const loop_options> opts)
    : ex_(std::move(ex)),
      log_(std::move(log)),
      tools_(tools),
      clock_(clk),
      opts_(std::move(opts)),
      defaults_(opts_->defaults_for(log_->id().tenant())),
      hub_(std::make_shared<event_hub>()),
      provider_(p),
      jitter_(turn_runner::seed(*opts_)),
      tools_run_(*this, tools, clk, opts_->tool_timeout, opts_->tool_result_linger,
                 opts_->max_entry_bytes, abort_) {}

agent_loop::~agent_loop() = default;

bool agent_loop::quiescent() const {
    return loaded_ && !abort_.armed() && !abort_.pending() &&
           (loop_ == s::loop_state::idle || loop_ == s::loop_state::awaiting_approval) &&
           (!state_.has_work || state_.paused || failed_ || s::awaiting_approval(state_));
}

const std::optional<inflight_message>& agent_loop::inflight() const {
    static const std::optional<inflight_message> none;
    return turns_ ? turns_->inflight() : none;
}

turn_runner& agent_loop::turns() {
    if (!turns_) {
        session_writer& writer = *this;  // a private base: named here, not in make_unique
        turns_ = std::make_unique<turn_runner>(writer, provider_, tools_, clock_, *opts_, abort_,
                                               *hub_, jitter_);
    }
    return *turns_;
}

observation agent_loop::observe(event_sink sink) {
    return observation{state_, loop_, inflight(), subscription(hub_, hub_->add(std::move(sink)))};
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
    return ensure_loaded();
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
    abort_.close();
    if (timers_) {
        timers_->changed.notify();
    }
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
    // Planned here, under the section: the rules are pure and read state_, so a refusal or a
    // change of nothing is answered without a hop to the store pool.
    written w = op();
    if (!w.refused && !w.failed && !w.actions.empty()) {
        // The commit runs on the store executor (when there is one): its blocking IO does not
        // hold up the other sessions of this executor. The section stays held, so state_ is
        // read there and changed only here, after the commit.
        std::function<boost::system::error_code()> commit = [this, &w] {
            auto r = log_->commit(state_, w.actions);
            return r ? boost::system::error_code{} : r.error();
        };
        auto task =
            runtime::run_on<boost::system::error_code>(opts_->store_executor, std::move(commit));
        w.failed = co_await std::move(task);
    }
    if (w.refused) {
        co_return w.refused;
    }
    if (w.failed) {
        // Persist first: a store error or an unknown outcome is fatal for this session. Do not
        // guess what was written; stop writing and let the next owner rebuild from the store.
        close(w.failed);
        co_return w.failed;
    }
    if (!w.actions.empty() || w.emit_unchanged) {
        apply_committed(w.actions);
    }
    co_return boost::system::error_code{};
}

asio::awaitable<bool> agent_loop::record(s::transition t) {
    const bool responding = std::holds_alternative<s::response>(t);
    // The loop's own transitions are never refused by the rules: any error fails the session.
    operation op = [this, t = std::move(t)]() mutable { return plan_now(std::move(t)); };
    auto task = persist(std::move(op));
    const auto ec = co_await std::move(task);
    if (!ec && responding) {
        // Exactly the calls the commit started (session::plan_response starts none while the
        // session is paused or a compaction is due): the newest response's, fresh, so every
        // one of them that is started now was started by this owner and has not run.
        started_here_.clear();
        for (const auto& tc : state_.tool_calls) {
            if (tc.status == s::tool_status::started) {
                started_here_.push_back(tc.call.id);
            }
        }
    }
    co_return !ec;
}

void agent_loop::apply_committed(const s::action_list& actions) {
    const s::version_vector from = state_.version();
    // A result can end a wait for a decision (an abort's) only if a call waited: most results
    // of a turn wake nobody.
    const bool waited = std::any_of(state_.tool_calls.begin(), state_.tool_calls.end(),
                                    [](const auto& t) { return s::awaits_decision(t); });
    s::apply_actions(actions, state_);
    bool timers = false;  // changed: an earlier one, or the one waited for is gone
    for (const auto& a : actions) {
        if (std::holds_alternative<s::timer_scheduled>(a) ||
            std::holds_alternative<s::timer_cleared>(a)) {
            timers = true;
        } else if (const auto* e = std::get_if<s::entry_appended>(&a)) {
            if (std::holds_alternative<s::assistant_message>(e->e.body)) {
                ++step_;
            }
            if (std::holds_alternative<s::approval_requested>(e->e.body) ||
                std::holds_alternative<s::approval_decided>(e->e.body) ||
                (waited && std::holds_alternative<s::tool_result>(e->e.body))) {
                timers = true;  // a deadline came, or went
            }
        }
    }
    auto p = s::patch_of(from, actions, state_, loop_);
    if (p.state) {
        stamp(*p.state);
    }
    hub_->emit(committed_event{actions, std::move(p)});
    if (timers) {
        if (timers_) {
            timers_->changed.notify();
        }
        watch_timers();
    }
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
    auto st = s::status_of(state_, loop_);
    stamp(st);
    return st;
}

s::budget agent_loop::limits() const {
    return s::effective(state_.config.limits, defaults_);
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

// ------------------------------------------------------------------------------ lifecycle

agent_loop::written agent_loop::recover_orphan() {
    // Takeover terminalizes orphans: a turn cut off mid-stream or mid-tool is recorded, so no
    // client waits for a message or a result that will never come; the normal sequence then
    // redoes the turn or resumes its tool calls.
    auto marker = s::takeover_interruption(state_);
    if (!marker) {
        return {};
    }
    return plan_now(std::move(*marker));
}

agent_loop::written agent_loop::plan_now(s::transition t) {
    // Past its budget the session takes no new input: the checkpoint after tool results (or
    // an abort's) is left to the loop, which stops before it (docs/protocol.md "Budgets").
    if (auto* steps = std::get_if<s::tool_steps>(&t);
        steps != nullptr && steps->drain && s::exhausted(state_.usage, limits())) {
        steps->drain = false;
    }
    auto r = s::plan(state_, std::move(t), clock_.now());
    return r ? written{{}, {}, std::move(*r), false} : written{{}, r.error(), {}, false};
}

asio::awaitable<void> agent_loop::start() {
    // However start() ends (cancelled too), no abort waits for a loop that no longer runs: the
    // ones waiting, and every later one, are answered `closed` (the request is routed again).
    // (Not in a destructor of the frame: a frame destroyed without being resumed, as by an
    // io_context that goes first, may outlive the loop.)
    // One coroutine for the session's life (run() and the work loop were two more, and their
    // frames stayed for as long as an idle session is loaded).
    std::exception_ptr ended;
    try {
        // Loads the session and terminalizes an orphaned turn before any command runs.
        operation recover = [this] { return recover_orphan(); };
        auto recovering = persist(std::move(recover));
        if (!co_await std::move(recovering)) {
            if (state_.has_work) {
                wake_.notify();
            } else if (!state_.paused && s::awaiting_approval(state_)) {
                set_loop(s::loop_state::awaiting_approval);  // loaded waiting: say so
            }
            running_ = true;
            watch_timers();
            // The work loop, until the session fails (close() wakes its wait).
            while (!failed_) {
                waiting_ = true;
                co_await wake_.wait();
                if (!std::exchange(tools_awaited_, true) && !tools_.settled()) {
                    auto settling = tools_settled();
                    co_await std::move(settling);
                }
                {
                    // In the section: a command that saw the loop waiting (and drained its item
                    // with its enqueue) has committed, and the ones after it see the loop
                    // running, before the loop reads the state.
                    auto guard = co_await section_.lock();
                    waiting_ = false;
                }
                if (!failed_) {
                    co_await run_until_idle();
                    turns_.reset();  // the loop stopped: an idle session holds no turn runner
                }
            }
        }
        if (failed_) {
            set_loop(s::loop_state::idle);
        }
    } catch (...) {
        ended = std::current_exception();
    }
    returned_ = true;
    abort_.close();
    if (timer_child_) {
        // The timer loop is a child too: start() returns after it (cancelled, it ends at its
        // next wait). A cancelled coroutine would refuse to wait: its cancellation is spent.
        co_await asio::this_coro::reset_cancellation_state();
        timers_->stop.emit(asio::cancellation_type::terminal);
        timers_->changed.notify();
        while (timer_child_) {
            co_await timers_->ended.wait();
        }
    }
    if (ended) {
        std::rethrow_exception(ended);
    }
}

asio::awaitable<void> agent_loop::tools_settled() {
    // The worker's MCP servers are making their first offer (at start): the loop's first step
    // waits for it, so that a call of one of their tools is not taken for a call of an unknown
    // one.
    const auto give_up = clock_.now().value + tools_first_offer_wait.count();
    while (!tools_.settled() && clock_.now().value < give_up) {
        co_await clock_.sleep(std::chrono::milliseconds(50));
    }
}

void agent_loop::watch_timers() {
    if (timer_child_ || !running_ || returned_ || failed_ ||
        (s::next_timer(state_) == nullptr && s::next_deadline(state_) == nullptr)) {
        return;  // one watches them already (or will: see the completion), or none to watch
    }
    if (!timers_) {
        timers_ = std::make_unique<timer_watch>();
    }
    timer_child_ = true;
    auto ended = [this](const std::exception_ptr&) {
        // Posted: the next child binds the stop signal's slot, which this one's coroutine
        // holds until it has gone. A timer scheduled while this one was ending is watched by it.
        asio::post(ex_, [this] {
            timer_child_ = false;
            watch_timers();
            if (!timer_child_) {
                timers_->ended.notify();  // last: start() may return, and the loop go
            }
        });
    };
    asio::co_spawn(ex_, timer_loop(),
                   asio::bind_cancellation_slot(timers_->stop.slot(), std::move(ended)));
}

asio::awaitable<void> agent_loop::timer_loop() {
    // The session's timers and the deadlines of the calls that wait for a person, while there
    // are any: an idle session without them holds no coroutine for them.
    while (!failed_ && !returned_) {
        const s::timer* next = s::next_timer(state_);
        const s::tool_call_state* waiting = s::next_deadline(state_);
        if (next == nullptr && waiting == nullptr) {
            co_return;
        }
        const bool deadline =
            waiting != nullptr && (next == nullptr || waiting->deadline < next->due);
        s::transition fire = deadline ? s::transition{s::approval_deadline{waiting->call.id}}
                                      : s::transition{s::fire_timer{next->id}};
        const s::unix_ms due = deadline ? waiting->deadline : next->due;
        timers_->changed.reset();
        if (due > clock_.now()) {
            auto r = co_await (clock_.sleep_until(due) || timers_->changed.wait());
            if (r.index() == 1) {
                continue;  // a timer was added (or the loop closed): maybe an earlier one
            }
        }
        auto firing = record(std::move(fire));
        if (co_await std::move(firing)) {
            wake_.notify();
        }
    }
}

// ------------------------------------------------------------------------------ the loop

asio::awaitable<void> agent_loop::run_until_idle() {
    s::loop_position at{compaction_tried_};
    while (!failed_) {
        const s::loop_step step = s::next_step(state_, at, defaults_);
        if (abort_.pending()) {
            // An abort that came between two steps (or during a commit), or stopped a
            // compaction: it stops the turn here, before its next step runs; a turn that
            // ended by itself stops nothing.
            if (s::turn_in_progress(state_) ||
                abort_.pending_request()->stopped != s::abort_stage::none) {
                if (step.kind == s::step_kind::compact) {
                    at.compaction_tried = step.upto;  // abandoned: not tried again
                    compaction_tried_ = step.upto;
                }
                auto task = stop_turn({}, std::nullopt);
                co_await std::move(task);
                at = s::loop_position{at.compaction_tried, false, false};
                continue;
            }
            abort_.settle({});
        }
        switch (step.kind) {
            case s::step_kind::pause:
            case s::step_kind::idle:
                set_loop(s::loop_state::idle);
                co_return;
            case s::step_kind::compact: {
                auto task = turns().compact(step.upto);
                co_await std::move(task);
                break;
            }
            case s::step_kind::run_tools:
                set_loop(s::loop_state::executing_tools);
                co_await tools_run_.run();
                break;
            case s::step_kind::checkpoint: {
                // Nothing to drain (a fused commit drained it): no store operation. After an
                // answer that stops the loop, no `preparing` either: the spec's inferring → idle.
                if (s::select_checkpoint(state_, s::current_checkpoint(state_)).empty()) {
                    const auto then = s::next_step(state_, s::after(step, at), defaults_).kind;
                    if (loop_ != s::loop_state::inferring ||
                        (then != s::step_kind::idle && then != s::step_kind::pause)) {
                        set_loop(s::loop_state::preparing);
                    }
                    break;
                }
                set_loop(s::loop_state::preparing);
                auto task = record(s::take_checkpoint{});
                co_await std::move(task);
                break;
            }
            case s::step_kind::mark_idle: {
                auto task = record(s::mark_idle{});
                co_await std::move(task);
                break;
            }
            case s::step_kind::infer:
                co_await turns().infer();
                break;
            case s::step_kind::budget_spent: {
                // Recorded with the session paused: the next step is the pause.
                auto task = record(s::budget_spent{limits()});
                co_await std::move(task);
                break;
            }
            case s::step_kind::budget_notice: {
                auto task = record(s::budget_notice{limits()});
                co_await std::move(task);
                break;
            }
            case s::step_kind::await_approval: {
                // Nothing to run until a decision or a deadline: passivated like an idle
                // session (has_work cleared), its deadlines kept by the timer loop.
                auto task = record(s::await_approval{});
                if (co_await std::move(task)) {
                    set_loop(s::loop_state::awaiting_approval);
                }
                co_return;
            }
        }
        at = s::after(step, at);
        compaction_tried_ = at.compaction_tried;
    }
}

}  // namespace wuhu::worker
