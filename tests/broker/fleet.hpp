// What the fleet tests (fleet_proctest.cpp, fleet_failover_proctest.cpp,
// fleet_streaming_proctest.cpp) share: bursts of requests and their replies, the members of a
// test fleet, and wuhuctl.
#pragma once

#include "client/client.hpp"
#include "ownership/postgres_lease.hpp"
#include "ownership/sqlite_lease.hpp"
#include "storage/sqlite_db.hpp"
#include "storage/sqlite_store.hpp"
#include "tests/support/burst.hpp"
#include "tests/support/http_get.hpp"
#include "tests/support/pg_env.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

// Sends every request at once and parses the replies (null: no reply in time).
inline std::vector<json::value> send_all(
    burst& b, const std::vector<std::pair<std::string, std::string>>& requests,
    std::chrono::milliseconds timeout) {
    std::vector<burst_request> batch;
    for (const auto& [subject, body] : requests) {
        batch.push_back({subject, body});
    }
    std::vector<json::value> out;
    for (const auto& r : b.send(batch, timeout)) {
        out.push_back(r ? json::parse(*r) : json::value());
    }
    return out;
}

inline std::string enqueue_body(const std::string& id) {
    return R"({"lane":"followUp","id":")" + id + R"(","content":"item )" + id + "\"}";
}

inline bool ok(const json::value& v) {
    return v.is_object() && v.as_object().contains("ok") && v.at("ok") == true;
}

inline std::string code_of(const json::value& v) {
    if (!v.is_object() || !v.as_object().contains("error")) {
        return v.is_null() ? "no reply" : "ok";
    }
    return json::value_to<std::string>(v.at("error").at("code"));
}

// The model answers every turn the same, a little slowly, so that turns overlap requests.
inline constexpr const char* slow_script = R"({"responses":[{"text":"noted","delay_ms":5}]})";

// A worker of a test fleet: `base`'s store, its own id, the fleet's subject prefix (`tag`
// and this process's id) and, unless 0, a lease of `ttl_ms`.
inline worker_process::config fleet_member(worker_process::config base, const std::string& id,
                                           const std::string& tag, int ttl_ms = 0) {
    base.worker_id = id;
    base.prefix = tag + std::to_string(getpid());
    if (ttl_ms > 0) {
        base.args = {"--lease-ttl-ms", std::to_string(ttl_ms)};
    }
    return base;
}

// The store of the workers of one host: a SQLite data directory they share.
inline worker_process::config sharing(const std::filesystem::path& data_dir) {
    worker_process::config c;
    c.data_dir = data_dir;
    return c;
}

// What `wuhuctl --nats <url> --prefix <prefix> <args>` printed (its stdout in `out`, its
// stderr beside it), once it exited 0 (checked, bounded).
inline std::string wuhuctl(const std::string& url, const std::string& prefix,
                           const std::vector<std::string>& args, const std::filesystem::path& out) {
    std::vector<std::string> all{"--nats", url, "--prefix", prefix};
    all.insert(all.end(), args.begin(), args.end());
    const pid_t pid =
        spawn(WUHUCTL_BIN, all, spawn_options{out.string() + ".err", std::nullopt, out.string()});
    EXPECT_EQ(wait_exit(pid, 30s), 0) << "wuhuctl " << out.filename();
    std::ifstream f(out);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace wuhu::testing
