// One suite for every lease backend (in-memory, SQLite catalog): the rules of ownership/lease.hpp.
#include "ownership/keeper.hpp"
#include "ownership/memory_lease.hpp"
#include "ownership/sqlite_lease.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

namespace wuhu::testing {

using namespace std::chrono_literals;
using ownership::acquisition;
using ownership::held_elsewhere;
using ownership::lease;
using session::lease_epoch;
using session::session_id;
using session::unix_ms;

namespace {

session_id sid(const char* s) {
    return session_id::parse(s).value();
}

// A backend over a manual clock.
struct backend {
    virtual ~backend() = default;
    virtual ownership::lease_store& store() = 0;
    // Another handle on the same leases (another worker process for SQLite).
    virtual std::unique_ptr<ownership::lease_store> another() = 0;
    std::atomic<std::int64_t> now{1'000'000};
    ownership::wall_clock clock() {
        return [this] { return unix_ms{now.load()}; };
    }
};

struct memory_backend final : backend {
    ownership::memory_lease leases{clock()};
    ownership::lease_store& store() override { return leases; }
    std::unique_ptr<ownership::lease_store> another() override { return nullptr; }
};

struct sqlite_backend final : backend {
    temp_dir dir;
    ownership::sqlite_lease leases{dir.path(), clock()};
    ownership::lease_store& store() override { return leases; }
    std::unique_ptr<ownership::lease_store> another() override {
        return std::make_unique<ownership::sqlite_lease>(dir.path(), clock());
    }
};

lease granted(const ownership::result<acquisition>& a) {
    EXPECT_TRUE(a.has_value());
    EXPECT_TRUE(a && std::holds_alternative<lease>(*a)) << "expected the lease to be granted";
    if (a && std::holds_alternative<lease>(*a)) {
        return std::get<lease>(*a);
    }
    return lease{sid("none"), "", lease_epoch{0}, unix_ms{0}, {}};
}

}  // namespace

class LeaseConformance : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        if (GetParam() == "memory") {
            b_ = std::make_unique<memory_backend>();
        } else {
            b_ = std::make_unique<sqlite_backend>();
        }
    }
    ownership::lease_store& store() { return b_->store(); }
    std::unique_ptr<backend> b_;
};

