// The real servers of the tests: scripts/test starts a nats-server and a PostgreSQL server and
// names them in the environment. Without one, a test that needs it fails (a real-server test
// never passes by skipping).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

namespace wuhu::testing {

// The variable's value; a failure of the running test (and `unreachable`) when it is unset.
inline std::string server_env(const char* name, const char* unreachable) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') {
        ADD_FAILURE() << name << " is not set: run the tests with scripts/test, which starts "
                      << "the servers they need";
        return unreachable;
    }
    return v;
}

inline std::string nats_url() {
    return server_env("WUHU_TEST_NATS_URL", "nats://127.0.0.1:1");
}

// key=value form, for libpqxx.
inline std::string pg_dsn() {
    return server_env("WUHU_TEST_PG_DSN", "host=127.0.0.1 port=1 connect_timeout=1");
}

// The test server as a postgresql:// URL for `dbname` (wuhu-worker's --store).
inline std::string pg_url(const std::string& dbname) {
    std::map<std::string, std::string> kv;
    std::istringstream in(pg_dsn());
    std::string pair;
    while (in >> pair) {
        if (auto eq = pair.find('='); eq != std::string::npos) {
            kv[pair.substr(0, eq)] = pair.substr(eq + 1);
        }
    }
    return "postgresql://" + kv["user"] + "@" + kv["host"] + ":" + kv["port"] + "/" + dbname;
}

}  // namespace wuhu::testing
