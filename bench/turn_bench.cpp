// Turn throughput (issue 16): S sessions x T turns, C in flight, driven over NATS against a
// wuhu-worker process on the scripted model, which answers at once. A turn is a user message
// -> model -> K tool calls (`echo`) -> model -> answer; it ends when the session is idle again
// with the answer committed.
//
// Per store it prints: turns/s, turn latency p50/p99, CPU ms per turn per process (worker,
// this client, nats-server, PostgreSQL), durable commits per turn (the worker's
// wuhu_store_commit_duration_seconds count) and fsyncs per turn (counted by
// libfsync_count.so preloaded into the worker; PostgreSQL's own from pg_stat_wal), disk bytes
// per turn, new sessions per second with their fsyncs per creation, and the ratio of turns/s
// to the budget measured in the same run: the raw commit rate of the same file pattern (C
// threads, each committing one row at a time to a file of its own; C PostgreSQL connections)
// divided by the commits per turn. Each figure beside its goal and the baseline of issue 16.
//
// --admission-cost: the same for admission control (issue 30): its bounds at their defaults,
// against all of them at 0 (off).
// --metrics-cost: the metrics' cost (issue 15): the same workload with the worker's metrics
// on and off (--metrics-addr off records nothing), alternating, on the memory store (where the
// worker's CPU is all there is to see).
//
// Needs a nats-server (WUHU_BENCH_NATS_URL or WUHU_TEST_NATS_URL) and, for `postgres`, a
// PostgreSQL server (WUHU_BENCH_PG_DSN or WUHU_TEST_PG_DSN); scripts/bench starts both, and
// names their PIDs (WUHU_BENCH_NATS_PID, WUHU_BENCH_PG_PID) for the CPU figures.
//
//   turn_bench [--stores sqlite-full,sqlite-normal,postgres,memory] [-S 100] [-T 10] [-K 2]
//              [-C 10] [--runs 1] [--metrics-cost] [--admission-cost]
#include "bench/turn_probes.hpp"
#include "bench/turn_report.hpp"
#include "bench/turn_worker.hpp"
#include "nats/connection.hpp"
#include "tests/support/http_get.hpp"

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <pqxx/pqxx>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

