// Durable operations per second of the stores, against the raw commit rate of the same database
// with the same settings (a plain single-row insert-and-commit loop), measured in the same run:
//   * one session (one file / one connection), and
//   * 100 sessions from 4 threads (SQLite: 100 files; PostgreSQL: a pool of 8 connections).
// PostgreSQL runs when WUHU_BENCH_PG_DSN (or WUHU_TEST_PG_DSN) is set; scripts/bench starts a
// server and sets it.
//
//   store_bench [seconds-per-measurement]
#include "session/reducer.hpp"
#include "storage/postgres_store.hpp"
#include "storage/sqlite_db.hpp"
#include "storage/sqlite_store.hpp"

#include <pqxx/pqxx>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>
#include <vector>

namespace {

namespace s = wuhu::session;
namespace st = wuhu::storage;
using clock_type = std::chrono::steady_clock;

double seconds = 3.0;

// Runs `op(thread, i)` from `threads` threads until the time is up; returns ops per second.
double rate(int threads, const std::function<void(int, std::uint64_t)>& op) {
    std::atomic<std::uint64_t> done{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> pool;
    auto start = clock_type::now();
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
                op(t, i);
                done.fetch_add(1, std::memory_order_relaxed);
            }
        });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto& th : pool) {
        th.join();
    }
    double elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
    return static_cast<double>(done.load()) / elapsed;
}

// One session driven by the store: enqueue follow-ups (has_work is already set after the
// first, so each is one commit of one journal row, like the raw loop's one row).
struct driver {
    std::unique_ptr<st::session_log> log;
    s::session_state state;
    std::string prefix;

    void step(std::uint64_t i) {
        auto id = s::queue_item_id::parse(prefix + std::to_string(i)).value();
        auto r = log->enqueue(state,
                              s::enqueue_input{s::lane::follow_up, id,
                                               s::user_input{s::unknown_author{}, "benchmark"}},
                              s::unix_ms{static_cast<std::int64_t>(i)});
        if (!r) {
            std::fprintf(stderr, "store operation failed: %s\n", r.error().message().c_str());
            std::exit(1);
        }
        s::apply_actions(r->actions, state);
    }
};

std::vector<driver> drivers(st::session_store& store, int n, const std::string& prefix) {
    std::vector<driver> out;
    for (int i = 0; i < n; ++i) {
        auto log =
            store.open(s::session_id::parse(prefix + std::to_string(i)).value(), s::lease_epoch{1})
                .value();
        auto state = log->load().value();
        out.push_back({std::move(log), std::move(state), "k"});
    }
    return out;
}

void row(const char* what, double raw, double store) {
    std::printf("%-44s %10.0f %10.0f %8.2f\n", what, raw, store, store / raw);
}

// Commits a prepared action list through a log in one transaction (bulk benchmark data).
struct bulk : st::session_log {
    static st::result<void> commit(st::session_log& log, const s::session_state& before,
                                   const s::action_list& actions) {
        return forward_commit(log, before, actions);
    }
};

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// Loading a long session: the store's load (read, decode, fold) against reading the same rows
// raw (no decoding), and a backfill of the last 10 entries (which reads only the tail).
void bench_sqlite_load(st::sqlite_store& store, const std::filesystem::path& dir) {
    constexpr int entries = 100'000;
    const auto id = s::session_id::parse("long").value();
    auto log = store.open(id, s::lease_epoch{1}).value();
    s::session_state st = log->load().value();
    s::session_state after = st;
    s::action_list actions;
    for (int i = 0; i < entries; ++i) {
        auto a = s::plan_append_marker(after, s::diagnostic{"note", "entry " + std::to_string(i)},
                                       s::unix_ms{i});
        s::apply_actions(a, after);
        actions.insert(actions.end(), a.begin(), a.end());
    }
    if (!bulk::commit(*log, st, actions)) {
        std::fprintf(stderr, "store_bench: bulk commit failed\n");
        std::exit(1);
    }
    auto t0 = clock_type::now();
    std::size_t bytes = 0;
    {
        st::sqlite::db raw((dir / "store" / "sessions" / "long.sqlite").string(), "FULL", 5000);
        auto& q = raw.prepare("SELECT body FROM transcript ORDER BY seq");
        while (q.step()) {
            bytes += q.text(0).size();
        }
    }
    const double raw_ms = ms_since(t0);
    t0 = clock_type::now();
    auto loaded = log->load();
    const double load_ms = ms_since(t0);
    s::version_vector v = after.version();
    v.transcript -= 10;
    t0 = clock_type::now();
    auto tail = log->since(v);
    const double tail_ms = ms_since(t0);
    if (!loaded || loaded->transcript.size() != entries || !tail) {
        std::fprintf(stderr, "store_bench: the long session did not load\n");
        std::exit(1);
    }
    std::printf(
        "load %d entries (%zu bytes): raw read %.0f ms, store load %.0f ms (%.1fx); "
        "backfill of the last 10: %.2f ms\n",
        entries, bytes, raw_ms, load_ms, load_ms / raw_ms, tail_ms);
}

