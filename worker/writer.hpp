// What the runners of a turn (worker/turn_runner.hpp, worker/tool_runner.hpp) see of the
// session's owner: the state, one way to change it, and the abort that stops what they wait
// for. agent_loop implements the writer; the runners write nothing else.
#pragma once

#include "session/settings.hpp"
#include "session/state.hpp"
#include "worker/sync.hpp"
#include "worker/transition.hpp"

#include <chrono>
#include <cstdint>
#include <string>

namespace wuhu::worker {

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
    virtual asio::awaitable<bool> record(transition t) = 0;
    virtual bool failed() const = 0;
    // Whether this owner started the call with its response (its tool_started is durable and
    // it has not run yet): a started call that is not one of these may have run under an
    // owner that stopped.
    virtual bool started_here(const session::tool_call_id& id) const = 0;
    // The loop state observers see (a state_event when it changes).
    virtual void set_loop(session::loop_state s) = 0;
    // Tells observers a tool call ran to its end in `took` (a tool_ran_event).
    virtual void tool_ran(const std::string& tool, std::chrono::milliseconds took) = 0;

  protected:
    ~session_writer() = default;
};

// What an abort stops: the one inference, tool call or backoff in flight. A runner arms it
// around that wait and races the wait against wait(); an abort command fires it (only while
// armed: an abort with nothing in flight is a no-op); closing the loop fires it for good.
class abort_signal {
  public:
    explicit abort_signal(asio::any_io_executor ex) : event_(std::move(ex)) {}
    void arm() {
        if (!closed_) {
            event_.reset();  // an earlier abort was for an earlier wait
        }
        armed_ = true;
    }
    void disarm() { armed_ = false; }
    bool armed() const { return armed_; }
    // False (and nothing happens) when nothing is in flight.
    bool fire(std::string reason) {
        if (!armed_) {
            return false;
        }
        reason_ = std::move(reason);
        event_.notify();
        return true;
    }
    void close() {
        closed_ = true;
        event_.notify();
    }
    // Completes when fired or closed; also, without an exception, when cancelled: it is one
    // side of a race (`||`), and a cancelled side's outcome is never read.
    asio::awaitable<void> wait() { return event_.wait_or_cancelled(); }
    const std::string& reason() const { return reason_; }

  private:
    async_event event_;
    bool armed_ = false;
    bool closed_ = false;  // every later wait() returns at once
    std::string reason_;
};

}  // namespace wuhu::worker
