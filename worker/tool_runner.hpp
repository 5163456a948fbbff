// The tool calls of the newest response, run in order: session::next_tool_action says what to
// do with each (skip, run, or an error result for an unknown tool or a call that an owner that
// stopped may have run). Before a call runs its tool_started is recorded, after it its result;
// an abort gives that call and the ones after it error results, then an interruption. Also
// what a running tool may use (tool_services).
#pragma once

#include "worker/clock.hpp"
#include "worker/tools.hpp"
#include "worker/writer.hpp"

namespace wuhu::worker {

class tool_runner final : private tool_services {
  public:
    tool_runner(session_writer& w, const tool_registry& tools, clock& clk, milliseconds timeout,
                abort_signal& abort);

    asio::awaitable<void> run();

  private:
    clock& time() override { return clock_; }
    asio::awaitable<bool> schedule_timer(session::timer t) override;
    // An error result for a call the loop does not run (or stops).
    asio::awaitable<bool> close_call(session::tool_call call, std::string output);

    session_writer& writer_;
    const tool_registry& tools_;
    clock& clock_;
    milliseconds timeout_;
    abort_signal& abort_;
};

}  // namespace wuhu::worker
