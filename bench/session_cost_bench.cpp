// What sessions cost from their first message to their last (issue 36): N sessions made at C
// in flight, each by an enqueue that runs one turn on the scripted model (the ack is the
// creation's latency), then left idle, loaded, on one wuhu-worker process.
//
// Per store it prints: new sessions/s with the ack's p50/p99, the CPU ms and fsyncs a creation
// costs per process (worker, nats-server, PostgreSQL); and once every session has run its turn
// and the worker has settled, what the idle loaded sessions cost: the worker's (and
// PostgreSQL's) CPU as a share of one core over a window, fsyncs per second, resident memory
// above the same worker before any session, and open files per session. Each beside issue 36's
// goal.
//
// Needs a nats-server (WUHU_BENCH_NATS_URL or WUHU_TEST_NATS_URL) and, for `postgres`, a
// PostgreSQL server (WUHU_BENCH_PG_DSN or WUHU_TEST_PG_DSN); scripts/bench starts both, and
// names their PIDs (WUHU_BENCH_NATS_PID, WUHU_BENCH_PG_PID) for the CPU figures.
//
//   session_cost_bench [--stores sqlite-full,postgres] [-N 10000] [-C 32] [--idle-seconds 20]
//                      [--settle-seconds 20]
#include "bench/turn_probes.hpp"
#include "bench/turn_worker.hpp"
#include "nats/connection.hpp"

#include <CLI/CLI.hpp>

#include <dirent.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <unordered_map>

namespace {

using namespace wuhu::bench;
using namespace std::chrono_literals;

struct workload {
    int sessions = 10000;  // N
    int in_flight = 32;    // C
    double idle_seconds = 20;
    // After the turns, before the idle window, at least: what the turns left for later (the
    // catalog, checkpoints) is done, and the SQLite store has closed the files of sessions
    // unused for 10 s (node_options::close_files_after), 256 a second. Then until the worker is
    // quiet: three seconds in a row with no fsync and under 2% of a core each (at most 15
    // minutes in all).
    double settle_seconds = 20;
    std::vector<std::string> worker_args;
};

long resident_kib(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(f, line);) {
        if (line.starts_with("VmRSS:")) {
            return std::atol(line.c_str() + 6);
        }
    }
    return -1;
}

long open_files(pid_t pid) {
    long n = 0;
    if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
        while (const dirent* e = ::readdir(d)) {
            n += e->d_name[0] != '.' ? 1 : 0;
        }
        ::closedir(d);
    }
    return n;
}

struct sample {
    double worker_cpu, nats_cpu, pg_cpu, fsyncs;
    long rss_kib, fds;
};

struct result {
    bool ok = false;
    double creations_per_s = 0, ack_p50 = 0, ack_p99 = 0;
    double new_worker_cpu = 0, new_nats_cpu = 0, new_pg_cpu = 0, new_fsyncs = 0;
    double idle_worker_pct = 0, idle_pg_pct = 0, idle_fsyncs_per_s = 0, settled_after_s = 0;
    double rss_above_empty_mib = 0, kib_per_session = 0, fds_per_session = 0;
    long empty_rss_kib = 0;
};

