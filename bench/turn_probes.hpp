// What turn_bench measures besides turns (bench/turn_bench.cpp): the CPU and the writes of a
// process, the fsyncs libfsync_count.so counts in the worker, PostgreSQL's WAL statistics, and
// the raw commit rates the turns are compared with.
#pragma once

#include "storage/sqlite_db.hpp"

#include <pqxx/pqxx>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace wuhu::bench {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

inline std::string env_or(const char* a, const char* b) {
    for (const char* name : {a, b}) {
        const char* v = std::getenv(name);
        if (v != nullptr && *v != '\0') {
            return v;
        }
    }
    return {};
}

inline double seconds_since(clock_type::time_point t) {
    return std::chrono::duration<double>(clock_type::now() - t).count();
}

// --- what a process spent -------------------------------------------------------------------

// User + system CPU of a process, in ms (0 when it is gone), in clock ticks (10 ms).
inline double cpu_ticks_ms(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(f, line)) {
        return 0;
    }
    std::istringstream in(line.substr(line.rfind(')') + 2));  // from field 3 on
    std::vector<std::string> fields{std::istream_iterator<std::string>(in), {}};
    if (fields.size() < 13) {
        return 0;
    }
    const double ticks = std::stod(fields[11]) + std::stod(fields[12]);  // utime, stime
    return ticks * 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The CPU time of a process's threads, in ms, to the nanosecond (/proc/<pid>/task/*/schedstat);
// what /proc/<pid>/stat says when that is not there.
inline double cpu_ms(pid_t pid) {
    if (pid <= 0) {
        return 0;
    }
    double ns = 0;
    std::error_code ec;
    for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
        std::ifstream f(task.path() / "schedstat");
        double run = 0;
        if (f >> run) {
            ns += run;
        }
    }
    return ns > 0 ? ns / 1e6 : cpu_ticks_ms(pid);
}

inline pid_t parent_of(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(f, line)) {
        return 0;
    }
    std::istringstream in(line.substr(line.rfind(')') + 2));
    std::string state;
    pid_t ppid = 0;
    in >> state >> ppid;
    return ppid;
}

// A process and its children (PostgreSQL's postmaster and its backends).
inline double tree_cpu_ms(pid_t root) {
    if (root <= 0) {
        return 0;
    }
    double sum = cpu_ticks_ms(root);
    for (const auto& e : fs::directory_iterator("/proc")) {
        const auto name = e.path().filename().string();
        if (!name.empty() && std::all_of(name.begin(), name.end(), ::isdigit)) {
            const pid_t pid = std::stoi(name);
            if (parent_of(pid) == root) {
                sum += cpu_ticks_ms(pid);
            }
        }
    }
    return sum;
}

// Bytes a process had written to the storage layer (/proc/<pid>/io write_bytes).
inline double written_bytes(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/io");
    for (std::string line; std::getline(f, line);) {
        if (line.starts_with("write_bytes: ")) {
            return std::stod(line.substr(13));
        }
    }
    return 0;
}

// The fsync counter libfsync_count.so keeps for the worker (a shared page).
class fsync_counter {
  public:
    explicit fsync_counter(const fs::path& file) : file_(file) {
        const int fd = ::open(file.c_str(), O_RDWR | O_CREAT, 0600);
        if (fd < 0 || ::ftruncate(fd, 4096) != 0) {
            throw std::runtime_error("cannot make the fsync counter " + file.string());
        }
        page_ = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        if (page_ == MAP_FAILED) {
            throw std::runtime_error("cannot map the fsync counter");
        }
    }
    ~fsync_counter() { ::munmap(page_, 4096); }
    std::uint64_t value() const {
        return static_cast<std::atomic<std::uint64_t>*>(page_)[0].load();
    }
    // Nanoseconds spent in them.
    std::uint64_t ns() const { return static_cast<std::atomic<std::uint64_t>*>(page_)[1].load(); }
    const fs::path& file() const { return file_; }

  private:
    fs::path file_;
    void* page_;
};

// The data directories, removed when the benchmark ends rather than after each run: on ext4
// without a journal, the inodes of thousands of files deleted keep the next minutes' file
// creations scanning past them (the allocator skips recently deleted inodes), which would
// slow the next store's session creation by a third.
struct directories_removed_at_exit {
    std::vector<fs::path> dirs;
    void add(fs::path dir) { dirs.push_back(std::move(dir)); }
    ~directories_removed_at_exit() {
        for (const auto& d : dirs) {
            std::error_code ec;
            fs::remove_all(d, ec);
        }
    }
};
inline directories_removed_at_exit removed_at_exit;

// --- PostgreSQL -----------------------------------------------------------------------------

inline std::string pg_dsn() { return env_or("WUHU_BENCH_PG_DSN", "WUHU_TEST_PG_DSN"); }

