// The tool calls of the newest response, run in order: session::next_tool_action says what to
// do with each (skip, run, or an error result for an unknown tool or a call that an owner that
// stopped may have run). A call is started durably before it runs (its tool_started is usually
// committed with the response, worker/turn_runner.cpp); its result is committed with the
// results that finish together (a group commit within the session): a result waits while the
// next call runs for at most `linger`, then is committed while that call goes on, and the last
// result goes with the checkpoint's drain that follows it. An abort gives that call and the
// ones after it error results, then an interruption, in one commit. Also what a running tool
// may use (tool_services).
#pragma once

#include "runtime/clock.hpp"
#include "tools/tools.hpp"
#include "worker/writer.hpp"

namespace wuhu::worker {

namespace asio = boost::asio;

using std::chrono::milliseconds;

class tool_runner final : private tools::tool_services {
  public:
    // `max_output`: a tool's output past it is stored cut, with a note (0: no limit).
    tool_runner(session_writer& w, const tools::tool_registry& tools, runtime::clock& clk,
                milliseconds timeout, milliseconds linger, std::size_t max_output,
                abort_signal& abort);

    asio::awaitable<void> run();

  private:
    runtime::clock& time() override { return clock_; }
    asio::awaitable<bool> schedule_timer(session::timer t) override;
    // Commits `steps` (and with `drain`, the checkpoint after them) in one operation.
    asio::awaitable<bool> commit(std::vector<session::entry_body> steps, bool drain);
    // After `linger`, commits what `pending` holds; then waits until cancelled (it races a call
    // and never wins).
    asio::awaitable<void> flush_after_linger(std::vector<session::entry_body>* pending);

    session_writer& writer_;
    const tools::tool_registry& tools_;
    runtime::clock& clock_;
    milliseconds timeout_;
    milliseconds linger_;
    std::size_t max_output_;
    abort_signal& abort_;
};

}  // namespace wuhu::worker
