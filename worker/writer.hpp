// What the runners of a turn (worker/turn_runner.hpp, worker/tool_runner.hpp) see of the
// session's owner: the state, one way to change it, and the abort that stops what they wait
// for. agent_loop implements the writer; the runners write nothing else.
#pragma once

#include "runtime/sync.hpp"
#include "session/settings.hpp"
#include "session/state.hpp"
#include "session/transition.hpp"
#include "worker/command.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace wuhu::worker {

namespace asio = boost::asio;

class session_writer {
  public:
    // The session now (changed only by record(), and by commands between the runner's awaits).
    virtual const session::session_state& state() const = 0;
    virtual const session::session_id& sid() const = 0;
    // The owner's lease epoch: it stamps the messages this owner streams (a watcher tells a
    // message restarted by a new owner from the old owner's).
    virtual session::lease_epoch epoch() const = 0;
    // Assistant messages in the transcript: the step of the next streamed message.
    virtual std::uint64_t step() const = 0;
    // Persists `t` first, then applies and emits it. False when the session has failed and
    // nothing was written: the runner returns.
    virtual asio::awaitable<bool> record(session::transition t) = 0;
    virtual bool failed() const = 0;
    // The session's budget with its tenant's and the fleet's defaults.
    virtual session::budget limits() const = 0;
    // Whether this owner started the call with its response (its tool_started is durable and
    // it has not run yet): a started call that is not one of these may have run under an
    // owner that stopped.
    virtual bool started_here(const session::tool_call_id& id) const = 0;
    // The loop state observers see (a state_event when it changes).
    virtual void set_loop(session::loop_state s) = 0;
    // Tells observers a tool call ran to its end in `took` (a tool_ran_event).
    virtual void tool_ran(const std::string& tool, std::chrono::milliseconds took) = 0;
    // Ends the turn for the pending abort: commits `before` (entries a runner decided and has
    // not committed), an error result for each call of the newest response that has none
    // (`running`: the call the abort stopped), the interruption, and the checkpoint after it;
    // then answers the abort's requests. False when no abort is pending or nothing was written
    // (the session failed): the runner returns either way.
    virtual asio::awaitable<bool> stop_turn(std::vector<session::entry_body> before,
                                            std::optional<session::tool_call_id> running) = 0;

  protected:
    ~session_writer() = default;
};

// What an abort stops: the turn in progress. A request fires it; it stays pending until the
// loop records the interruption that ends the turn (session_writer::stop_turn) or finds that
// the turn ended by itself, and then every request waiting for it gets the same outcome. A
// runner arms it around the wait an abort cuts short (an inference, a backoff, a summary, a
// tool call) and races the wait against wait(); a pending abort is also taken at the loop's
// next step. Closing the loop fires it for good.
class abort_signal {
  public:
    // One request waiting for the outcome (shared: the request may be cancelled first).
    struct waiter {
        runtime::async_event done;
        std::optional<abort_outcome> out;  // nullopt: the loop closed first
    };
    // The abort to record: its reason and id, and what it stopped.
    struct request {
        std::string reason;
        std::string id;
        session::abort_stage stopped = session::abort_stage::none;  // none: between steps
        std::vector<std::shared_ptr<waiter>> waiters;
    };

    // Around a wait an abort stops: one fired before (pending) stops it at once.
    void arm(session::abort_stage stage) {
        armed_ = stage;
        if (pending_ || closed_) {
            event_.notify();
        } else {
            event_.reset();  // an earlier abort was settled
        }
    }
    void disarm() { armed_ = session::abort_stage::none; }
    bool armed() const { return armed_ != session::abort_stage::none; }
    bool pending() const { return pending_ != nullptr; }
    const request* pending_request() const { return pending_.get(); }
    // A request joins the pending abort, or fires a new one; the armed wait ends. The waiter
    // gets the outcome when the abort is settled.
    std::shared_ptr<waiter> fire(std::string reason, std::string id) {
        auto w = std::make_shared<waiter>();
        if (!pending_) {
            pending_ = std::make_unique<request>(
                request{std::move(reason), std::move(id), session::abort_stage::none, {}});
            event_.notify();
        }
        pending_->waiters.push_back(w);
        return w;
    }
    // The armed wait lost its race to the pending abort: the abort stopped `stage`.
    void stopped(session::abort_stage stage) {
        if (pending_ && pending_->stopped == session::abort_stage::none) {
            pending_->stopped = stage;
        }
    }
    // Answers every request of the pending abort with `out` (none: the turn had ended).
    void settle(const abort_outcome& out) {
        if (!pending_) {
            return;
        }
        const auto req = std::move(pending_);
        for (auto& w : req->waiters) {
            w->out = out;
            w->done.notify();
        }
    }
    // The loop closed: every request waiting gets no outcome (the loop's failure).
    void close() {
        closed_ = true;
        event_.notify();
        if (pending_) {
            const auto req = std::move(pending_);
            for (auto& w : req->waiters) {
                w->done.notify();
            }
        }
    }
    // Completes when fired or closed; also, without an exception, when cancelled: it is one
    // side of a race (`||`), and a cancelled side's outcome is never read.
    asio::awaitable<void> wait() { return event_.wait_or_cancelled(); }

  private:
    runtime::async_event event_;
    session::abort_stage armed_ = session::abort_stage::none;
    bool closed_ = false;  // every later wait() returns at once
    // Allocated while an abort is pending only: a loaded session holds 8 bytes for it.
    std::unique_ptr<request> pending_;
};

}  // namespace wuhu::worker
