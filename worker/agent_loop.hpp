// AgentLoop: the single owner of one session, and a thin driver of the loop's policy
// (session/loop_policy.hpp): the policy says what to do next, the loop does it.
//
// It loads the session once, serves reads from memory, and runs every mutation (commands and
// its own transitions) through one helper, persist(): in a serialized section (an async mutex
// on the loop's executor), the session's rules plan the change there (a refusal or a change of
// nothing is answered without the store), the store commits the planned actions (on the store
// executor), then the loop applies them with the pure reducer and emits them. Inference and tool
// execution run outside the section, so send() stays fast while the session is inferring.
//
// Thread/executor: every member function must be called on `ex` (a strand, or a
// single-threaded io_context); start() and send() are coroutines to spawn there.
// Lifetime: start() runs until cancelled or until the session fails; the loop must outlive it.
// It is structured: inference and tools are its children, and so is the timer loop, which runs
// only while the session has timers or deadlines (watch_timers()): start() cancels it, and
// waits for it, before it returns.
//
// Invariants:
//   state() == the stored state (the store is written first)
//   at most one inference or tool call is in flight
//   a failed loop (store error, lease lost) writes nothing more; its owner drops it. Failure
//   is a value (failed(), failure()): persist() refuses to run once it is set, and every
//   step returns when persist() refuses.
#pragma once

#include "storage/store.hpp"
#include "worker/command.hpp"
#include "worker/events.hpp"
#include "worker/loop_options.hpp"
#include "worker/tool_runner.hpp"
#include "worker/turn_runner.hpp"
#include "worker/writer.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>

namespace wuhu::worker {

namespace asio = boost::asio;

class agent_loop final : private session_writer {
  public:
    // `opts` may be shared by the loops of a worker (a registry's: one copy, not one a
    // session).
    agent_loop(asio::any_io_executor ex, std::unique_ptr<storage::session_log> log,
               providers::provider& p, const tools::tool_registry& tools, runtime::clock& clk,
               std::shared_ptr<const loop_options> opts);
    agent_loop(asio::any_io_executor ex, std::unique_ptr<storage::session_log> log,
               providers::provider& p, const tools::tool_registry& tools, runtime::clock& clk,
               loop_options opts = {});
    ~agent_loop();
    agent_loop(const agent_loop&) = delete;
    agent_loop& operator=(const agent_loop&) = delete;

    // Loads the session, terminalizes an orphaned turn, then runs: resume pending work, wait
    // for a signal, run until idle, wait again. Returns when cancelled or when the session
    // fails (see failure()).
    asio::awaitable<void> start();

    // Loads the session from the store now (start() and send() do it too): the state and
    // observe() then reflect the store. The failure, if loading fails (the loop has failed).
    boost::system::error_code load();
    // Takes the state the caller loaded from this loop's log (off the loop's executor).
    // REQUIRES: nothing has run on the loop yet.
    void preload(session::session_state loaded);

    // Closes the loop: it writes nothing more, its commands (those waiting and later ones)
    // fail with `why`, and start() returns. For an owner that unloads the session.
    void close(boost::system::error_code why);
    // The same, after the commands already waiting for the serialized section have run.
    asio::awaitable<void> close_after_pending(boost::system::error_code why);

    // A command, acknowledged after it is durable. Errors: the rule's (session::errc; lane_full
    // past loop_options::lanes), overloaded when loop_options::max_waiting_commands commands
    // wait already, or the store's (storage::errc; the session has then failed).
    asio::awaitable<boost::system::result<command_reply>> send(command c);

    // A gap-free observation: the state, the loop state and the inflight message now, and a
    // subscription that delivers every later event. Call on the loop's executor.
    observation observe(event_sink sink);

    const session::session_id& id() const { return log_->id(); }
    session::lease_epoch epoch() const override { return log_->epoch(); }
    const session::session_state& state() const override { return state_; }
    const session::session_id& sid() const override { return id(); }
    session::loop_state current() const { return loop_; }
    // The status register now, stamped newer than every status published before (for a
    // subscribe reply: a watcher drops the older ones it may still receive).
    session::status status_now();
    // The session's budget with its tenant's and the fleet's defaults (session/ledger.hpp
    // `effective`, loop_options::defaults_for).
    session::budget limits() const override;
    const std::optional<inflight_message>& inflight() const;
    bool loaded() const { return loaded_; }
    // The timer loop runs: only while the session has timers or deadlines (an idle session
    // without them holds one coroutine, start()'s, waiting in its work loop for a wake-up).
    bool watching_timers() const { return timer_child_; }
    bool failed() const override { return failed_; }
    boost::system::error_code failure() const { return failure_; }
    // True when the loop has nothing to do: idle, and has_work is clear (or the session is
    // paused); or waiting for a person's decisions.
    bool quiescent() const;

  private:
    // What one change is: refused by a rule (nothing to store), failed (the session fails), or
    // these actions (none: it changes nothing); once committed, `failed` holds a store error.
    struct written {
        boost::system::error_code refused;
        boost::system::error_code failed;
        session::action_list actions;
        // A command's patch is emitted even when it changed nothing (a duplicate enqueue, a
        // second pause): subscribers see one patch per acknowledged command.
        bool emit_unchanged = false;
    };
    // A change planned by the session's rules, on the loop's executor while the section is
    // held: it reads state_ and must not change it.
    using operation = std::function<written()>;