namespace {

using namespace wuhu::bench;
namespace json = boost::json;
using namespace std::chrono_literals;

// The script: step 2t calls `echo` K times, step 2t+1 answers.
std::string script(const workload& w) {
    json::array responses;
    for (int t = 0; t < w.turns; ++t) {
        json::array calls;
        for (int k = 0; k < w.tools; ++k) {
            calls.push_back(json::object{{"name", "echo"}, {"arguments", {{"text", "x"}}}});
        }
        responses.push_back(json::object{{"text", "calling"}, {"tool_calls", calls}});
        responses.push_back(json::object{{"text", "turn-complete"}});
    }
    return json::serialize(json::object{{"responses", responses}});
}

// --- the client -----------------------------------------------------------------------------

// What one session's events say about its current turn.
struct turn_slot {
    std::mutex mu;
    std::condition_variable cv;
    bool answered = false;  // the answer was committed
    bool done = false;      // and the session is idle with nothing left to do
};

struct counters {
    double worker_cpu, client_cpu, nats_cpu, pg_cpu, commits, fsyncs, fsync_ns, written;
};

run_result run(const store_kind& kind, const workload& w, bool metrics, int round) {
    run_result out;
    // What the previous run left dirty is written back now, not by the kernel's threads in
    // the middle of this run's turns.
    ::sync();
    const std::string nats_url = env_or("WUHU_BENCH_NATS_URL", "WUHU_TEST_NATS_URL");
    std::random_device rd;
    const fs::path dir = fs::temp_directory_path() / ("wuhu-turn-bench-" + std::to_string(rd()));
    fs::create_directories(dir);
    const bool pg = kind.name == "postgres";
    const bool memory = kind.name == "memory";
    std::string store = "memory";
    if (kind.name.starts_with("sqlite")) {
        store = "sqlite://" + (dir / "data").string();
    } else if (pg) {
        store = fresh_pg_database();
    }
    const std::string prefix = "tb" + std::to_string(::getpid()) + "r" + std::to_string(round);
    fsync_counter fsyncs(dir / "fsyncs");
    worker_process::set_script(script(w));
    worker_process::set_extra_args(w.worker_args);
    const pid_t nats_pid = std::atoi(env_or("WUHU_BENCH_NATS_PID", "").c_str());
    const pid_t pg_pid = pg ? std::atoi(env_or("WUHU_BENCH_PG_PID", "").c_str()) : 0;

    // The sessions' slots outlive the connections (a handler may run until they are gone).
    std::vector<std::string> sids;
    std::map<std::string, std::unique_ptr<turn_slot>, std::less<>> slots;
    for (int i = 0; i < w.sessions; ++i) {
        sids.push_back("s" + std::to_string(i));
        slots.emplace(sids.back(), std::make_unique<turn_slot>());
    }
    wuhu::nats::connection requests(nats_url, "turn-bench");
    wuhu::nats::connection events(nats_url, "turn-bench-events");
    const std::string session_subject = prefix + ".session.";
    const std::string events_prefix = prefix + ".events.";
    const auto subscription = events.subscribe(events_prefix + "*.patch", [&](wuhu::nats::message m) {
        const auto sid = std::string_view(m.subject).substr(
            events_prefix.size(), m.subject.size() - events_prefix.size() - 6);
        const auto it = slots.find(sid);
        if (it == slots.end()) {
            return;
        }
        auto& slot = *it->second;
        const bool answer = m.data.find(R"("text":"turn-complete")") != std::string::npos;
        const bool idle = m.data.find(R"("state":"idle")") != std::string::npos &&
                          m.data.find(R"("has_work":false)") != std::string::npos;
        if (!answer && !idle) {
            return;
        }
        std::lock_guard lock(slot.mu);
        slot.answered = slot.answered || answer;
        if (idle && slot.answered) {
            slot.done = true;
            slot.cv.notify_all();
        }
    });
    events.flush();

    std::optional<worker_process> worker;
    // Starts the worker and waits until it answers.
    auto start_worker = [&]() -> bool {
        worker.emplace(dir, nats_url, store, kind.name == "sqlite-normal" ? "normal" : "full",
                       metrics, prefix, fsyncs);
        return worker->wait_until_up(requests, session_subject, dir, "turn_bench");
    };
    auto stop_worker = [&] {
        if (!worker->stop()) {
            std::fprintf(stderr, "turn_bench: the worker did not stop cleanly; see %s\n",
                         (dir / "worker.log").c_str());
            return false;
        }
        return true;
    };
    auto snapshot = [&] {
        return counters{cpu_ms(worker->pid()),    cpu_ms(::getpid()),
                        cpu_ms(nats_pid),         tree_cpu_ms(pg_pid),
                        worker->commits(),        static_cast<double>(fsyncs.value()),
                        static_cast<double>(fsyncs.ns()),
                        written_bytes(worker->pid())};
    };
    // PostgreSQL's WAL syncs and bytes. Its backends report them when they exit, or within
    // 10 s of going idle: `settled` waits for that.
    auto wal = [&](bool settled) {
        if (!pg) {
            return wal_stats{};
        }
        std::this_thread::sleep_for(settled ? 11s : 1s);
        return pg_wal();
    };
    auto stored = [&] { return pg ? pg_database_bytes() : stored_bytes(dir / "data"); };
    // C threads, each with its share of the sessions.
    auto in_parallel = [&](const std::function<bool(const std::string& sid)>& each) {
        std::atomic<bool> ok{true};
        std::vector<std::thread> threads;
        for (int c = 0; c < w.in_flight; ++c) {
            threads.emplace_back([&, c] {
                for (std::size_t i = static_cast<std::size_t>(c); i < sids.size() && ok;
                     i += static_cast<std::size_t>(w.in_flight)) {
                    ok = ok && each(sids[i]);
                }
            });
        }
        for (auto& t : threads) {
            t.join();
        }
        return ok.load();
    };
    auto ask = [&](const std::string& sid, const char* verb) {
        auto r = requests.request(session_subject + sid + "." + verb, "{}", 30s);
        if (!r || r->find(R"("ok":true)") == std::string::npos) {
            std::fprintf(stderr, "turn_bench: %s of %s failed: %s\n", verb, sid.c_str(),
                         r ? r->c_str() : "no reply");
            return false;
        }
        return true;
    };

    // 1. Session creation: a configure request creates each session (unless the turns make
    // them: --new-sessions).
    if (!start_worker()) {
        return out;
    }
    double stored_before = 0;
    if (w.new_sessions && !memory) {
        stored_before = stored();
    }
    if (!w.new_sessions) {
        auto wal_before = wal(true);
        auto before = snapshot();
        auto start = clock_type::now();
        if (!in_parallel([&](const std::string& sid) { return ask(sid, "configure"); })) {
            return out;
        }
        out.creations_per_s = w.sessions / seconds_since(start);
        auto after = snapshot();
        const double n_sessions = w.sessions;
        if (after.commits >= 0) {
            out.commits_per_creation = (after.commits - before.commits) / n_sessions;
        }
        // A persistent store starts the turns with the sessions stored (a worker that stops
        // checkpoints its files) and loaded again (a subscribe loads each one), so that what the
        // turns store is what they add.
        if (!memory) {
            if (!stop_worker()) {
                return out;
            }
            stored_before = stored();
        }
        auto wal_after = wal(false);
        out.fsyncs_per_creation =
            (after.fsyncs - before.fsyncs + (wal_after.syncs - wal_before.syncs)) / n_sessions;
        if (!memory && (!start_worker() || !in_parallel([&](const std::string& sid) {
                return ask(sid, "subscribe");
            }))) {
            return out;
        }
    }  // !w.new_sessions

    // 2. Turns: each thread takes its sessions turn by turn (turn t of every one of them,
    // then turn t + 1).
    std::vector<std::vector<double>> latencies(static_cast<std::size_t>(w.in_flight));
    auto wal_before = wal(true);
    auto before = snapshot();
    auto start = clock_type::now();
    std::atomic<bool> ok{true};
    // --new-sessions: every thread meets the others once after the first turns (which made
    // the sessions), so that they and the later turns are measured apart.
    counters first{};
    std::barrier first_turns(w.in_flight, [&]() noexcept { first = snapshot(); });
    {
        std::vector<std::thread> threads;
        for (int c = 0; c < w.in_flight; ++c) {
            threads.emplace_back([&, c] {
                bool met = false;  // the others, after the first turns
                for (int t = 0; t < w.turns && ok; ++t) {
                    for (std::size_t i = static_cast<std::size_t>(c); i < sids.size() && ok;
                         i += static_cast<std::size_t>(w.in_flight)) {
                        auto& slot = *slots.find(sids[i])->second;
                        {
                            std::lock_guard lock(slot.mu);
                            slot.answered = slot.done = false;
                        }
                        const auto t0 = clock_type::now();
                        auto r = requests.request(
                            session_subject + sids[i] + ".enqueue",
                            R"({"lane":"followUp","id":"u)" + std::to_string(t) +
                                R"(","content":"turn )" + std::to_string(t) + R"("})",
                            30s);
                        if (!r || r->find(R"("ok":true)") == std::string::npos) {
                            std::fprintf(stderr, "turn_bench: enqueue to %s failed: %s\n",
                                         sids[i].c_str(), r ? r->c_str() : "no reply");
                            ok = false;
                            break;
                        }
                        std::unique_lock lock(slot.mu);
                        if (!slot.cv.wait_for(lock, 60s, [&] { return slot.done; })) {
                            std::fprintf(stderr, "turn_bench: turn %d of %s did not end\n", t,
                                         sids[i].c_str());
                            ok = false;
                            break;
                        }
                        latencies[static_cast<std::size_t>(c)].push_back(
                            std::chrono::duration<double, std::milli>(clock_type::now() - t0)
                                .count());
                    }
                    if (t == 0 && w.new_sessions) {
                        first_turns.arrive_and_wait();  // whether or not they went well
                        met = true;
                    }
                }
                // A thread that never began (another one failed first) leaves the meeting.
                if (w.new_sessions && !met) {
                    first_turns.arrive_and_drop();
                }
            });
        }
        for (auto& t : threads) {
            t.join();
        }
    }
    const double elapsed = seconds_since(start);
    auto after = snapshot();
    if (!ok) {
        return out;
    }
    const double turns = static_cast<double>(w.sessions) * w.turns;
    std::vector<double> all;
    for (auto& l : latencies) {
        all.insert(all.end(), l.begin(), l.end());
    }
    std::sort(all.begin(), all.end());
    out.turns_per_s = turns / elapsed;
    out.p50_ms = all[all.size() / 2];
    out.p99_ms = all[static_cast<std::size_t>(0.99 * static_cast<double>(all.size() - 1))];
    out.worker_cpu = (after.worker_cpu - before.worker_cpu) / turns;
    out.client_cpu = (after.client_cpu - before.client_cpu) / turns;
    out.nats_cpu = (after.nats_cpu - before.nats_cpu) / turns;
    out.pg_cpu = (after.pg_cpu - before.pg_cpu) / turns;
    if (after.commits >= 0) {
        out.commits = (after.commits - before.commits) / turns;
    }
    if (w.new_sessions && w.turns > 1) {
        // A first turn less a later one, per session.
        const double n = w.sessions;
        const double later = n * (w.turns - 1);
        auto cost = [&](double counters::*f) {
            return (first.*f - before.*f) / n - (after.*f - first.*f) / later;
        };
        out.new_worker_cpu = cost(&counters::worker_cpu);
        out.new_client_cpu = cost(&counters::client_cpu);
        out.new_nats_cpu = cost(&counters::nats_cpu);
        out.new_pg_cpu = cost(&counters::pg_cpu);
        out.new_fsyncs = cost(&counters::fsyncs);
        if (after.commits >= 0) {
            out.new_commits = cost(&counters::commits);
        }
    }
    out.written_bytes = (after.written - before.written) / turns;
    if (after.fsyncs > before.fsyncs) {
        out.fsync_ms = (after.fsync_ns - before.fsync_ns) / 1e6 / (after.fsyncs - before.fsyncs);
    }
    events.unsubscribe(subscription);
    if (!stop_worker()) {
        return out;
    }
    // What the turns left stored (SQLite files checkpointed by the worker's stop).
    out.stored_bytes = (stored() - stored_before) / turns;
    auto wal_after = wal(false);
    out.fsyncs = (after.fsyncs - before.fsyncs + (wal_after.syncs - wal_before.syncs)) / turns;
    out.wal_bytes = (wal_after.bytes - wal_before.bytes) / turns;
    out.ok = true;
    removed_at_exit.add(dir);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"turn_bench: turns per second through a wuhu-worker over NATS"};
    workload w;
    std::string stores = "sqlite-full,sqlite-normal,postgres,memory";
    bool metrics_cost = false;
    bool admission_cost = false;
    int rounds = 5;
    int runs = 1;
    app.add_option("--stores", stores, "comma-separated: sqlite-full, sqlite-normal, postgres, memory");
    app.add_option("-S,--sessions", w.sessions)->check(CLI::Range(1, 100000));
    app.add_option("-T,--turns", w.turns)->check(CLI::Range(1, 1000));
    app.add_option("-K,--tool-calls", w.tools)->check(CLI::Range(0, 64));
    app.add_option("-C,--in-flight", w.in_flight)->check(CLI::Range(1, 1000));
    app.add_flag("--new-sessions", w.new_sessions,
                 "the turns make the sessions, inside the timed window (the peers' workload, "
                 "issue 36), and a new session's cost is printed");
    std::vector<std::string> peers;
    app.add_option("--peer", peers,
                   "--new-sessions: a peer's turns/s on this workload, as STORE=TPS "
                   "(sqlite-full, sqlite-normal; default issue 36's 680 and 2315)");
    app.add_option("--worker-arg", w.worker_args,
                   "a flag for wuhu-worker (repeat: --worker-arg=--store-threads --worker-arg=8)");
    app.add_flag("--metrics-cost", metrics_cost,
                 "the memory store with metrics on and off, alternating (issue 15)");
    app.add_flag("--admission-cost", admission_cost,
                 "the memory store with admission control (issue 30) on and off, alternating");
    app.add_option("--rounds", rounds, "--metrics-cost, --admission-cost: runs of each")
        ->check(CLI::Range(1, 20));
    app.add_option("--runs", runs,
                   "runs of each store: each run's turns/s, then the figures of the median run")
        ->check(CLI::Range(1, 20));
    CLI11_PARSE(app, argc, argv);
    for (const auto& p : peers) {
        const auto eq = p.find('=');
        const auto store = p.substr(0, eq);
        double tps = 0;
        if (eq == std::string::npos || (store != "sqlite-full" && store != "sqlite-normal") ||
            std::sscanf(p.c_str() + eq + 1, "%lf", &tps) != 1 || tps <= 0) {
            std::fprintf(stderr, "turn_bench: --peer takes sqlite-full=TPS or sqlite-normal=TPS\n");
            return 2;
        }
        w.peers[store] = tps;
    }
    if (env_or("WUHU_BENCH_NATS_URL", "WUHU_TEST_NATS_URL").empty()) {
        std::fprintf(stderr, "turn_bench: set WUHU_BENCH_NATS_URL (scripts/bench does)\n");
        return 2;
    }
    w.in_flight = std::min(w.in_flight, w.sessions);

    if (metrics_cost || admission_cost) {
        // Long runs: the difference is small beside the noise of a 2-core machine.
        if (app.count("-T") == 0) {
            w.turns = 40;
        }
        const char* what = metrics_cost ? "metrics" : "admission control";
        // Admission control off: every bound of issue 30 that a request meets, at 0.
        const std::vector<std::string> off_args{
            "--max-requests-in-flight=0", "--max-commands-per-session=0", "--lane-max-items=0",
            "--lane-max-bytes=0"};
        const auto base_args = w.worker_args;
        const auto& kind = kinds().at("memory");
        std::vector<double> on_tps, off_tps, on_cpu, off_cpu;
        for (int i = 0; i < rounds; ++i) {
            for (bool on : {true, false}) {
                w.worker_args = base_args;
                if (admission_cost && !on) {
                    w.worker_args.insert(w.worker_args.end(), off_args.begin(), off_args.end());
                }
                const auto r = run(kind, w, metrics_cost ? on : true, 2 * i + (on ? 0 : 1));
                if (!r.ok) {
                    return 1;
                }
                (on ? on_tps : off_tps).push_back(r.turns_per_s);
                (on ? on_cpu : off_cpu).push_back(r.worker_cpu);
                std::printf("  %s %-3s  %6.0f turns/s, worker %.3f CPU ms per turn\n", what,
                            on ? "on" : "off", r.turns_per_s, r.worker_cpu);
            }
        }
        auto median = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        const double tps_on = median(on_tps), tps_off = median(off_tps);
        const double cpu_on = median(on_cpu), cpu_off = median(off_cpu);
        std::printf(
            "%s cost, memory store, S=%d T=%d K=%d C=%d, median of %d runs each "
            "(goal: under 2%%):\n"
            "  turns/s              on %.0f, off %.0f: it costs %+.1f%%\n"
            "  worker CPU per turn  on %.3f ms, off %.3f ms: it costs %+.1f%%\n"
            "  (a negative cost is the noise of the machine)\n",
            what, w.sessions, w.turns, w.tools, w.in_flight, rounds, tps_on, tps_off,
            100.0 * (tps_off - tps_on) / tps_off, cpu_on, cpu_off,
            100.0 * (cpu_on - cpu_off) / cpu_off);
        return 0;
    }

    std::istringstream list(stores);
    int round = 0;
    for (std::string name; std::getline(list, name, ',');) {
        const auto it = kinds().find(name);
        if (it == kinds().end()) {
            std::fprintf(stderr, "turn_bench: unknown store %s\n", name.c_str());
            return 2;
        }
        if (name == "postgres" && pg_dsn().empty()) {
            std::fprintf(stderr, "turn_bench: postgres needs WUHU_BENCH_PG_DSN (scripts/bench sets it)\n");
            return 2;
        }
        const double raw = raw_rate(it->second.name, w.in_flight);
        const double raw_one = raw_rate(it->second.name, 1);
        // A default run is short (a third of a second on the memory store): several runs, and
        // the median one, say more than one run on a noisy machine.
        std::vector<run_result> results;
        for (int i = 0; i < runs; ++i) {
            const auto r = run(it->second, w, true, round++);
            if (!r.ok) {
                return 1;
            }
            if (name == "sqlite-full" && r.fsyncs <= 0) {
                std::fprintf(stderr, "turn_bench: no fsync was counted: was %s preloaded?\n",
                             WUHU_FSYNC_COUNT_LIB);
                return 1;
            }
            if (r.commits <= 0) {
                std::fprintf(stderr, "turn_bench: no commit was counted (the worker's metrics)\n");
                return 1;
            }
            if (runs > 1) {
                std::printf(
                    "%s run %d of %d: %.0f turns/s, p50 %.1f ms, worker %.2f CPU ms a turn\n",
                    name.c_str(), i + 1, runs, r.turns_per_s, r.p50_ms, r.worker_cpu);
            }
            results.push_back(r);
        }
        std::sort(results.begin(), results.end(), [](const run_result& a, const run_result& b) {
            return a.turns_per_s < b.turns_per_s;
        });
        if (runs > 1) {
            std::printf("%s: the median of %d runs\n", name.c_str(), runs);
        }
        print(it->second, w, results[results.size() / 2], raw, raw_one);
    }
    return 0;
}
