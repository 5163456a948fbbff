// The PostgreSQL lease backend against a real server (scripts/test starts it): the lease
// conformance suite over a test clock, and what only a database-backed lease promises.
#include "ownership/postgres_lease.hpp"
#include "storage/postgres_store.hpp"
#include "tests/ownership/lease_conformance.hpp"
#include "tests/support/pg_env.hpp"

#include <pqxx/pqxx>

#include <atomic>
#include <future>

namespace wuhu::testing {

namespace {

struct postgres_backend final : lease_backend {
    std::string schema = fresh_schema("l");
    ownership::postgres_lease leases{ownership::postgres_lease_options{pg_dsn(), schema, clock()}};
    ~postgres_backend() override { drop_schema(schema); }
    ownership::lease_store& store() override { return leases; }
    std::unique_ptr<ownership::lease_store> another() override {
        return std::make_unique<ownership::postgres_lease>(
            ownership::postgres_lease_options{pg_dsn(), schema, clock()});
    }
};

// Drops its schema when the test ends.
struct schema_guard {
    std::string name = fresh_schema("l");
    ~schema_guard() { drop_schema(name); }
};

}  // namespace

std::unique_ptr<lease_backend> make_lease_backend(const std::string&) {
    return std::make_unique<postgres_backend>();
}

INSTANTIATE_TEST_SUITE_P(Postgres, LeaseConformance, ::testing::Values("postgres"),
                         [](const auto& info) { return info.param; });

// A restarted worker (a new connection, a new process) gets epochs above every one handed out
// before: the in-memory lease started again at 1, and the sessions refused their own owner.
TEST(PostgresLease, ARestartedBackendHandsOutHigherEpochsThanBefore) {
    schema_guard s;
    lease_epoch last;
    {
        ownership::postgres_lease first({pg_dsn(), s.name, {}});
        for (const char* id : {"a", "b", "c"}) {
            last = granted(first.acquire(sid(id), "w1", 10s)).epoch;
        }
        ASSERT_TRUE(first.release(granted(first.acquire(sid("a"), "w1", 10s))));
    }
    ownership::postgres_lease restarted({pg_dsn(), s.name, {}});
    EXPECT_GT(granted(restarted.acquire(sid("a"), "w1", 10s)).epoch, last);
}

// A database that ran with in-memory leases has sessions at epochs the new lease table never
// handed out: its first epoch is above all of them, so no session refuses its owner.
TEST(PostgresLease, TheFirstEpochIsAboveEveryEpochTheSessionStoreRecorded) {
    schema_guard s;
    storage::postgres_store store({pg_dsn(), s.name, 1});
    ASSERT_TRUE(store.open(sid("old"), lease_epoch{239}));
    ownership::postgres_lease leases({pg_dsn(), s.name, {}});
    const auto l = granted(leases.acquire(sid("old"), "w1", 10s));
    EXPECT_GT(l.epoch, lease_epoch{239});
    EXPECT_TRUE(store.open(sid("old"), l.epoch)) << "the session accepts its new owner";
}

// Issue 36: once a renewal has gone lease by lease, the next renewals of the same leases write
// one row, the worker's generation, and no lease row (a row's ctid changes with every version
// written, a HOT update's too); the leases stay live by it.
TEST(PostgresLease, RenewingEveryHeldLeaseWritesOneRowAndNoLeaseRow) {
    schema_guard s;
    std::atomic<std::int64_t> now{1'000'000};
    ownership::postgres_lease leases({pg_dsn(), s.name, [&] { return unix_ms{now.load()}; }});
    std::vector<lease> held;
    for (int i = 0; i < 100; ++i) {
        held.push_back(granted(leases.acquire(sid(("s" + std::to_string(i)).c_str()), "w1", 9s)));
    }
    now += 3'000;
    ASSERT_TRUE(leases.renew(held, 9s).value().empty());  // the first: lease by lease
    pqxx::connection c(pg_dsn());
    auto versions = [&](const std::string& table) {
        pqxx::nontransaction n(c);
        std::string out;
        for (const auto& r :
             n.exec("SELECT ctid::text FROM " + s.name + "." + table + " ORDER BY ctid")) {
            out += r[0].c_str();
        }
        return out;
    };
    const auto before = versions("leases");
    auto generation = versions("lease_generations");
    for (int round = 0; round < 5; ++round) {
        now += 3'000;
        ASSERT_TRUE(leases.renew(held, 9s).value().empty());
        const auto after = versions("lease_generations");
        EXPECT_NE(after, generation) << "the generation's row is written, round " << round;
        generation = after;
    }
    EXPECT_EQ(versions("leases"), before) << "no lease row was written";
    EXPECT_EQ(leases.owner_of(sid("s42")).value()->expires, unix_ms{now + 9'000});
}

// A renewal of a worker's generation in flight (its transaction not yet committed) when another
// worker sees its leases expired: the other waits for it (it closes an expired generation by
// writing its row), then finds them live, and takes nothing, by acquire or by claim. Without
// that, the renewal committed after the other had taken the lease: two owners, and the first
// one's renewals went on succeeding.
TEST(PostgresLease, ARenewalInFlightIsWaitedForBeforeAnotherWorkerTakesItsLeases) {
    schema_guard s;
    std::atomic<std::int64_t> now{1'000'000};
    auto clock = [&] { return unix_ms{now.load()}; };
    ownership::postgres_lease first({pg_dsn(), s.name, clock});
    ownership::postgres_lease second({pg_dsn(), s.name, clock});
    std::vector<lease> held{granted(first.acquire(sid("a"), "w1", 9s)),
                            granted(first.acquire(sid("b"), "w1", 9s))};
    for (int round = 0; round < 2; ++round) {
        now += 3'000;
        ASSERT_TRUE(first.renew(held, 9s).value().empty());
    }
    // The generation expires at now + 9 s; its renewal, begun before that, commits after.
    pqxx::connection renewing(pg_dsn());
    pqxx::work w(renewing);
    w.exec0("UPDATE " + s.name +
            ".lease_generations SET expires = expires + 9000 "
            "WHERE owner = 'w1' AND expires > 0");
    now += 9'000;
    auto acquiring =
        std::async(std::launch::async, [&] { return second.acquire(sid("a"), "w2", 9s); });
    auto claiming =
        std::async(std::launch::async, [&] { return second.claim({sid("b")}, "w2", 9s, 10); });
    EXPECT_EQ(acquiring.wait_for(300ms), std::future_status::timeout) << "it waits for the renewal";
    w.commit();
    const auto acquired = acquiring.get();
    ASSERT_TRUE(acquired.has_value());
    EXPECT_TRUE(std::holds_alternative<held_elsewhere>(*acquired)) << "a is still w1's";
    const auto claimed = claiming.get();
    ASSERT_TRUE(claimed.has_value());
    EXPECT_TRUE(claimed->empty()) << "b is still w1's";
    EXPECT_EQ(first.owner_of(sid("a")).value()->owner, "w1");
    EXPECT_EQ(first.owner_of(sid("b")).value()->owner, "w1");
}

// The other order: a worker takes a lease once its owner's generation has expired, and the
// owner's renewal of that generation is evaluated at a moment before the expiry (its clock a
// little behind, as a statement begun before the take). The take closed the generation, so
// the renewal does not extend it: it goes lease by lease and reports the lease lost.
TEST(PostgresLease, ARenewalAfterAnotherWorkerTookALeaseOfTheExpiredGenerationReportsItLost) {
    schema_guard s;
    std::atomic<std::int64_t> now{1'000'000};
    ownership::postgres_lease first({pg_dsn(), s.name, [&] { return unix_ms{now.load()}; }});
    ownership::postgres_lease second(
        {pg_dsn(), s.name, [&] { return unix_ms{now.load() + 2'000}; }});
    std::vector<lease> held{granted(first.acquire(sid("a"), "w1", 9s)),
                            granted(first.acquire(sid("b"), "w1", 9s))};
    for (int round = 0; round < 2; ++round) {
        now += 3'000;
        ASSERT_TRUE(first.renew(held, 9s).value().empty());
    }
    now += 8'000;  // the generation expires in 1 s by the first's clock; 1 s ago by the second's
    EXPECT_EQ(granted(second.acquire(sid("a"), "w2", 9s)).taken_from, "w1");
    EXPECT_EQ(first.renew(held, 9s).value(), std::vector<session_id>{sid("a")});
    EXPECT_EQ(first.owner_of(sid("a")).value()->owner, "w2");
    EXPECT_EQ(first.owner_of(sid("b")).value()->epoch, held[1].epoch);
}

// A worker of an earlier release reads a lease's own expiry as the whole truth: once the tables
// are migrated, its statements fail (it serves and takes nothing) instead of taking leases that
// live by their generation.
TEST(PostgresLease, AWorkerOfAnEarlierReleaseCanNeitherReadNorTakeLeasesOnceMigrated) {
    schema_guard s;
    ownership::postgres_lease leases({pg_dsn(), s.name, {}});
    granted(leases.acquire(sid("a"), "w1", 9s));
    pqxx::connection c(pg_dsn());
    pqxx::nontransaction n(c);
    EXPECT_THROW(n.exec("SELECT session_id, owner, epoch, expires FROM " + s.name + ".leases"),
                 pqxx::sql_error);
}

// Expiry is the database's clock: a lease of 300 ms is live, then gone, whatever the host's.
TEST(PostgresLease, ExpiryFollowsTheDatabaseClock) {
    schema_guard s;
    ownership::postgres_lease leases({pg_dsn(), s.name, {}});
    const auto l = granted(leases.acquire(sid("s"), "w1", 300ms));
    EXPECT_EQ(leases.owner_of(sid("s")).value(), l);
    EXPECT_TRUE(std::holds_alternative<held_elsewhere>(
        leases.acquire(sid("s"), "w2", 300ms).value()));
    std::this_thread::sleep_for(400ms);
    EXPECT_FALSE(leases.owner_of(sid("s")).value().has_value());
    const auto taken = granted(leases.acquire(sid("s"), "w2", 10s));
    EXPECT_EQ(taken.taken_from, "w1");
    EXPECT_GT(taken.epoch, l.epoch);
}

// A database that cannot be reached is `unavailable` (the lease is not held), and the backend
// connects again once it can.
TEST(PostgresLease, AnUnreachableDatabaseIsUnavailableNotAnException) {
    schema_guard s;
    // Named, so that only this backend's connection is cut (tests run in parallel).
    const std::string name = "lease_cut_" + s.name;
    ownership::postgres_lease leases({pg_dsn() + " application_name=" + name, s.name, {}});
    ASSERT_TRUE(leases.acquire(sid("r"), "w1", 10s).has_value());  // connected
    pqxx::connection admin(pg_dsn());
    {
        pqxx::nontransaction n(admin);
        auto cut = n.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                          "application_name = '" + name + "'");
        ASSERT_EQ(cut.size(), 1u);
    }
    // The first call may meet the terminated connection; the next one connects again.
    auto first = leases.acquire(sid("s"), "w1", 10s);
    if (!first) {
        EXPECT_EQ(first.error(), storage::errc::unavailable);
    }
    EXPECT_TRUE(leases.acquire(sid("t"), "w1", 10s).has_value());
}

}  // namespace wuhu::testing