TEST_P(LeaseConformance, AcquireFreeSessionGrantsLeaseUntilNowPlusTtl) {
    auto l = granted(store().acquire(sid("s1"), "w1", 10s));
    EXPECT_EQ(l.id, sid("s1"));
    EXPECT_EQ(l.owner, "w1");
    EXPECT_EQ(l.expires, unix_ms{b_->now + 10'000});
    EXPECT_GT(l.epoch, lease_epoch{0});
    EXPECT_EQ(store().owner_of(sid("s1")).value(), l);
}

TEST_P(LeaseConformance, LiveLeaseOfAnotherOwnerIsHeldElsewhere) {
    auto l = granted(store().acquire(sid("s1"), "w1", 10s));
    auto other = store().acquire(sid("s1"), "w2", 10s);
    ASSERT_TRUE(other.has_value());
    ASSERT_TRUE(std::holds_alternative<held_elsewhere>(*other));
    EXPECT_EQ(std::get<held_elsewhere>(*other).owner, "w1");
    EXPECT_EQ(std::get<held_elsewhere>(*other).expires, l.expires);
}

TEST_P(LeaseConformance, EpochsOnlyGrowAcrossSessionsOwnersAndRemoval) {
    auto a = granted(store().acquire(sid("s1"), "w1", 10s));
    auto b = granted(store().acquire(sid("s2"), "w1", 10s));
    EXPECT_GT(b.epoch, a.epoch);
    auto again = granted(store().acquire(sid("s1"), "w1", 10s));  // own lease, taken afresh
    EXPECT_GT(again.epoch, b.epoch);
    ASSERT_TRUE(store().remove(sid("s1"), again.epoch));
    auto recreated = granted(store().acquire(sid("s1"), "w2", 10s));
    EXPECT_GT(recreated.epoch, again.epoch);
}

// A deletion forgets the lease it ran under (and older ones), never one taken after it: the
// new owner of a re-created session keeps it.
TEST_P(LeaseConformance, RemovingForgetsOnlyLeasesNotNewerThanTheDeletion) {
    auto deleting = granted(store().acquire(sid("s1"), "w1", 10s));
    ASSERT_TRUE(store().remove(sid("s1"), deleting.epoch));
    EXPECT_FALSE(store().owner_of(sid("s1")).value().has_value());
    auto next = granted(store().acquire(sid("s1"), "w2", 10s));
    ASSERT_TRUE(store().remove(sid("s1"), deleting.epoch));  // a late repeat of the deletion
    EXPECT_EQ(store().owner_of(sid("s1")).value(), next);
}

TEST_P(LeaseConformance, ExpiredLeaseIsTakenOverWithHigherEpochAndOldOwnerLosesRenewal) {
    auto old = granted(store().acquire(sid("s1"), "w1", 10s));
    b_->now += 10'000;  // expired exactly now
    EXPECT_FALSE(store().owner_of(sid("s1")).value().has_value());
    auto taken = granted(store().acquire(sid("s1"), "w2", 10s));
    EXPECT_GT(taken.epoch, old.epoch);
    auto lost = store().renew({old}, 10s).value();
    ASSERT_EQ(lost.size(), 1u);
    EXPECT_EQ(lost[0], sid("s1"));
    EXPECT_EQ(store().owner_of(sid("s1")).value()->owner, "w2");
}

TEST_P(LeaseConformance, RenewExtendsEveryHeldLeaseInOneCall) {
    auto a = granted(store().acquire(sid("a"), "w1", 10s));
    auto b = granted(store().acquire(sid("b"), "w1", 10s));
    b_->now += 9'000;
    EXPECT_TRUE(store().renew({a, b}, 10s).value().empty());
    b_->now += 9'000;  // past the first expiry, within the renewed one
    EXPECT_EQ(store().owner_of(sid("a")).value()->owner, "w1");
    EXPECT_EQ(store().owner_of(sid("b")).value()->epoch, b.epoch);
    EXPECT_TRUE(
        std::holds_alternative<held_elsewhere>(store().acquire(sid("a"), "w2", 1s).value()));
}

TEST_P(LeaseConformance, ReleaseLetsAnotherOwnerTakeAtOnce) {
    auto l = granted(store().acquire(sid("s1"), "w1", 10s));
    ASSERT_TRUE(store().release(l));
    EXPECT_FALSE(store().owner_of(sid("s1")).value().has_value());
    auto next = granted(store().acquire(sid("s1"), "w2", 10s));
    EXPECT_GT(next.epoch, l.epoch);
}

TEST_P(LeaseConformance, StaleReleaseDoesNotFreeTheNewOwnersLease) {
    auto old = granted(store().acquire(sid("s1"), "w1", 1s));
    b_->now += 1'000;
    auto next = granted(store().acquire(sid("s1"), "w2", 10s));
    EXPECT_EQ(next.taken_from, "w1") << "a take-over names the owner whose lease expired";
    ASSERT_TRUE(store().release(old));
    next.taken_from.clear();  // only acquire() says it
    EXPECT_EQ(store().owner_of(sid("s1")).value(), next);
}

TEST_P(LeaseConformance, LiveListsOnlyUnexpiredLeases) {
    granted(store().acquire(sid("a"), "w1", 1s));
    auto b = granted(store().acquire(sid("b"), "w2", 10s));
    b_->now += 1'000;
    auto live = store().live().value();
    ASSERT_EQ(live.size(), 1u);
    EXPECT_EQ(live[0], b);
}

TEST_P(LeaseConformance, RacingWorkersNeverBothWin) {
    // Two handles (two processes for SQLite), eight threads each racing for the same sessions.
    auto second = b_->another();
    ownership::lease_store& a = store();
    ownership::lease_store& b = second ? *second : store();
    constexpr int sessions = 20;
    std::atomic<int> wins[sessions] = {};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            auto& st = t % 2 == 0 ? a : b;
            for (int i = 0; i < sessions; ++i) {
                auto got = st.acquire(sid(("r" + std::to_string(i)).c_str()),
                                      "w" + std::to_string(t), 60s);
                ASSERT_TRUE(got.has_value()) << got.error().message();
                if (std::holds_alternative<lease>(*got)) {
                    ++wins[i];
                }
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    for (int i = 0; i < sessions; ++i) {
        EXPECT_EQ(wins[i].load(), 1) << "session r" << i;
    }
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
    EXPECT_EQ(w2.epoch_of(sid("s")).error(), make_error_code(ownership::errc::not_held));
}

TEST(Keeper, RenewReportsLostLeasesAndForgetsThem) {
    std::atomic<std::int64_t> now{1'000};
    ownership::memory_lease leases([&] { return unix_ms{now.load()}; });
    ownership::keeper w1(leases, "w1", 3s), w2(leases, "w2", 3s);
    w1.place(sid("kept")).value();
    w1.place(sid("lost")).value();
    now += 3'000;  // w1 missed its renewals
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
            return inner.renew(held, ttl);
        }
        ownership::result<void> release(const lease& held) override { return inner.release(held); }
        ownership::result<std::optional<lease>> owner_of(const session_id& id) override {
            if (world.failing) {
                return storage::errc::unavailable;
            }
            return inner.owner_of(id);
        }
        ownership::result<std::vector<lease>> live() override { return inner.live(); }
        ownership::result<void> remove(const session_id& id, lease_epoch epoch) override {
            return inner.remove(id, epoch);
        }
        std::string_view backend() const override { return "flaky"; }
        keeper_world& world;
        ownership::memory_lease inner;
    } leases{*this};

    // ttl 3 s: renewed every 1 s, served until 2.4 s after the last renewal began.
    ownership::keeper make(const std::string& id, std::vector<std::string>* events = nullptr) {
        ownership::keeper k(leases, id, ownership::lease_settings::for_ttl(3s),
                            [this] { return steady; });
        if (events != nullptr) {
            k.on_event([events](ownership::lease_event e, const lease& l) {
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
    ASSERT_TRUE(here(w1.place(sid("s"))));
    w.advance(3'500ms);  // w1 was frozen past its lease; w2 takes the session over
    ASSERT_TRUE(here(w2.place(sid("s"))));
    auto p = w1.place(sid("s"));
    ASSERT_TRUE(p);
    ASSERT_TRUE(std::holds_alternative<ownership::keeper::elsewhere>(*p));
    EXPECT_EQ(std::get<ownership::keeper::elsewhere>(*p).owner, "w2");
    EXPECT_EQ(events, (std::vector<std::string>{"acquired s", "lost s"}));
    EXPECT_EQ(w1.held(), 0u);
}

TEST(Keeper, ALeaseStillHeldPastItsDeadlineIsRenewedAndServed) {
    keeper_world w;
    std::vector<std::string> events;
    auto w1 = w.make("w1", &events);
    const auto first = w1.place(sid("s"));
    ASSERT_TRUE(here(first));
    w.advance(2'500ms);  // past the deadline (2.4 s), not past the lease (3 s)
    auto again = w1.locate(sid("s"));
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
    ASSERT_TRUE(here(w1.place(sid("s"))));
    w.failing = true;
    w.advance(1'000ms);
    EXPECT_FALSE(w1.renew()) << "the store is away";
    EXPECT_EQ(w1.held(), 1u) << "still within its deadline";
    ASSERT_TRUE(here(w1.place(sid("s"))));
    w.advance(1'500ms);
    EXPECT_FALSE(w1.place(sid("s"))) << "past its deadline it is not served while unsure";
    EXPECT_FALSE(w1.renew());
    EXPECT_EQ(w1.held(), 0u);
    EXPECT_EQ(events, (std::vector<std::string>{"acquired s", "lost s"}));
}

TEST(Keeper, LocateTakesNothingAndEventsNameTakeOversAndReleases) {
    keeper_world w;
    std::vector<std::string> events;
    auto w1 = w.make("w1");
    auto w2 = w.make("w2", &events);
    auto nobody = w2.locate(sid("s"));
    ASSERT_TRUE(nobody);
    EXPECT_FALSE(nobody->has_value());
    EXPECT_FALSE(w.leases.owner_of(sid("s")).value().has_value()) << "nothing taken";
    ASSERT_TRUE(here(w1.place(sid("s"))));
    auto there = w2.locate(sid("s"));
    ASSERT_TRUE(there && *there);
    EXPECT_EQ(std::get<ownership::keeper::elsewhere>(**there).owner, "w1");
    w.advance(3'500ms);  // w1's lease runs out
    ASSERT_TRUE(here(w2.place(sid("s"))));
    w2.release(sid("s"));
    EXPECT_EQ(events, (std::vector<std::string>{"taken_over s from w1", "released s"}));
}

TEST(Keeper, RejectsWorkerIdsThatAreNotSubjectTokens) {
    ownership::memory_lease leases;
    for (const char* bad : {"", "a.b", "w*", "w>", "w 1", "a/b"}) {
        EXPECT_THROW(ownership::keeper(leases, bad, 1s), std::invalid_argument) << bad;
    }
    EXPECT_NO_THROW(ownership::keeper(leases, "worker-1_A", 1s));
}

TEST(OwnershipErrc, EveryEnumeratorHasAStableCodeAndAMessage) {
    std::set<std::string> codes;
    for (int i = 0; i < ownership::errc_count; ++i) {
        auto e = static_cast<ownership::errc>(i);
        std::string code(ownership::code_name(e));
        EXPECT_NE(code, "unknown");
        EXPECT_TRUE(codes.insert(code).second) << code;
        EXPECT_NE(make_error_code(e).message(), "unknown ownership error") << code;
    }
    EXPECT_EQ(ownership::code_name(ownership::errc::worker_stopping), "worker_stopping");
}

}  // namespace wuhu::testing
