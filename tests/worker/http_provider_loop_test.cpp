// The loop over a real HTTP provider (providers/http_provider.hpp) in front of a local server:
// the loop's retries of a provider's transient failures, as the transcript shows them.
#include "storage/memory_store.hpp"
#include "tests/providers/local_endpoint.hpp"
#include "tests/support/builders.hpp"
#include "tools/tools.hpp"
#include "worker/agent_loop.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <gtest/gtest.h>

namespace wuhu::testing {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using providers::api_kind;

// Through the loop: a stream cut in the middle, then a 500, then the whole answer. The loop
// retries the transient failures; the transcript holds the whole answer once, and nothing of
// the cut one.
TEST(OpenAiProvider, ACutStreamAndA500AreRetriedAndOnlyTheWholeAnswerIsCommitted) {
    int requests = 0;
    endpoint e(api_kind::openai, [&](const http_received&) {
        ++requests;
        http_plan p;
        const auto all = saved_stream("openai_text.sse");
        if (requests == 1) {
            p.pieces = {{0ms, all.substr(0, all.find("data: {", 600))}};  // "Hello" only
            p.cut = true;
        } else if (requests == 2) {
            p = answer(500, R"({"error":{"message":"boom","type":"server_error"}})");
        } else {
            p.pieces = streamed("openai_text.sse");
        }
        return p;
    });
    storage::memory_store store;
    tools::tool_registry tools;
    worker::loop_options opts;
    opts.retry.base = 10ms;
    worker::agent_loop loop(e.io.get_executor(),
                            store.open(session::session_id::parse("s").value(),
                                       session::lease_epoch{1})
                                .value(),
                            *e.provider, tools, e.clock, opts);
    ASSERT_FALSE(loop.load());
    asio::cancellation_signal stop;
    asio::co_spawn(e.io, loop.start(), asio::bind_cancellation_slot(stop.slot(), asio::detached));
    auto send = [&]() -> asio::awaitable<void> {
        worker::command c =
            worker::enqueue_command{user_in(session::lane::follow_up, "f1", "hello?")};
        auto task = loop.send(std::move(c));
        co_await std::move(task);
    };
    asio::co_spawn(e.io, send(), asio::detached);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    auto answered = [&] {
        for (const auto& en : loop.state().transcript) {
            if (std::holds_alternative<session::assistant_message>(en.body)) {
                return true;
            }
        }
        return false;
    };
    while (!(answered() && !loop.state().has_work) && std::chrono::steady_clock::now() < deadline) {
        e.io.run_one_for(10ms);
    }
    std::vector<std::string> said;
    for (const auto& en : loop.state().transcript) {
        if (const auto* m = std::get_if<session::assistant_message>(&en.body)) {
            said.push_back(m->text);
        }
    }
    EXPECT_EQ(said, std::vector<std::string>{"Hello, wörld!"});
    EXPECT_EQ(requests, 3);
    stop.emit(asio::cancellation_type::terminal);
    e.io.restart();
    e.io.run_for(1s);
}

}  // namespace wuhu::testing