result run(const std::string& store_kind, const workload& w, int round) {
    result out;
    ::sync();
    const std::string nats_url = env_or("WUHU_BENCH_NATS_URL", "WUHU_TEST_NATS_URL");
    std::random_device rd;
    const fs::path dir = fs::temp_directory_path() / ("wuhu-cost-bench-" + std::to_string(rd()));
    fs::create_directories(dir);
    const bool pg = store_kind == "postgres";
    std::string store = "memory";
    if (store_kind.starts_with("sqlite")) {
        store = "sqlite://" + (dir / "data").string();
    } else if (pg) {
        store = fresh_pg_database();
    }
    const std::string prefix = "cb" + std::to_string(::getpid()) + "r" + std::to_string(round);
    fsync_counter fsyncs(dir / "fsyncs");
    worker_process::set_script(R"({"responses":[{"text":"turn-complete"}]})");
    auto args = w.worker_args;
    // Every session stays loaded: no passivation, no limit.
    args.insert(args.end(), {"--max-loaded-sessions", "0"});
    worker_process::set_extra_args(args);
    const pid_t nats_pid = std::atoi(env_or("WUHU_BENCH_NATS_PID", "").c_str());
    const pid_t pg_pid = pg ? std::atoi(env_or("WUHU_BENCH_PG_PID", "").c_str()) : 0;

    // Which sessions have answered their turn and are idle again.
    std::mutex mu;
    std::condition_variable all_done;
    std::unordered_map<std::string, int> seen;  // 1 answered, 2 answered and idle
    std::size_t done = 0;
    wuhu::nats::connection requests(nats_url, "cost-bench");
    wuhu::nats::connection events(nats_url, "cost-bench-events");
    const std::string session_subject = prefix + ".session.";
    const std::string events_prefix = prefix + ".events.";
    const auto subscription =
        events.subscribe(events_prefix + "*.patch", [&](wuhu::nats::message m) {
            const bool answer = m.data.find(R"("text":"turn-complete")") != std::string::npos;
            const bool idle = m.data.find(R"("state":"idle")") != std::string::npos &&
                              m.data.find(R"("has_work":false)") != std::string::npos;
            if (!answer && !idle) {
                return;
            }
            const auto sid =
                m.subject.substr(events_prefix.size(), m.subject.size() - events_prefix.size() - 6);
            std::lock_guard lock(mu);
            auto& s = seen[sid];
            s = std::max(s, answer ? 1 : 0);
            if (idle && s == 1) {
                s = 2;
                if (++done == static_cast<std::size_t>(w.sessions)) {
                    all_done.notify_all();
                }
            }
        });
    events.flush();

    worker_process worker(dir, nats_url, store, store_kind == "sqlite-normal" ? "normal" : "full",
                          true, prefix, fsyncs);
    if (!worker.wait_until_up(requests, session_subject, dir, "session_cost_bench")) {
        return out;
    }
    auto snap = [&] {
        return sample{cpu_ms(worker.pid()),       cpu_ms(nats_pid),
                      tree_cpu_ms(pg_pid),        static_cast<double>(fsyncs.value()),
                      resident_kib(worker.pid()), open_files(worker.pid())};
    };
    std::this_thread::sleep_for(2s);
    const auto empty = snap();
    out.empty_rss_kib = empty.rss_kib;

    // 1. Creation: C threads, each enqueueing to its share of new sessions.
    std::vector<std::vector<double>> acks(static_cast<std::size_t>(w.in_flight));
    std::atomic<bool> ok{true};
    const auto before = snap();
    const auto start = clock_type::now();
    {
        std::vector<std::thread> threads;
        for (int c = 0; c < w.in_flight; ++c) {
            threads.emplace_back([&, c] {
                for (int i = c; i < w.sessions && ok; i += w.in_flight) {
                    const auto t0 = clock_type::now();
                    auto r =
                        requests.request(session_subject + "n" + std::to_string(i) + ".enqueue",
                                         R"({"lane":"followUp","id":"u0","content":"hi"})", 30s);
                    if (!r || r->find(R"("ok":true)") == std::string::npos) {
                        std::fprintf(stderr, "session_cost_bench: enqueue to n%d failed: %s\n", i,
                                     r ? r->c_str() : "no reply");
                        ok = false;
                        return;
                    }
                    acks[static_cast<std::size_t>(c)].push_back(
                        std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
                }
            });
        }
        for (auto& t : threads) {
            t.join();
        }
    }
    const double elapsed = seconds_since(start);
    const auto created = snap();
    if (!ok) {
        return out;
    }
    std::vector<double> all;
    for (auto& a : acks) {
        all.insert(all.end(), a.begin(), a.end());
    }
    std::sort(all.begin(), all.end());
    const double n = w.sessions;
    out.creations_per_s = n / elapsed;
    out.ack_p50 = all[all.size() / 2];
    out.ack_p99 = all[static_cast<std::size_t>(0.99 * static_cast<double>(all.size() - 1))];

    // 2. Every session runs its turn; the worker settles.
    {
        std::unique_lock lock(mu);
        if (!all_done.wait_for(lock, 300s, [&] { return done == seen.size() && done == n; })) {
            std::fprintf(stderr, "session_cost_bench: %zu of %d sessions ended their turn\n", done,
                         w.sessions);
            return out;
        }
    }
    const auto turned = snap();
    // A creation's cost: the enqueues and the turns they started (the scripted model answers at
    // once), to the last turn's end.
    out.new_worker_cpu = (turned.worker_cpu - before.worker_cpu) / n;
    out.new_nats_cpu = (turned.nats_cpu - before.nats_cpu) / n;
    out.new_pg_cpu = (turned.pg_cpu - before.pg_cpu) / n;
    out.new_fsyncs = (turned.fsyncs - before.fsyncs) / n;
    (void)created;
    const auto settle_start = clock_type::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(w.settle_seconds));
    int quiet = 0;
    for (auto last = snap(); quiet < 3 && seconds_since(settle_start) < 900;) {
        std::this_thread::sleep_for(1s);
        const auto now = snap();
        quiet = now.fsyncs == last.fsyncs && now.worker_cpu - last.worker_cpu < 20 ? quiet + 1 : 0;
        last = now;
    }
    out.settled_after_s = seconds_since(settle_start);

    // 3. Idle: every session loaded, nothing asked.
    const auto idle_from = snap();
    const auto idle_start = clock_type::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(w.idle_seconds));
    const auto idle_to = snap();
    const double idle_ms = seconds_since(idle_start) * 1000.0;
    out.idle_worker_pct = 100.0 * (idle_to.worker_cpu - idle_from.worker_cpu) / idle_ms;
    out.idle_pg_pct = 100.0 * (idle_to.pg_cpu - idle_from.pg_cpu) / idle_ms;
    out.idle_fsyncs_per_s = (idle_to.fsyncs - idle_from.fsyncs) * 1000.0 / idle_ms;
    out.rss_above_empty_mib = static_cast<double>(idle_to.rss_kib - empty.rss_kib) / 1024.0;
    out.kib_per_session = static_cast<double>(idle_to.rss_kib - empty.rss_kib) / n;
    out.fds_per_session = static_cast<double>(idle_to.fds - empty.fds) / n;
    events.unsubscribe(subscription);
    if (!worker.stop()) {
        std::fprintf(stderr, "session_cost_bench: the worker did not stop cleanly; see %s\n",
                     (dir / "worker.log").c_str());
        return out;
    }
    removed_at_exit.add(dir);
    out.ok = true;
    return out;
}

