// The lease conformance suite on the in-memory and SQLite catalog backends, and the keeper.
#include "tests/ownership/lease_conformance.hpp"
#include "ownership/generations.hpp"
#include "ownership/keeper.hpp"
#include "ownership/memory_lease.hpp"
#include "ownership/sqlite_lease.hpp"
#include "storage/sqlite_db.hpp"
#include "storage/sqlite_store.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <thread>

namespace wuhu::testing {

namespace {

struct memory_backend final : lease_backend {
    ownership::memory_lease leases{clock()};
    ownership::lease_store& store() override { return leases; }
    std::unique_ptr<ownership::lease_store> another() override { return nullptr; }
};

struct sqlite_backend final : lease_backend {
    temp_dir dir;
    ownership::sqlite_lease leases{dir.path(), clock()};
    ownership::lease_store& store() override { return leases; }
    std::unique_ptr<ownership::lease_store> another() override {
        return std::make_unique<ownership::sqlite_lease>(dir.path(), clock());
    }
};

}  // namespace

std::unique_ptr<lease_backend> make_lease_backend(const std::string& name) {
    if (name == "memory") {
        return std::make_unique<memory_backend>();
    }
    return std::make_unique<sqlite_backend>();
}

TEST(SqliteLease, AReopenedCatalogHandsOutHigherEpochsThanBefore) {
    temp_dir dir;
    lease_epoch last;
    {
        ownership::sqlite_lease first(dir.path());
        for (const char* s : {"a", "b", "c"}) {
            last = granted(first.acquire(sid(s), "w1", 10s)).epoch;
        }
    }
    ownership::sqlite_lease restarted(dir.path());
    EXPECT_GT(granted(restarted.acquire(sid("a"), "w1", 10s)).epoch, last);
}

// Issue 13: the lease tables are ownership's own migrations. A catalog written when the session
// store's migrations made them (its second step; no `schema_parts`) keeps its leases and its
// last epoch, and both stores open it.
TEST(SqliteLease, ACatalogWhoseLeaseTablesTheStoreMadeKeepsItsLeasesAndEpochs) {
    temp_dir dir;
    {
        storage::sqlite::db old((dir.path() / "catalog.sqlite").string(), "FULL", 1000);
        old.exec(R"(CREATE TABLE sessions (id TEXT PRIMARY KEY, has_work INTEGER NOT NULL DEFAULT 0)
                        WITHOUT ROWID;
                    CREATE TABLE leases (id TEXT PRIMARY KEY, owner TEXT NOT NULL,
                        epoch INTEGER NOT NULL, expires INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE lease_epoch (one INTEGER PRIMARY KEY CHECK (one = 1),
                        last INTEGER NOT NULL);
                    INSERT INTO lease_epoch VALUES (1, 7);
                    INSERT INTO leases VALUES ('held', 'w1', 7, 9000000000000);
                    PRAGMA user_version = 2;)");
    }
    ownership::sqlite_lease leases(dir.path());
    storage::sqlite_store store(storage::sqlite_options{dir.path()});
    auto held = leases.owner_of(sid("held")).value();
    ASSERT_TRUE(held.has_value());
    EXPECT_EQ(held->owner, "w1");
    EXPECT_EQ(held->epoch, lease_epoch{7});
    EXPECT_EQ(granted(leases.acquire(sid("new"), "w2", 10s)).epoch, lease_epoch{8});
    EXPECT_TRUE(store.open(sid("new"), lease_epoch{8}).has_value()) << "the store's part opens too";
    ownership::sqlite_lease again(dir.path());  // migrated once: opening again changes nothing
    EXPECT_EQ(granted(again.acquire(sid("third"), "w2", 10s)).epoch, lease_epoch{9});
}

// Issue 36: once a renewal has gone lease by lease, the next renewals of the same leases write
// the worker's generation row alone: every lease row keeps its own expiry, and the leases stay
// live by the generation's.
TEST(SqliteLease, RenewingEveryHeldLeaseWritesOneRowAndNoLeaseRow) {
    temp_dir dir;
    std::atomic<std::int64_t> now{1'000'000};
    ownership::sqlite_lease leases(dir.path(), [&] { return unix_ms{now.load()}; });
    std::vector<lease> held;
    for (int i = 0; i < 100; ++i) {
        held.push_back(granted(leases.acquire(sid(("s" + std::to_string(i)).c_str()), "w1", 9s)));
    }
    now += 3'000;
    ASSERT_TRUE(leases.renew(held, 9s).value().empty());  // the first: lease by lease
    storage::sqlite::db raw((dir.path() / "catalog.sqlite").string(), "FULL", 1000);
    auto rows = [&](const char* sql) {
        std::string out;
        auto& q = raw.prepare(sql);
        while (q.step()) {
            out += std::string(q.text(0)) + "=" + std::to_string(q.int64(1)) + ";";
        }
        q.reset();
        return out;
    };
    const auto before = rows("SELECT id, own_expires FROM leases ORDER BY id");
    for (int round = 0; round < 5; ++round) {
        now += 3'000;
        ASSERT_TRUE(leases.renew(held, 9s).value().empty());
        EXPECT_EQ(rows("SELECT owner, expires FROM lease_generations WHERE expires > 0"),
                  "w1=" + std::to_string(now + 9'000) + ";")
            << "one live generation, renewed in round " << round;
    }
    EXPECT_EQ(rows("SELECT id, own_expires FROM leases ORDER BY id"), before)
        << "no lease row was written";
    EXPECT_EQ(leases.owner_of(sid("s42")).value()->expires, unix_ms{now + 9'000});
}

// A worker of an earlier release reads a lease's own expiry as the whole truth: once the tables
// are migrated, its statements fail (it serves and takes nothing) instead of taking leases
// that live by their generation.
TEST(SqliteLease, AWorkerOfAnEarlierReleaseCanNeitherReadNorTakeLeasesOnceMigrated) {
    temp_dir dir;
    ownership::sqlite_lease leases(dir.path());
    granted(leases.acquire(sid("a"), "w1", 9s));
    storage::sqlite::db earlier((dir.path() / "catalog.sqlite").string(), "FULL", 1000);
    EXPECT_THROW(earlier.prepare("SELECT id, owner, epoch, expires FROM leases WHERE id = ?1"),
                 storage::sqlite::error);
    EXPECT_THROW(earlier.prepare("UPDATE leases SET expires = ?1 WHERE id = ?2 AND owner = ?3 "
                                 "AND epoch = ?4 AND expires > ?5"),
                 storage::sqlite::error);
}

// The digest of a generation's leases: any order, told apart from a set that differs by one
// lease or one epoch; a doubted one (an operation failed, and may have committed) matches
// nothing until a new generation begins.
TEST(Generations, TheDigestIgnoresOrderTellsSetsApartAndADoubtedOneMatchesNothing) {
    auto l = [](const char* id, std::uint64_t e) {
        return lease{sid(id), "w1", lease_epoch{e}, unix_ms{0}, {}};
    };
    ownership::generations g;
    EXPECT_FALSE(g.covers({l("a", 1)})) << "no generation yet";
    g.begin("w1", 7, {l("a", 1), l("b", 2)});
    EXPECT_EQ(g.current("w1"), 7);
    EXPECT_TRUE(g.covers({l("b", 2), l("a", 1)}));
    EXPECT_FALSE(g.covers({l("a", 1)}));
    EXPECT_FALSE(g.covers({l("a", 1), l("b", 3)}));
    EXPECT_FALSE(g.covers({l("a", 1), l("c", 2)}));
    g.add(l("c", 5));
    EXPECT_TRUE(g.covers({l("a", 1), l("b", 2), l("c", 5)}));
    g.drop(l("a", 1));
    EXPECT_TRUE(g.covers({l("c", 5), l("b", 2)}));
    g.doubt();
    EXPECT_FALSE(g.covers({l("c", 5), l("b", 2)}));
    g.add(l("d", 6));
    EXPECT_FALSE(g.covers({l("c", 5), l("b", 2), l("d", 6)}));
    g.begin("w1", 8, {l("b", 2)});
    EXPECT_TRUE(g.covers({l("b", 2)}));
}

INSTANTIATE_TEST_SUITE_P(Backends, LeaseConformance, ::testing::Values("memory", "sqlite"),
                         [](const auto& info) { return info.param; });

// ---- the keeper

TEST(Keeper, PlacesHereOnceAcquiredAndElsewhereWhileAnotherWorkerIsLive) {
    std::atomic<std::int64_t> now{1'000};
    ownership::memory_lease leases([&] { return unix_ms{now.load()}; });
    ownership::keeper w1(leases, "w1", 3s), w2(leases, "w2", 3s);
    auto p1 = w1.place(sid("s")).value();
    ASSERT_TRUE(std::holds_alternative<ownership::keeper::here>(p1));
    EXPECT_EQ(w1.epoch_of(sid("s")).value(), std::get<ownership::keeper::here>(p1).epoch);
    auto p2 = w2.place(sid("s")).value();
    ASSERT_TRUE(std::holds_alternative<ownership::keeper::elsewhere>(p2));
    EXPECT_EQ(std::get<ownership::keeper::elsewhere>(p2).owner, "w1");
    // The lease it names, as locate() names it: a forward is watched against them.
    const auto held = leases.owner_of(sid("s")).value().value();
    EXPECT_EQ(std::get<ownership::keeper::elsewhere>(p2).epoch, held.epoch);
    EXPECT_EQ(std::get<ownership::keeper::elsewhere>(p2).expires, held.expires);
    auto located = w2.locate(sid("s")).value().value();
    EXPECT_EQ(std::get<ownership::keeper::elsewhere>(located).epoch, held.epoch);
    EXPECT_EQ(std::get<ownership::keeper::elsewhere>(located).expires, held.expires);
    EXPECT_EQ(w2.epoch_of(sid("s")).error(), make_error_code(ownership::errc::not_held));
}

TEST(Keeper, RenewReportsLostLeasesAndForgetsThem) {
    std::atomic<std::int64_t> now{1'000};
    ownership::memory_lease leases([&] { return unix_ms{now.load()}; });
    ownership::keeper w1(leases, "w1", 3s), w2(leases, "w2", 3s);
    w1.place(sid("lost")).value();
    now += 2'000;
    w1.place(sid("kept")).value();
    now += 1'000;  // w1 missed the renewal of `lost`; `kept` has 2 s left
    EXPECT_TRUE(std::holds_alternative<ownership::keeper::here>(w2.place(sid("lost")).value()));
    auto lost = w1.renew().value();
    ASSERT_EQ(lost.size(), 1u);
    EXPECT_EQ(lost[0], sid("lost"));
    EXPECT_EQ(w1.held(), 1u);
    EXPECT_FALSE(w1.epoch_of(sid("lost")).has_value());
}

TEST(Keeper, ReleaseAllHandsSessionsOverAtOnce) {
    ownership::memory_lease leases;
    ownership::keeper w1(leases, "w1", 60s), w2(leases, "w2", 60s);
    w1.place(sid("a")).value();
    w1.place(sid("b")).value();
    w1.release_all();
    EXPECT_EQ(w1.held(), 0u);
    EXPECT_TRUE(std::holds_alternative<ownership::keeper::here>(w2.place(sid("a")).value()));
    EXPECT_TRUE(std::holds_alternative<ownership::keeper::here>(w2.place(sid("b")).value()));
}

namespace {

// Wall and steady time under the test's control, a lease store that can be made to fail, and
// the lease events a keeper reports.
struct keeper_world {
    std::atomic<std::int64_t> wall{1'000'000};
    std::chrono::steady_clock::time_point steady{};
    bool failing = false;
    std::size_t named = 0;                // leases named to renew()
    std::size_t generations_renewed = 0;  // renewals of a whole generation
    std::function<void()> after_generation_renewal;

    struct flaky final : ownership::lease_store {
        explicit flaky(keeper_world& w)
            : world(w), inner([&w] { return unix_ms{w.wall.load()}; }) {}
        ownership::result<acquisition> acquire(const session_id& id, std::string_view owner,
                                               std::chrono::milliseconds ttl) override {
            if (world.failing) {
                return storage::errc::unavailable;
            }
            return inner.acquire(id, owner, ttl);
        }
        ownership::result<std::vector<session_id>> renew(const std::vector<lease>& held,
                                                         std::chrono::milliseconds ttl) override {
            if (world.failing) {
                return storage::errc::unavailable;
            }
            world.named += held.size();
            return inner.renew(held, ttl);
        }
        ownership::result<bool> renew_generation(std::string_view owner, std::size_t count,
                                                 std::uint64_t digest,
                                                 std::chrono::milliseconds ttl) override {
            if (world.failing) {
                return storage::errc::unavailable;
            }
            auto renewed = inner.renew_generation(owner, count, digest, ttl);
            world.generations_renewed += renewed && *renewed;
            if (world.after_generation_renewal) {
                world.after_generation_renewal();
            }
            return renewed;
        }
        ownership::result<std::vector<lease>> claim(const std::vector<session_id>& candidates,
                                                    std::string_view owner,
                                                    std::chrono::milliseconds ttl,
                                                    std::size_t limit) override {
            if (world.failing) {
                return storage::errc::unavailable;
            }
            return inner.claim(candidates, owner, ttl, limit);
        }
        ownership::result<void> release(const lease& held) override { return inner.release(held); }
        ownership::result<std::optional<lease>> owner_of(const session_id& id) override {
            if (world.failing) {
                return storage::errc::unavailable;
            }
            return inner.owner_of(id);
        }
        ownership::result<std::vector<lease>> live(const ownership::lease_query& q) override {
            return inner.live(q);
        }
        ownership::result<std::vector<std::string>> owners() override { return inner.owners(); }
        ownership::result<void> remove(const session_id& id, lease_epoch epoch) override {
            return inner.remove(id, epoch);
        }
        std::string_view backend() const override { return "flaky"; }
        keeper_world& world;
        ownership::memory_lease inner;
    } leases{*this};

    // ttl 3 s: renewed every 1 s, served until 2.4 s after the last renewal began.
    std::unique_ptr<ownership::keeper> make(const std::string& id,
                                            std::vector<std::string>* events = nullptr) {
        auto k = std::make_unique<ownership::keeper>(
            leases, id, ownership::lease_settings::for_ttl(3s), [this] { return steady; });
        if (events != nullptr) {
            k->on_event([events](ownership::lease_event e, const lease& l) {
                events->push_back(std::string(ownership::lease_event_name(e)) + " " + l.id.str() +
                                  (l.taken_from.empty() ? "" : " from " + l.taken_from));
            });
        }
        return k;
    }
    void advance(std::chrono::milliseconds d) {
        wall += d.count();
        steady += d;
    }
};

bool here(const ownership::result<ownership::keeper::placement>& p) {
    return p && std::holds_alternative<ownership::keeper::here>(*p);
}

}  // namespace

// Defect: a frozen owner served its session right after it woke up, from its old state. A lease
// is served only until stop_margin before it would expire; past that, the store decides.
TEST(Keeper, ALeasePastItsDeadlineIsCheckedWithTheStoreBeforeItIsServed) {
    keeper_world w;
    std::vector<std::string> events;
    auto w1 = w.make("w1", &events);
    auto w2 = w.make("w2");
    ASSERT_TRUE(here(w1->place(sid("s"))));
    w.advance(3'500ms);  // w1 was frozen past its lease; w2 takes the session over
    ASSERT_TRUE(here(w2->place(sid("s"))));
    auto p = w1->place(sid("s"));
    ASSERT_TRUE(p);
    ASSERT_TRUE(std::holds_alternative<ownership::keeper::elsewhere>(*p));
    EXPECT_EQ(std::get<ownership::keeper::elsewhere>(*p).owner, "w2");
    EXPECT_EQ(events, (std::vector<std::string>{"acquired s", "lost s"}));
    EXPECT_EQ(w1->held(), 0u);
}

TEST(Keeper, ALeaseStillHeldPastItsDeadlineIsRenewedAndServed) {
    keeper_world w;
    std::vector<std::string> events;
    auto w1 = w.make("w1", &events);
    const auto first = w1->place(sid("s"));
    ASSERT_TRUE(here(first));
    w.advance(2'500ms);  // past the deadline (2.4 s), not past the lease (3 s)
    auto again = w1->locate(sid("s"));
    ASSERT_TRUE(again && *again);
    EXPECT_EQ(std::get<ownership::keeper::here>(**again).epoch,
              std::get<ownership::keeper::here>(*first).epoch)
        << "renewed, not taken again";
    EXPECT_EQ(events, std::vector<std::string>{"acquired s"});
}

TEST(Keeper, WhenRenewalFailsALeaseIsDroppedAtItsDeadlineAndNotServed) {
    keeper_world w;
    std::vector<std::string> events;
    auto w1 = w.make("w1", &events);
    ASSERT_TRUE(here(w1->place(sid("s"))));
    w.failing = true;
    w.advance(1'000ms);
    EXPECT_FALSE(w1->renew()) << "the store is away";
    EXPECT_EQ(w1->held(), 1u) << "still within its deadline";
    ASSERT_TRUE(here(w1->place(sid("s"))));
    w.advance(1'500ms);
    EXPECT_FALSE(w1->place(sid("s"))) << "past its deadline it is not served while unsure";
    EXPECT_FALSE(w1->renew());
    EXPECT_EQ(w1->held(), 0u);
    EXPECT_EQ(events, (std::vector<std::string>{"acquired s", "lost s"}));
}

// The stop margin: an owner that cannot renew is no longer serving at its deadline (it stops
// streaming at once) and gives the lease up then, without asking the store, which may not
// answer; the deadline it reports is the one its wake-up is set to.
TEST(Keeper, AnOwnerThatCannotRenewStopsServingAtTheDeadlineAndGivesTheLeaseUp) {
    keeper_world w;
    std::vector<std::string> events;
    auto w1 = w.make("w1", &events);
    EXPECT_FALSE(w1->next_deadline()) << "nothing held";
    ASSERT_TRUE(here(w1->place(sid("s"))));
    const auto placed = w.steady;
    EXPECT_EQ(w1->next_deadline(), placed + 2'400ms) << "ttl 3 s, stop margin 600 ms";
    EXPECT_TRUE(w1->serving(sid("s")));
    EXPECT_FALSE(w1->serving(sid("other")));
    w.failing = true;
    w.advance(1'000ms);
    EXPECT_FALSE(w1->renew());
    w1->expire_overdue();
    EXPECT_TRUE(w1->serving(sid("s"))) << "within its deadline";
    EXPECT_EQ(w1->held(), 1u);
    w.advance(1'400ms);  // the deadline
    EXPECT_FALSE(w1->serving(sid("s"))) << "no more streaming or status for it";
    w1->expire_overdue();
    EXPECT_EQ(w1->held(), 0u);
    EXPECT_FALSE(w1->next_deadline());
    EXPECT_EQ(events, (std::vector<std::string>{"acquired s", "lost s"}));
}

// The renewal loop wakes at next_deadline(), which the keeper keeps without a walk of its
// leases: never later than a held lease's deadline, exact again after a renewal.
TEST(Keeper, TheNextDeadlineIsNeverLaterThanAHeldLeasesAndExactAfterARenewal) {
    keeper_world w;
    auto w1 = w.make("w1");
    const auto t0 = w.steady;
    ASSERT_TRUE(here(w1->place(sid("s1"))));
    w.advance(500ms);
    ASSERT_TRUE(here(w1->place(sid("s2"))));
    EXPECT_EQ(w1->next_deadline(), t0 + 2'400ms) << "s1's";
    w1->release(sid("s1"));
    ASSERT_TRUE(w1->next_deadline());
    EXPECT_LE(*w1->next_deadline(), t0 + 2'900ms) << "never later than s2's";
    ASSERT_TRUE(w1->renew());
    EXPECT_EQ(w1->next_deadline(), t0 + 2'900ms) << "exact after a renewal";
    w.advance(1'000ms);
    ASSERT_TRUE(w1->renew());
    EXPECT_EQ(w1->next_deadline(), t0 + 3'900ms);
    w.advance(500ms);
    ASSERT_TRUE(here(w1->place(sid("s3"))));
    EXPECT_EQ(w1->next_deadline(), t0 + 3'900ms) << "s2's, earlier than s3's";
    w1->release(sid("s2"));
    w1->expire_overdue();
    EXPECT_EQ(w1->next_deadline(), t0 + 4'400ms) << "exact after an expiry walk: s3's";
    w1->release(sid("s3"));
    EXPECT_FALSE(w1->next_deadline()) << "nothing held";
}

// Renewal per worker, on the worker's side too: once the store stamped exactly the held
// leases with the worker's generation, a round names none of them (no walk of 100,000 leases),
// and every lease held before the round began is served until the round's deadline.
TEST(Keeper, ARoundRenewingTheWholeGenerationNamesNoLeaseAndServesEveryOneItCovers) {
    keeper_world w;
    auto w1 = w.make("w1");
    const auto t0 = w.steady;
    ASSERT_TRUE(here(w1->place(sid("s1"))));
    ASSERT_TRUE(here(w1->place(sid("s2"))));
    w.advance(1'000ms);
    ASSERT_TRUE(w1->renew());
    EXPECT_EQ(w.named, 2u) << "the first round names them: the generation is not live yet";
    w.advance(1'000ms);
    ASSERT_TRUE(w1->renew());
    EXPECT_EQ(w.named, 2u) << "none named";
    EXPECT_EQ(w.generations_renewed, 1u);
    EXPECT_EQ(w1->next_deadline(), t0 + 4'400ms);
    w.advance(1'900ms);  // past the first round's deadline (3.4 s), before this one's
    EXPECT_TRUE(w1->serving(sid("s1")));
    EXPECT_TRUE(w1->here_now(sid("s2")));
    w1->release(sid("s2"));
    ASSERT_TRUE(here(w1->place(sid("s3"))));
    ASSERT_TRUE(w1->renew());
    EXPECT_EQ(w.named, 2u) << "a release and an acquisition keep the digest matching";
    EXPECT_EQ(w.generations_renewed, 2u);
    w.advance(2'300ms);  // t0 + 6.2 s
    EXPECT_TRUE(w1->serving(sid("s1")));
    EXPECT_TRUE(w1->serving(sid("s3")));
    w.advance(200ms);  // past the last round's deadline (t0 + 6.3 s)
    EXPECT_FALSE(w1->serving(sid("s1")));
    w1->expire_overdue();
    EXPECT_EQ(w1->held(), 0u);
}

// A lease whose acquisition began before a round, but was kept while the round ran, is not
// the round's: it is served until its own deadline, which the next deadline then is.
TEST(Keeper, ALeaseKeptWhileARoundRanIsServedOnlyUntilItsOwnDeadline) {
    keeper_world w;
    auto w1 = w.make("w1");
    const auto t0 = w.steady;
    ASSERT_TRUE(here(w1->place(sid("s1"))));
    w.advance(1'000ms);
    ASSERT_TRUE(w1->renew());  // the generation is live from now
    w.advance(1'000ms);        // t0 + 2 s
    w.after_generation_renewal = [&] {
        w.after_generation_renewal = nullptr;
        w.steady -= 500ms;  // this acquisition began half a second before the round
        ASSERT_TRUE(here(w1->place(sid("late"))));
        w.steady += 500ms;
    };
    ASSERT_TRUE(w1->renew());
    EXPECT_EQ(w.generations_renewed, 1u);
    EXPECT_EQ(w1->next_deadline(), t0 + 3'900ms) << "late's own: 1.5 s + 2.4 s";
    w.advance(1'950ms);  // t0 + 3.95 s
    EXPECT_FALSE(w1->serving(sid("late")));
    EXPECT_TRUE(w1->serving(sid("s1"))) << "the round's: t0 + 4.4 s";
    w1->expire_overdue();
    EXPECT_EQ(w1->held_ids(), std::vector<session_id>{sid("s1")});
    EXPECT_EQ(w1->next_deadline(), t0 + 4'400ms);
}

TEST(Keeper, LocateTakesNothingAndEventsNameTakeOversAndReleases) {
    keeper_world w;
    std::vector<std::string> events;
    auto w1 = w.make("w1");
    auto w2 = w.make("w2", &events);
    auto nobody = w2->locate(sid("s"));
    ASSERT_TRUE(nobody);
    EXPECT_FALSE(nobody->has_value());
    EXPECT_FALSE(w.leases.owner_of(sid("s")).value().has_value()) << "nothing taken";
    ASSERT_TRUE(here(w1->place(sid("s"))));
    auto there = w2->locate(sid("s"));
    ASSERT_TRUE(there && *there);
    EXPECT_EQ(std::get<ownership::keeper::elsewhere>(**there).owner, "w1");
    w.advance(3'500ms);  // w1's lease runs out
    ASSERT_TRUE(here(w2->place(sid("s"))));
    w2->release(sid("s"));
    EXPECT_EQ(events, (std::vector<std::string>{"taken_over s from w1", "released s"}));
}

TEST(Keeper, RejectsWorkerIdsThatAreNotSubjectTokens) {
    ownership::memory_lease leases;
    for (const char* bad : {"", "a.b", "w*", "w>", "w 1", "a/b"}) {
        EXPECT_THROW(ownership::keeper(leases, bad, 1s), std::invalid_argument) << bad;
    }
    EXPECT_NO_THROW(ownership::keeper(leases, "worker-1_A", 1s));
}

}  // namespace wuhu::testing