inline std::map<std::string, std::string> dsn_fields(const std::string& dsn) {
    std::map<std::string, std::string> kv;
    std::istringstream in(dsn);
    for (std::string pair; in >> pair;) {
        if (auto eq = pair.find('='); eq != std::string::npos) {
            kv[pair.substr(0, eq)] = pair.substr(eq + 1);
        }
    }
    return kv;
}

inline constexpr const char* bench_db = "wuhu_turn_bench";

// A database of the benchmark's own, new for each run.
inline std::string fresh_pg_database() {
    pqxx::connection admin(pg_dsn());
    pqxx::nontransaction n(admin);
    n.exec(std::string("DROP DATABASE IF EXISTS ") + bench_db + " WITH (FORCE)");
    n.exec(std::string("CREATE DATABASE ") + bench_db);
    auto kv = dsn_fields(pg_dsn());
    return "postgresql://" + kv["user"] + "@" + kv["host"] + ":" + kv["port"] + "/" + bench_db;
}

struct wal_stats {
    double syncs = 0, bytes = 0;
};

inline wal_stats pg_wal() {
    pqxx::connection c(pg_dsn());
    pqxx::nontransaction n(c);
    auto r = n.exec1("SELECT wal_sync, wal_bytes FROM pg_stat_wal");
    return {r[0].as<double>(), r[1].as<double>()};
}

// --- the raw commit rate of the same pattern -------------------------------------------------

// Commits per second of `threads` threads, each committing one small row at a time for
// `seconds` to a SQLite file of its own in WAL mode at `synchronous`.
inline double raw_sqlite_rate(const fs::path& dir, int threads, const std::string& synchronous,
                       double seconds) {
    std::atomic<std::uint64_t> commits{0};
    std::vector<std::thread> workers;
    const auto until = clock_type::now() + std::chrono::duration<double>(seconds);
    const auto start = clock_type::now();
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            wuhu::storage::sqlite::db db((dir / ("raw-" + std::to_string(t) + ".sqlite")).string(),
                                         synchronous, 5000);
            db.exec("CREATE TABLE IF NOT EXISTS t (seq INTEGER PRIMARY KEY, body TEXT)");
            while (clock_type::now() < until) {
                wuhu::storage::sqlite::transaction tx(db);
                db.prepare("INSERT INTO t (body) VALUES (?1)")
                    .bind(1, std::string_view(R"({"type":"tool_result","output":"x"})"))
                    .run();
                tx.commit();
                ++commits;
            }
        });
    }
    for (auto& w : workers) {
        w.join();
    }
    return static_cast<double>(commits) / seconds_since(start);
}

inline double raw_pg_rate(int threads, double seconds) {
    {
        pqxx::connection c(pg_dsn());
        pqxx::nontransaction n(c);
        n.exec("DROP TABLE IF EXISTS wuhu_bench_raw");
        n.exec("CREATE TABLE wuhu_bench_raw (seq BIGSERIAL PRIMARY KEY, body TEXT)");
    }
    std::atomic<std::uint64_t> commits{0};
    std::vector<std::thread> workers;
    const auto until = clock_type::now() + std::chrono::duration<double>(seconds);
    const auto start = clock_type::now();
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&] {
            pqxx::connection c(pg_dsn());
            while (clock_type::now() < until) {
                pqxx::work w(c);
                w.exec("INSERT INTO wuhu_bench_raw (body) VALUES ('x')");
                w.commit();
                ++commits;
            }
        });
    }
    for (auto& w : workers) {
        w.join();
    }
    const double rate = static_cast<double>(commits) / seconds_since(start);
    pqxx::connection c(pg_dsn());
    pqxx::nontransaction(c).exec("DROP TABLE wuhu_bench_raw");
    return rate;
}


// Bytes stored in a directory's files (apparent sizes).
inline double stored_bytes(const fs::path& dir) {
    double sum = 0;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
        if (e.is_regular_file(ec)) {
            sum += static_cast<double>(e.file_size(ec));
        }
    }
    return sum;
}

inline double pg_database_bytes() {
    pqxx::connection c(pg_dsn());
    pqxx::nontransaction n(c);
    return n.exec1(std::string("SELECT pg_database_size('") + bench_db + "')")[0].as<double>();
}

// The budget of a store (sqlite-full, sqlite-normal, postgres; memory: none): the raw commit
// rate of the same pattern, divided by the commits per turn. `committers` threads (SQLite files, PostgreSQL connections) committing one row at a time.
inline double raw_rate(const std::string& store, int committers) {
    if (store == "postgres") {
        return raw_pg_rate(committers, 2.0);
    }
    if (store == "memory") {
        return 0;
    }
    std::random_device rd;
    const fs::path dir = fs::temp_directory_path() / ("wuhu-turn-bench-raw-" + std::to_string(rd()));
    fs::create_directories(dir);
    const double rate =
        raw_sqlite_rate(dir, committers, store == "sqlite-full" ? "FULL" : "NORMAL", 2.0);
    fs::remove_all(dir);
    return rate;
}

}  // namespace wuhu::bench
