// A schema of its own for each PostgreSQL test, on the server of tests/support/env.hpp.
#pragma once

#include "tests/support/env.hpp"

#include <pqxx/pqxx>

#include <unistd.h>

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

// A database of the test's own on the test server, dropped when the test ends (a worker's
// --store gets url(); admin() runs statements on the server).
class scratch_database {
  public:
    explicit scratch_database(const std::string& prefix)
        : name_(prefix + std::to_string(::getpid())), admin_(pg_dsn()) {
        pqxx::nontransaction n(admin_);
        n.exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
        n.exec("CREATE DATABASE " + name_);
    }
    ~scratch_database() {
        try {
            pqxx::nontransaction n(admin_);
            n.exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
        } catch (const std::exception&) {
        }
    }
    scratch_database(const scratch_database&) = delete;
    scratch_database& operator=(const scratch_database&) = delete;

    const std::string& name() const { return name_; }
    std::string url() const { return pg_url(name_); }
    // key=value form, for libpqxx.
    std::string dsn() const { return pg_dsn() + " dbname=" + name_; }
    pqxx::connection& admin() { return admin_; }

  private:
    std::string name_;
    pqxx::connection admin_;
};

}  // namespace wuhu::testing
