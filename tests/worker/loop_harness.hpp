// A deterministic harness for the agent loop: one io_context on this thread, a manual clock,
// a store (in-memory unless given), the scripted provider and the built-in tools. Time moves
// only when the harness runs out of ready work and advances the clock to the next deadline.
#pragma once

#include "providers/scripted_provider.hpp"
#include "storage/memory_store.hpp"
#include "tests/support/builders.hpp"
#include "worker/agent_loop.hpp"

#include <gtest/gtest.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <functional>

namespace wuhu::testing {

namespace asio = boost::asio;
using std::chrono::milliseconds;
using worker::command;
using worker::command_reply;
using worker::loop_event;

inline constexpr std::int64_t harness_t0 = 1771340160000;  // 26/2/17 14:56 UTC

class loop_harness {
  public:
    // `script_json` as in docs/scripted-provider.md. `store` defaults to an in-memory store.
    // `key`: the session's key (`<tenant>.<id>` for a tenant's).
    explicit loop_harness(const std::string& script_json, storage::session_store* store = nullptr,
                          std::uint64_t epoch = 1, worker::loop_options opts = default_options(),
                          const std::string& key = "s1");

    static worker::loop_options default_options();

    void start();
    // Sends a command and runs until its reply, without moving the clock.
    boost::system::result<command_reply> send(command c);
    // Sends the commands at once (each waits for the loop as concurrent requests do) and runs
    // until every reply, without moving the clock. The replies in the commands' order.
    std::vector<boost::system::result<command_reply>> send_all(std::vector<command> cs);
    // Runs until the loop is quiescent, moving the clock as needed (bounded).
    void settle();
    // Runs ready work without moving the clock.
    void poll();
    // Runs until `done()`, moving the clock when nothing else can run. False if stuck.
    bool run_until(const std::function<bool()>& done, bool move_clock = true);
    // Cancels start() and runs until it returned.
    void stop();

    // Commands by name.
    boost::system::result<command_reply> follow_up(const std::string& id, const std::string& text);
    boost::system::result<command_reply> steer(const std::string& id, const std::string& text);
    boost::system::result<command_reply> system(const std::string& id, const std::string& text);

    worker::agent_loop& loop() { return *loop_; }
    asio::io_context& io() { return io_; }
    providers::scripted_provider& provider() { return *provider_; }
    runtime::manual_clock& clock() { return clock_; }
    tools::tool_registry& tools() { return tools_; }
    storage::session_store& store() { return *store_; }
    const session_state& state() const { return loop_->state(); }
    const std::vector<loop_event>& events() const { return events_; }
    bool finished() const { return finished_; }

    // Contents of the transcript's message entries, for compact assertions.
    std::vector<std::string> transcript_texts() const;
    // The message of the transcript's last diagnostic ("" when there is none).
    std::string diagnostic_message() const;

  private:
    asio::io_context io_;
    runtime::manual_clock clock_{unix_ms{harness_t0}};
    storage::memory_store own_store_;
    storage::session_store* store_;
    std::unique_ptr<providers::scripted_provider> provider_;
    tools::tool_registry tools_;
    // Before the loop: a test may end with the loop's coroutine waiting, and the loop's waits
    // then hold this signal's slot until the loop is gone.
    asio::cancellation_signal stop_;
    std::unique_ptr<worker::agent_loop> loop_;
    worker::subscription sub_;
    std::vector<loop_event> events_;
    bool finished_ = false;
};

// A tool that is not idempotent and counts its executions per call id.
class counting_tool final : public tools::tool {
  public:
    explicit counting_tool(std::map<std::string, int>& runs) : runs_(runs) {}
    const session::tool_spec& spec() const override { return spec_; }
    bool idempotent() const override { return false; }
    asio::awaitable<tools::tool_output> execute(std::string,
                                                 tools::tool_call_context ctx) override;

  private:
    std::map<std::string, int>& runs_;
    session::tool_spec spec_{"charge", "Charges a card (not idempotent).", "{}"};
};

// What the loop tests share.

inline bool context_mentions(const providers::inference_request& r, const std::string& text) {
    for (const auto& m : r.context) {
        if (m.content.find(text) != std::string::npos) {
            return true;
        }
    }
    return false;
}

template <class E>
std::vector<E> events_of(const loop_harness& h) {
    std::vector<E> out;
    for (const auto& e : h.events()) {
        if (const auto* x = std::get_if<E>(&e)) {
            out.push_back(*x);
        }
    }
    return out;
}

// A configure command that sets the context limits (compaction triggers above
// limit - buffer and keeps the newest `keep` tokens).
inline worker::configure_command limits(std::uint64_t limit, std::uint64_t buffer,
                                        std::uint64_t keep) {
    session::settings_update c;
    c.context_limit = limit;
    c.compaction_buffer = buffer;
    c.keep_recent_tokens = keep;
    return worker::configure_command{c};
}

}  // namespace wuhu::testing
