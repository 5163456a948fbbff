// One conformance suite for every lease backend: the rules of ownership/lease.hpp. The suite
// (lease_conformance_suite.cpp) is compiled into each test binary that instantiates it with
// its backends: ownership_tests (memory, SQLite catalog) and pg_tests (PostgreSQL).
#pragma once

#include "ownership/lease.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

namespace wuhu::testing {

using namespace std::chrono_literals;
using ownership::acquisition;
using ownership::held_elsewhere;
using ownership::lease;
using session::lease_epoch;
using session::session_id;
using session::unix_ms;

inline session_id sid(const char* s) {
    return session_id::parse_key(s).value();
}

// A backend over a manual clock.
struct lease_backend {
    virtual ~lease_backend() = default;
    virtual ownership::lease_store& store() = 0;
    // Another handle on the same leases (another worker process), or none (in-memory).
    virtual std::unique_ptr<ownership::lease_store> another() = 0;
    std::atomic<std::int64_t> now{1'000'000};
    ownership::wall_clock clock() {
        return [this] { return unix_ms{now.load()}; };
    }
};

// Defined by each binary for the backends it instantiates the suite with.
std::unique_ptr<lease_backend> make_lease_backend(const std::string& name);

inline lease granted(const ownership::result<acquisition>& a) {
    EXPECT_TRUE(a.has_value());
    EXPECT_TRUE(a && std::holds_alternative<lease>(*a)) << "expected the lease to be granted";
    if (a && std::holds_alternative<lease>(*a)) {
        return std::get<lease>(*a);
    }
    return lease{sid("none"), "", lease_epoch{0}, unix_ms{0}, {}};
}

class LeaseConformance : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override { b_ = make_lease_backend(GetParam()); }
    ownership::lease_store& store() { return b_->store(); }
    std::unique_ptr<lease_backend> b_;
};

}  // namespace wuhu::testing
