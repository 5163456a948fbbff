// Agent-loop overhead: the cost of the loop's own machinery per step, with an in-memory store,
// an instant scripted provider and instant tools, so nothing but the loop is measured. And the
// latency of an enqueue while an inference is in flight, for inferences of very different
// lengths: the figures must not grow with the inference time.
#include "providers/scripted_provider.hpp"
#include "storage/memory_store.hpp"
#include "worker/agent_loop.hpp"

#include <benchmark/benchmark.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <string>

namespace {

namespace asio = boost::asio;
namespace s = wuhu::session;
namespace w = wuhu::worker;

struct rig {
    asio::io_context io;
    wuhu::runtime::manual_clock clock{s::unix_ms{1'700'000'000'000}};
    wuhu::storage::memory_store store;
    wuhu::tools::tool_registry tools;
    std::unique_ptr<wuhu::providers::scripted_provider> provider;
    std::unique_ptr<w::agent_loop> loop;

    explicit rig(const std::string& script) {
        wuhu::tools::add_builtin_tools(tools);
        provider = std::make_unique<wuhu::providers::scripted_provider>(
            wuhu::providers::parse_script(script).value(), clock);
        auto log = store.open(s::session_id::parse("bench").value(), s::lease_epoch{1}).value();
        loop = std::make_unique<w::agent_loop>(io.get_executor(), std::move(log), *provider, tools,
                                               clock);
        asio::co_spawn(io, loop->start(), asio::detached);
        io.poll();
    }

    void send(w::command c) {
        bool done = false;
        asio::co_spawn(
            io, loop->send(std::move(c)),
            [&done](std::exception_ptr, boost::system::result<w::command_reply>) { done = true; });
        while (!done) {
            io.restart();
            io.poll();
        }
    }

    void settle() {
        do {
            io.restart();
            io.poll();
        } while (!loop->quiescent() && clock.advance_to_next());
    }
};

s::enqueue_input follow_up(std::int64_t i) {
    return s::enqueue_input{s::lane::follow_up,
                            s::queue_item_id::parse("f" + std::to_string(i)).value(),
                            s::user_input{s::unknown_author{}, "hello"}};
}

// One turn with one tool call: enqueue, drain, infer, append, will, echo, did, drain (empty:
// no commit), infer, append, mark idle (7 commits, 2 inference steps). Each session runs 50 turns,
// a realistic conversation length, so the figure is the loop's cost and not a 10,000-turn context.
void BM_LoopTurnWithOneToolCall(benchmark::State& st) {
    constexpr int turns = 50;
    std::string responses;
    for (int i = 0; i < 2 * turns; ++i) {
        responses += i % 2 == 0 ? R"({"tool_calls":[{"name":"echo","arguments":{"text":"x"}}]},)"
                                : R"({"text":"ok"},)";
    }
    responses.pop_back();
    const std::string script = R"({"responses":[)" + responses + "]}";
    std::uint64_t commits = 0;
    for (auto _ : st) {
        st.PauseTiming();
        auto r = std::make_unique<rig>(script);
        st.ResumeTiming();
        for (int i = 0; i < turns; ++i) {
            r->send(w::enqueue_command{follow_up(i)});
            r->settle();
        }
        st.PauseTiming();
        commits += r->store.commits();
        if (r->loop->state().transcript.size() != 5u * turns) {
            st.SkipWithError("unexpected transcript");
            break;
        }
        r.reset();
        st.ResumeTiming();
    }
    st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * turns);
    st.counters["commits_per_turn"] =
        static_cast<double>(commits) / static_cast<double>(st.iterations() * turns);
    st.counters["steps"] = benchmark::Counter(static_cast<double>(st.iterations() * turns * 2),
                                              benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LoopTurnWithOneToolCall)->Unit(benchmark::kMillisecond);

// Enqueue + cancel round trips while an inference of `range(0)` ms is in flight (the clock
// never reaches its end).
void BM_EnqueueWhileInferring(benchmark::State& st) {
    rig r(R"({"responses":[{"text":"slow","delay_ms":)" + std::to_string(st.range(0)) + "}]}");
    r.send(w::enqueue_command{follow_up(-1)});
    std::int64_t i = 0;
    for (auto _ : st) {
        auto id = s::queue_item_id::parse("s" + std::to_string(i++)).value();
        r.send(w::enqueue_command{
            s::enqueue_input{s::lane::steer, id, s::user_input{s::unknown_author{}, "steer"}}});
        r.send(w::cancel_command{s::lane::steer, id});
    }
    if (r.loop->current() != s::loop_state::inferring) {
        st.SkipWithError("the inference was not in flight");
    }
}
BENCHMARK(BM_EnqueueWhileInferring)->Arg(1'000)->Arg(3'600'000)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
