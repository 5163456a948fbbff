// Pure-domain costs: how long the reducer, the stable patch and the context projection take.
// These bound the CPU the owner spends per durable operation; the durable cost (commits) is
// measured by the storage benchmarks.
#include "session/context.hpp"
#include "session/patch.hpp"
#include "session/reducer.hpp"
#include "session/rules.hpp"

#include <benchmark/benchmark.h>

namespace {

using namespace wuhu::session;

session_state conversation(int turns) {
    session_state s;
    for (int i = 0; i < turns; ++i) {
        auto id = queue_item_id::parse("f" + std::to_string(i)).value();
        auto out = plan_enqueue(
            s,
            enqueue_input{lane::follow_up, id, user_input{unknown_author{}, std::string(200, 'u')}},
            unix_ms{i});
        apply_actions(out.value().actions, s);
        apply_actions(plan_drain(s, checkpoint::follow_up, unix_ms{i}), s);
        assistant_message m;
        m.text = std::string(400, 'a');
        apply_actions(plan_append_assistant(s, m, unix_ms{i}).value(), s);
    }
    return s;
}

void BM_EnqueueDrainReply(benchmark::State& st) {
    session_state s;
    std::int64_t i = 0;
    for (auto _ : st) {
        auto id = queue_item_id::parse("f" + std::to_string(i)).value();
        auto out = plan_enqueue(
            s, enqueue_input{lane::follow_up, id, user_input{unknown_author{}, "hello"}},
            unix_ms{i});
        apply_actions(out.value().actions, s);
        apply_actions(plan_drain(s, checkpoint::follow_up, unix_ms{i}), s);
        assistant_message m;
        m.text = "hi";
        apply_actions(plan_append_assistant(s, m, unix_ms{i}).value(), s);
        ++i;
    }
    st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_EnqueueDrainReply);

void BM_SinceLastTurn(benchmark::State& st) {
    session_state s = conversation(static_cast<int>(st.range(0)));
    version_vector v = s.version();
    v.transcript -= 3;
    v.follow_up -= 2;
    for (auto _ : st) {
        benchmark::DoNotOptimize(since(s, v));
    }
}
BENCHMARK(BM_SinceLastTurn)->Arg(100)->Arg(10000);

void BM_ProjectContext(benchmark::State& st) {
    session_state s = conversation(static_cast<int>(st.range(0)));
    for (auto _ : st) {
        benchmark::DoNotOptimize(project_context(s, openai_roles));
    }
}
BENCHMARK(BM_ProjectContext)->Arg(100)->Arg(1000);

}  // namespace

BENCHMARK_MAIN();
