// turn_bench's report: a run's figures beside issue 16's and issue 36's goals.
#include "bench/turn_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace wuhu::bench {

const std::map<std::string, store_kind>& kinds() {
    static const std::map<std::string, store_kind> k{
        {"sqlite-full", {"sqlite-full", 437, 2.5 * 437}},
        {"sqlite-normal", {"sqlite-normal", 753, 2 * 753}},
        {"postgres", {"postgres", 449, 2 * 449}},
        {"memory", {"memory", 1811, 2 * 1811}},
    };
    return k;
}

void print(const store_kind& kind, const workload& w, const run_result& r, double raw,
           double raw_one) {
    std::printf("\n%s (S=%d T=%d K=%d C=%d%s)\n", kind.name.c_str(), w.sessions, w.turns, w.tools,
                w.in_flight, w.new_sessions ? ", sessions made inside the timed window" : "");
    std::printf("  turns/s               %8.0f   goal >= %.0f, baseline %.0f (%.2fx)\n",
                r.turns_per_s, kind.goal_tps, kind.baseline_tps, r.turns_per_s / kind.baseline_tps);
    // A durable commit is a session-log commit (the worker's metric) or, on SQLite FULL, any
    // fsync (the catalog's commits are not in the metric): whichever counts more.
    const double durable = std::max(r.commits, kind.name == "sqlite-full" ? r.fsyncs : 0.0);
    // What the processes' CPU allows: turns/s were every core busy with them.
    const double cpu = r.worker_cpu + r.client_cpu + r.nats_cpu + r.pg_cpu;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const double cpu_limit = cpu > 0 ? static_cast<double>(cores) * 1000.0 / cpu : 0;
    if (raw > 0 && durable > 0) {
        const double budget = raw / durable;
        std::printf(
            "  budget                %8.0f   turns/s = raw commits/s %.0f / durable commits "
            "per turn; ratio %.2f (goal >= 0.8%s)\n",
            budget, raw, r.turns_per_s / budget,
            cpu_limit > 0 && 0.8 * budget > cpu_limit
                ? ", out of reach here: above the CPU limit below"
                : "");
    }
    std::printf("  turn latency          p50 %.1f ms, p99 %.1f ms\n", r.p50_ms, r.p99_ms);
    std::printf("  CPU ms per turn       worker %.2f, client %.2f, nats-server %.2f", r.worker_cpu,
                r.client_cpu, r.nats_cpu);
    if (kind.name == "postgres") {
        std::printf(", PostgreSQL %.2f", r.pg_cpu);
    }
    std::printf("\n");
    if (cpu_limit > 0) {
        std::printf(
            "  CPU limit             %8.0f   turns/s were all %ld cores busy with these "
            "processes; ratio %.2f\n",
            cpu_limit, cores, r.turns_per_s / cpu_limit);
    }
    std::printf("  log commits per turn  %8.2f   goal <= 4 (the worker's session-log commits)\n",
                r.commits);
    if (raw_one > 0) {
        std::printf("  commits/s             %8.0f   %.2fx the raw rate of one %s (%.0f/s)\n",
                    r.turns_per_s * r.commits, r.turns_per_s * r.commits / raw_one,
                    kind.name == "postgres" ? "connection" : "file and thread", raw_one);
    }
    std::printf("  fsyncs per turn       %8.2f   baseline 11", r.fsyncs);
    if (kind.name == "postgres") {
        std::printf(" (PostgreSQL's WAL syncs)\n");
    } else {
        std::printf("; %.3f ms each\n", r.fsync_ms);
    }
    std::printf("  stored KiB per turn   %8.2f   goal <= 1.7", r.stored_bytes / 1024);
    if (kind.name == "postgres") {
        std::printf(", and %.2f KiB of WAL", r.wal_bytes / 1024);
    }
    std::printf("\n");
    // The goal is for the issue's workload, -S 10000 -T 1 -C 32.
    const char* creation_goal = kind.name == "postgres"      ? "2000"
                                : kind.name == "sqlite-full" ? "1000"
                                                             : "";
    const bool issue_workload = w.sessions == 10000 && w.in_flight == 32;
    if (w.new_sessions) {
        // Issue 36's goals on the peers' workload.
        if (const auto peer = w.peers.find(kind.name); peer != w.peers.end()) {
            const double goal = kind.name == "sqlite-full" ? 1.2 : 0.8;
            std::printf(
                "  the peers' loop       %8.0f   turns/s persisting to SQLite %s (given): "
                "ratio %.2f, goal >= %.1f\n",
                peer->second, kind.name == "sqlite-full" ? "FULL" : "NORMAL",
                r.turns_per_s / peer->second, goal);
        } else if (kind.name == "postgres") {
            std::printf(
                "  issue 36's goal       turns/s >= 500 (%s) and PostgreSQL < 1 CPU ms a "
                "turn (%s)\n",
                r.turns_per_s >= 500 ? "met" : "not met", r.pg_cpu < 1.0 ? "met" : "not met");
        }
        if (w.turns < 2) {
            std::printf("  a new session costs   (not measured: it needs -T 2 or more)\n");
        } else {
            std::printf("  a new session costs   worker %.2f, client %.2f, nats-server %.2f",
                        r.new_worker_cpu, r.new_client_cpu, r.new_nats_cpu);
            if (kind.name == "postgres") {
                std::printf(", PostgreSQL %.2f", r.new_pg_cpu);
            }
            std::printf(" CPU ms; ");
            if (kind.name != "postgres") {  // PostgreSQL's WAL syncs are read for a whole run only
                std::printf("%.2f fsyncs, ", r.new_fsyncs);
            }
            std::printf("%.2f log commits (its first turn, which made it, less a later turn)\n",
                        r.new_commits);
        }
        std::printf("  written KiB per turn  %8.2f   by the worker (/proc/<pid>/io write_bytes)\n",
                    r.written_bytes / 1024);
        return;
    }
    std::printf("  new sessions/s        %8.0f   %s%s%s; %.2f fsyncs and %.2f commits each\n",
                r.creations_per_s, *creation_goal == '\0' ? "no goal" : "goal >= ", creation_goal,
                *creation_goal != '\0' && !issue_workload ? " with -S 10000 -C 32" : "",
                r.fsyncs_per_creation, r.commits_per_creation);
    std::printf("  written KiB per turn  %8.2f   by the worker (/proc/<pid>/io write_bytes)\n",
                r.written_bytes / 1024);
}

}  // namespace wuhu::bench