void bench_sqlite() {
    auto dir = std::filesystem::temp_directory_path() / ("wuhu-bench-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir / "raw");
    std::printf("\nSQLite (WAL, synchronous=FULL) in %s\n", dir.c_str());
    std::printf("%-44s %10s %10s %8s\n", "", "raw tx/s", "store op/s", "ratio");

    double raw1 = 0;
    {
        st::sqlite::db db((dir / "raw" / "one.sqlite").string(), "FULL", 5000);
        db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)");
        raw1 = rate(1, [&](int, std::uint64_t) {
            st::sqlite::transaction tx(db);
            db.prepare("INSERT INTO t (body) VALUES (?1)")
                .bind(1, std::string_view("benchmark"))
                .run();
            tx.commit();
        });
    }
    st::sqlite_store store(st::sqlite_options{dir / "store"});
    auto one = drivers(store, 1, "one");
    double store1 = rate(1, [&](int, std::uint64_t i) { one[0].step(i); });
    row("1 session, 1 thread", raw1, store1);

    double raw100 = 0;
    {
        std::vector<std::unique_ptr<st::sqlite::db>> dbs;
        for (int i = 0; i < 100; ++i) {
            dbs.push_back(std::make_unique<st::sqlite::db>(
                (dir / "raw" / ("f" + std::to_string(i) + ".sqlite")).string(), "FULL", 5000));
            dbs.back()->exec("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)");
        }
        raw100 = rate(4, [&](int t, std::uint64_t i) {
            auto& db = *dbs[static_cast<std::size_t>(t * 25) + i % 25];
            st::sqlite::transaction tx(db);
            db.prepare("INSERT INTO t (body) VALUES (?1)")
                .bind(1, std::string_view("benchmark"))
                .run();
            tx.commit();
        });
    }
    auto many = drivers(store, 100, "many");
    std::vector<std::uint64_t> counters(100, 0);
    double store100 = rate(4, [&](int t, std::uint64_t i) {
        auto k = static_cast<std::size_t>(t * 25) + i % 25;
        many[k].step(counters[k]++);
    });
    row("100 sessions (100 files), 4 threads", raw100, store100);
    std::printf("goal: the store reaches >= 0.80 of the raw single-file rate: %.2f %s\n",
                store1 / raw1, store1 / raw1 >= 0.8 ? "(met)" : "(NOT met)");
    bench_sqlite_load(store, dir);
    std::filesystem::remove_all(dir);
}

void bench_postgres(const std::string& dsn) {
    std::printf("\nPostgreSQL (synchronous_commit=on)\n");
    std::printf("%-44s %10s %10s %8s\n", "", "raw tx/s", "store op/s", "ratio");
    const std::string schema = "bench_" + std::to_string(getpid());
    {
        pqxx::connection c(dsn);
        pqxx::work w(c);
        w.exec0("CREATE SCHEMA " + schema);
        w.exec0("CREATE TABLE " + schema + ".raw (id bigserial PRIMARY KEY, body jsonb)");
        w.commit();
    }
    auto raw_rate = [&](int threads) {
        std::vector<std::unique_ptr<pqxx::connection>> conns;
        for (int t = 0; t < threads; ++t) {
            conns.push_back(std::make_unique<pqxx::connection>(dsn));
            conns.back()->prepare("ins",
                                  "INSERT INTO " + schema + ".raw (body) VALUES ($1::jsonb)");
        }
        return rate(threads, [&](int t, std::uint64_t) {
            pqxx::work w(*conns[static_cast<std::size_t>(t)]);
            w.exec_prepared0("ins", R"({"body":"benchmark"})");
            w.commit();
        });
    };
    double raw1 = raw_rate(1);
    st::postgres_store store(st::postgres_options{dsn, schema, 8});
    auto one = drivers(store, 1, "one");
    double store1 = rate(1, [&](int, std::uint64_t i) { one[0].step(i); });
    row("1 session, 1 connection", raw1, store1);
    double raw8 = raw_rate(8);
    auto many = drivers(store, 100, "many");
    std::vector<std::uint64_t> counters(100, 0);
    double store100 = rate(8, [&](int t, std::uint64_t i) {
        // Thread t owns the sessions k with k % 8 == t: 13 of them for t < 4, 12 otherwise.
        auto k = static_cast<std::size_t>(t) + 8 * (i % (t < 4 ? 13 : 12));
        many[k].step(counters[k]++);
    });
    row("100 sessions, pool of 8, 8 threads", raw8, store100);
    std::printf("store, 100 concurrent sessions vs raw 1 connection: %.2fx (goal: > 1)\n",
                store100 / raw1);
    pqxx::connection c(dsn);
    pqxx::nontransaction n(c);
    n.exec0("DROP SCHEMA " + schema + " CASCADE");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1) {
        seconds = std::atof(argv[1]);
    }
    std::printf("store_bench: %.1f s per measurement\n", seconds);
    bench_sqlite();
    const char* dsn = std::getenv("WUHU_BENCH_PG_DSN");
    if (dsn == nullptr) {
        dsn = std::getenv("WUHU_TEST_PG_DSN");
    }
    if (dsn != nullptr && *dsn != '\0') {
        bench_postgres(dsn);
    } else {
        std::printf("\nPostgreSQL: skipped (set WUHU_BENCH_PG_DSN, or run scripts/bench)\n");
    }
}