    // The one serialized section: unless the loop has failed, loads the session if needed,
    // plans `op`, commits its actions where store IO runs (the store executor, or inline; not
    // at all for a refusal or no actions), then applies and emits them; a store failure closes
    // the loop. The error: the loop's failure (before or now), or the rule's refusal.
    asio::awaitable<boost::system::error_code> persist(operation op);
    // session_writer: one of the loop's own transitions through persist(). False when the
    // loop has failed (nothing was written): the caller returns.
    asio::awaitable<bool> record(session::transition t) override;
    std::uint64_t step() const override { return step_; }
    bool started_here(const session::tool_call_id& id) const override {
        return std::find(started_here_.begin(), started_here_.end(), id) != started_here_.end();
    }
    void set_loop(session::loop_state s) override;
    void tool_ran(const std::string& tool, std::chrono::milliseconds took) override {
        hub_->emit(tool_ran_event{tool, took});
    }
    asio::awaitable<bool> stop_turn(std::vector<session::entry_body> before,
                                    std::optional<session::tool_call_id> running) override;
    boost::system::error_code ensure_loaded();
    // An abort request: answered at once when no turn is in progress (or its id was answered
    // before), else once the interruption that stops the turn is durable.
    asio::awaitable<boost::system::result<command_reply>> abort_turn(abort_command a);
    // The outcome of an earlier abort request with this id: kept by this loop for its last
    // max_answered_aborts requests, and in the transcript for every one that stopped a turn.
    std::optional<abort_outcome> answered_abort(const std::string& id) const;
    written run_command(command& c, command_reply& reply, bool& wake);
    written recover_orphan();
    // One of the loop's own transitions, planned now (inside an operation); its errors fail
    // the session (the rules never refuse the loop's own transitions).
    written plan_now(session::transition t);

    // The loop's first step waits for the worker's MCP servers' first offer (a while at most).
    asio::awaitable<void> tools_settled();
    // Starts the timer loop, a child of start(), unless it runs, or the session has neither
    // timers nor deadlines (the loop returns when none are left).
    void watch_timers();
    asio::awaitable<void> timer_loop();
    // A decision's plan; edited arguments are checked against the tool's schema first.
    written decide(session::decision_input in, command_reply& reply, bool& wake);
    asio::awaitable<void> run_until_idle();
    // The runner of the turn at work: made by its first inference or compaction, dropped when
    // the loop stops (an idle session holds none).
    turn_runner& turns();

    void apply_committed(const session::action_list& actions);
    // Stamps a status about to be published (session::status: epoch, seq).
    void stamp(session::status& st);

    asio::any_io_executor ex_;  // the timer loop's
    std::unique_ptr<storage::session_log> log_;
    bool tools_awaited_ = false;  // the MCP servers' first offer (start)
    const tools::tool_registry& tools_;
    runtime::clock& clock_;
    std::shared_ptr<const loop_options> opts_;
    session::budget defaults_;  // the budget of the session's tenant, with the fleet's
    std::shared_ptr<event_hub> hub_;

    runtime::async_mutex section_;
    runtime::async_event wake_;
    // What the timer loop's child waits on and is stopped by: made when the first one is
    // spawned (watch_timers) and kept; a session that never has timers holds 8 bytes for it.
    struct timer_watch {
        runtime::async_event changed;
        runtime::async_event ended;  // the timer loop's child has completed
        asio::cancellation_signal stop;
    };
    std::unique_ptr<timer_watch> timers_;
    abort_signal abort_;

    session::session_state state_;
    session::loop_state loop_ = session::loop_state::idle;
    std::uint64_t step_ = 0;               // assistant messages in the transcript
    std::uint64_t status_seq_ = 0;         // the last status stamp's seq
    std::size_t commands_waiting_ = 0;     // send()s in or waiting for the section
    session::entry_seq compaction_tried_;  // the response whose compaction was last tried
    static constexpr std::size_t max_answered_aborts = 64;
    // A vector (at most 64, the oldest dropped first): libstdc++'s deque allocates 576 bytes
    // when it is made, in every loaded session.
    std::vector<std::pair<std::string, abort_outcome>> answered_aborts_;
    bool loaded_ = false;
    bool returned_ = false;  // start() has returned: nothing takes a pending abort any more
    bool running_ = false;   // start() has recovered the session and runs its loops
    bool timer_child_ = false;  // the timer loop runs (from its spawn to its completion)
    // The calls this loop started with the newest response (worker/writer.hpp).
    std::vector<session::tool_call_id> started_here_;
    // The work loop waits for a wake-up (read by commands on the store executor).
    std::atomic<bool> waiting_{false};
    bool failed_ = false;
    boost::system::error_code failure_;
    // The runners write through this loop (a session_writer): declared last, the tool runner
    // built last; the turn runner is made by turns().
    providers::provider& provider_;
    std::uint64_t jitter_;                // the retry jitter's state (turn_runner::seed)
    std::unique_ptr<turn_runner> turns_;  // while a turn is at work (turns())
    tool_runner tools_run_;
};

}  // namespace wuhu::worker
