// A schema of its own for each PostgreSQL test, on the server of tests/support/env.hpp.
#pragma once

#include "tests/support/env.hpp"

#include <pqxx/pqxx>

#include <cstdlib>
#include <random>
#include <string>

namespace wuhu::testing {

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
