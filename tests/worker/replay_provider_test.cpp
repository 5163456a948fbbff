// The replay provider (providers/replay_provider.hpp): a session run on a recorded provider
// replays, from the recording alone, to the identical transcript, deltas and retries
// included; and a recording that lacks a request says which.
#include "providers/replay_provider.hpp"
#include "providers/scripted_provider.hpp"
#include "storage/memory_store.hpp"
#include "tests/providers/provider_streams.hpp"
#include "tests/support/builders.hpp"
#include "tests/support/temp_dir.hpp"
#include "tools/tools.hpp"
#include "worker/agent_loop.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <fstream>

namespace wuhu::testing {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// One session driven to idle on `p`: two follow-ups, one after the other. Its transcript's
// bodies (times differ between runs) and the text deltas its observers saw.
struct run_result {
    std::vector<session::entry_body> bodies;
    std::vector<std::string> deltas;
};

run_result run_session(providers::provider& p) {
    asio::io_context io;
    runtime::system_clock clk;
    storage::memory_store store;
    tools::tool_registry tools;
    tools::add_builtin_tools(tools);
    worker::loop_options opts;
    opts.retry.base = 5ms;
    opts.jitter_seed = 7;
    worker::agent_loop loop(io.get_executor(),
                            store.open(session::session_id::parse("rec").value(),
                                       session::lease_epoch{1})
                                .value(),
                            p, tools, clk, opts);
    EXPECT_FALSE(loop.load());
    run_result out;
    auto watching = loop.observe([&](const worker::loop_event& ev) {
        if (const auto* d = std::get_if<worker::stream_delta_event>(&ev); d && !d->tool_call) {
            out.deltas.push_back(d->text);
        }
    });
    asio::cancellation_signal stop;
    asio::co_spawn(io, loop.start(), asio::bind_cancellation_slot(stop.slot(), asio::detached));
    auto settle = [&] {
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (std::chrono::steady_clock::now() < deadline) {
            io.run_one_for(5ms);
            if (!loop.state().has_work) {
                break;
            }
        }
    };
    for (const char* id : {"f1", "f2"}) {
        auto send = [&, id]() -> asio::awaitable<void> {
            worker::command c = worker::enqueue_command{
                user_in(session::lane::follow_up, id, std::string("question ") + id)};
            auto task = loop.send(std::move(c));
            co_await std::move(task);
        };
        asio::co_spawn(io, send(), asio::detached);
        for (int i = 0; i < 20; ++i) {
            io.run_one_for(5ms);
        }
        settle();
    }
    for (const auto& e : loop.state().transcript) {
        out.bodies.push_back(e.body);
        if (auto* p = std::get_if<session::party_message>(&out.bodies.back())) {
            p->sent_at = {};  // a time, as the entry's: they differ between runs
        }
    }
    stop.emit(asio::cancellation_type::terminal);
    io.restart();
    io.run_for(200ms);
    return out;
}

}  // namespace

TEST(Replay, ARecordedSessionReplaysToTheIdenticalTranscript) {
    temp_dir dir;
    const auto file = dir.path() / "session.jsonl";
    runtime::system_clock clk;
    // The recorded provider: streamed chunks with pauses, a tool call, a transient failure
    // retried, usage.
    auto script = providers::parse_script(R"({"responses":[
        {"chunks":["Let me ","check."],"chunk_delay_ms":20,
         "tool_calls":[{"name":"echo","arguments":{"text":"hi"}}],
         "fail_first":[{"kind":"transient","message":"overloaded"}]},
        {"text":"It says hi."},
        {"chunks":["Second ","answer."],"chunk_delay_ms":10,
         "usage":{"input":100,"cached_input":20,"output":5}}]})");
    ASSERT_TRUE(script) << script.error().message();
    run_result recorded;
    {
        auto rec = providers::replay_provider::recording(
            std::make_unique<providers::scripted_provider>(*script, clk), file, clk);
        recorded = run_session(*rec);
    }
    ASSERT_EQ(recorded.bodies.size(), 7u) << "2 questions, 3 answers, a tool's start and result";
    auto play = providers::replay_provider::playing(file, clk);
    const auto replayed = run_session(*play);
    EXPECT_EQ(replayed.bodies, recorded.bodies);
    EXPECT_EQ(replayed.deltas, recorded.deltas) << "the same chunking";
    // Played once: a session that asks again gets a clear error, not a made-up answer.
    recording_sink sink;
    providers::inference_request again;
    again.session = "rec";
    again.step = 0;
    asio::io_context io;
    std::optional<providers::inference_outcome> out;
    asio::co_spawn(io, play->infer(again, sink),
                   [&](std::exception_ptr, providers::inference_outcome o) { out = std::move(o); });
    io.run();
    ASSERT_TRUE(out && std::holds_alternative<providers::provider_error>(*out));
    EXPECT_EQ(std::get<providers::provider_error>(*out).kind,
              providers::provider_error_kind::fatal);
    EXPECT_NE(std::get<providers::provider_error>(*out).message.find("session rec at step 0"),
              std::string::npos);
}

TEST(Replay, ARecordingThatIsNotOneIsRefusedNamingTheLine) {
    temp_dir dir;
    runtime::system_clock clk;
    const auto file = dir.path() / "bad.jsonl";
    std::ofstream(file) << R"({"session":"s","kind":"infer","step":0,"outcome":{"summary":"x"}})"
                        << "\n{not json}\n";
    try {
        providers::replay_provider::playing(file, clk);
        ADD_FAILURE() << "a bad recording was played";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
    }
    EXPECT_THROW(providers::replay_provider::playing(dir.path() / "missing.jsonl", clk),
                 std::invalid_argument);
}

}  // namespace wuhu::testing
