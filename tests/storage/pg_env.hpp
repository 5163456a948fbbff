// The PostgreSQL server of the *_pgtest files: scripts/test starts one and sets
// WUHU_TEST_PG_DSN. Without it the tests fail (a real-server test never passes by skipping).
#pragma once

#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include <cstdlib>
#include <random>
#include <string>

namespace wuhu::testing {

inline std::string pg_dsn() {
    const char* dsn = std::getenv("WUHU_TEST_PG_DSN");
    if (dsn == nullptr || *dsn == '\0') {
        ADD_FAILURE() << "WUHU_TEST_PG_DSN is not set: run the tests with scripts/test, which "
                         "starts a PostgreSQL server";
        return "host=127.0.0.1 port=1 connect_timeout=1";
    }
    return dsn;
}

// A schema name of its own for each test, so tests can run in parallel.
inline std::string fresh_schema(const std::string& prefix) {
    std::random_device rd;
    return prefix + "_" + std::to_string(rd()) + std::to_string(rd() % 1000);
}

inline void drop_schema(const std::string& schema) {
    try {
        pqxx::connection c(pg_dsn());
        pqxx::nontransaction n(c);
        n.exec0("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
    } catch (const std::exception&) {
    }
}

}  // namespace wuhu::testing