void print(const std::string& store, const workload& w, const result& r) {
    const bool pg = store == "postgres";
    std::printf(
        "\n%s (N=%d new sessions, C=%d in flight, each made by an enqueue that runs one "
        "turn, then idle)\n",
        store.c_str(), w.sessions, w.in_flight);
    std::printf(
        "  new sessions/s        %8.0f   goal >= 1500 (sqlite-full, postgres at C=32); "
        "ack p50 %.1f ms, p99 %.1f ms\n",
        r.creations_per_s, r.ack_p50, r.ack_p99);
    std::printf("  a new session costs   worker %.2f, nats-server %.2f", r.new_worker_cpu,
                r.new_nats_cpu);
    if (pg) {
        std::printf(", PostgreSQL %.2f", r.new_pg_cpu);
    }
    std::printf(" CPU ms (its enqueue and turn)");
    if (!pg) {
        std::printf("; %.2f fsyncs", r.new_fsyncs);
    }
    std::printf("\n");
    std::printf("  idle CPU              worker %.2f%% of a core", r.idle_worker_pct);
    if (pg) {
        std::printf(", PostgreSQL %.2f%%", r.idle_pg_pct);
    }
    std::printf(
        " over %.0f s (settled %.0f s after the last turn)   goal < 0.5%% (10,000 sessions)",
        w.idle_seconds, r.settled_after_s);
    if (!pg) {
        std::printf("; %.2f fsyncs/s", r.idle_fsyncs_per_s);
    }
    std::printf("\n");
    std::printf(
        "  resident memory       %8.1f MiB above the empty worker (%.1f MiB): %.1f KiB a "
        "session   goal <= 100 MiB (10,000 sessions)\n",
        r.rss_above_empty_mib, static_cast<double>(r.empty_rss_kib) / 1024.0, r.kib_per_session);
    std::printf("  open files            %8.3f a session\n", r.fds_per_session);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"session_cost_bench: what new and idle sessions cost a wuhu-worker"};
    workload w;
    std::string stores = "sqlite-full,postgres";
    int runs = 1;
    app.add_option("--stores", stores,
                   "comma-separated: sqlite-full, sqlite-normal, postgres, memory");
    app.add_option("-N,--sessions", w.sessions)->check(CLI::Range(1, 1000000));
    app.add_option("-C,--in-flight", w.in_flight)->check(CLI::Range(1, 1000));
    app.add_option("--idle-seconds", w.idle_seconds, "the idle window")
        ->check(CLI::Range(1.0, 600.0));
    app.add_option("--settle-seconds", w.settle_seconds,
                   "the wait between the last turn and the idle window")
        ->check(CLI::Range(0.0, 600.0));
    app.add_option("--runs", runs, "runs of each store: the median run by creations/s")
        ->check(CLI::Range(1, 20));
    app.add_option("--worker-arg", w.worker_args,
                   "a flag for wuhu-worker (repeat: --worker-arg=--store-threads --worker-arg=8)");
    CLI11_PARSE(app, argc, argv);
    if (env_or("WUHU_BENCH_NATS_URL", "WUHU_TEST_NATS_URL").empty()) {
        std::fprintf(stderr, "session_cost_bench: set WUHU_BENCH_NATS_URL (scripts/bench does)\n");
        return 2;
    }
    w.in_flight = std::min(w.in_flight, w.sessions);
    std::istringstream list(stores);
    int round = 0;
    for (std::string name; std::getline(list, name, ',');) {
        if (name != "sqlite-full" && name != "sqlite-normal" && name != "postgres" &&
            name != "memory") {
            std::fprintf(stderr, "session_cost_bench: unknown store %s\n", name.c_str());
            return 2;
        }
        if (name == "postgres" && pg_dsn().empty()) {
            std::fprintf(stderr, "session_cost_bench: postgres needs WUHU_BENCH_PG_DSN\n");
            return 2;
        }
        std::vector<result> results;
        for (int i = 0; i < runs; ++i) {
            auto r = run(name, w, round++);
            if (!r.ok) {
                return 1;
            }
            if (runs > 1) {
                std::printf(
                    "%s run %d of %d: %.0f new sessions/s, idle worker %.2f%% of a core, "
                    "%.1f KiB a session\n",
                    name.c_str(), i + 1, runs, r.creations_per_s, r.idle_worker_pct,
                    r.kib_per_session);
            }
            results.push_back(r);
        }
        std::sort(results.begin(), results.end(), [](const result& a, const result& b) {
            return a.creations_per_s < b.creations_per_s;
        });
        print(name, w, results[results.size() / 2]);
    }
    return 0;
}
