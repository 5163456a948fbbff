// What turn_bench measures and how it reports it (bench/turn_bench.cpp): the workload, the
// stores with issue 16's figures, a run's result, and the report of a run beside its goals.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace wuhu::bench {

struct workload {
    int sessions = 100;                    // S
    int turns = 10;                        // T
    int tools = 2;                         // K
    int in_flight = 10;                    // C
    std::vector<std::string> worker_args;  // more flags for wuhu-worker
    // The sessions are made by their first turn, inside the timed window (the peers' workload,
    // issue 36), rather than by a configure before it.
    bool new_sessions = false;
    // --new-sessions: the peers' turns/s on the same workload, by store (an in-memory agent
    // loop persisting every message to SQLite FULL and NORMAL), printed beside Wuhu's with
    // issue 36's goal; by default the figures issue 36 measured on this machine.
    std::map<std::string, double> peers{{"sqlite-full", 680}, {"sqlite-normal", 2315}};
};

// A store the worker runs on, and issue 16's figures for it.
struct store_kind {
    std::string name;
    double baseline_tps;  // today's turns/s (issue 16)
    double goal_tps;      // what issue 16 asks
};

// The stores, by name.
const std::map<std::string, store_kind>& kinds();

struct run_result {
    bool ok = false;
    double turns_per_s = 0, p50_ms = 0, p99_ms = 0;
    double worker_cpu = 0, client_cpu = 0, nats_cpu = 0, pg_cpu = 0;  // ms per turn
    double commits = -1, fsyncs = 0, fsync_ms = 0, stored_bytes = 0, wal_bytes = 0,
           written_bytes = 0;
    double creations_per_s = 0, fsyncs_per_creation = 0, commits_per_creation = -1;
    // --new-sessions: what a new session costs, per process (CPU ms) and in fsyncs and log
    // commits: its first turn (which makes it) less a later turn.
    double new_worker_cpu = 0, new_client_cpu = 0, new_nats_cpu = 0, new_pg_cpu = 0;
    double new_fsyncs = 0, new_commits = -1;
};

// Prints a run's figures, each beside its goal: `raw` is the raw commit rate of the same file
// pattern with C threads (0: not measured), `raw_one` that of one file and thread.
void print(const store_kind& kind, const workload& w, const run_result& r, double raw,
           double raw_one);

}  // namespace wuhu::bench
