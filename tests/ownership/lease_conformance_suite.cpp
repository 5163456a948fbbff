// The lease conformance suite (tests/ownership/lease_conformance.hpp).
#include "ownership/generations.hpp"
#include "tests/ownership/lease_conformance.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace wuhu::testing {

namespace {
// The keys of leases, in their order.
std::vector<std::string> ids_of(const std::vector<lease>& ls) {
    std::vector<std::string> out;
    for (const auto& l : ls) {
        out.push_back(l.id.str());
    }
    return out;
}
}  // namespace

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
    EXPECT_EQ(std::get<held_elsewhere>(*other).epoch, l.epoch)
        << "the epoch of that lease (a forward is watched against it)";
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

// Issue 13: renew after expiry fails, even when nobody took the lease in between; a renewal
// just before the expiry still extends it.
TEST_P(LeaseConformance, RenewAfterExpiryFailsEvenWhenNobodyTookTheLease) {
    auto kept = granted(store().acquire(sid("kept"), "w1", 10s));
    auto late = granted(store().acquire(sid("late"), "w1", 5s));
    b_->now += 5'000;  // `late` expired exactly now; `kept` has 5 s left
    EXPECT_EQ(store().renew({kept, late}, 10s).value(), std::vector<session_id>{sid("late")});
    EXPECT_FALSE(store().owner_of(sid("late")).value().has_value()) << "not extended";
    EXPECT_EQ(store().owner_of(sid("kept")).value()->expires.value, b_->now + 10'000);
    auto again = granted(store().acquire(sid("late"), "w1", 10s));
    EXPECT_GT(again.epoch, late.epoch) << "taken again at a new epoch, as by anyone";
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

// Issue 36: renewal per worker (ownership/generations.hpp). Renewals of exactly what a worker
// holds keep every lease live round after round, with the effective expiry each reports; once
// they stop, every lease expires a ttl after the last one, and another worker may take them.
TEST_P(LeaseConformance, RenewingEveryHeldLeaseKeepsThemLiveRoundAfterRound) {
    std::vector<lease> held;
    for (const char* s : {"a", "b", "c"}) {
        held.push_back(granted(store().acquire(sid(s), "w1", 9s)));
    }
    for (int round = 0; round < 10; ++round) {
        b_->now += 3'000;
        ASSERT_TRUE(store().renew(held, 9s).value().empty()) << "round " << round;
        for (const auto& l : held) {
            auto now = store().owner_of(l.id).value();
            ASSERT_TRUE(now.has_value()) << l.id.str() << " in round " << round;
            EXPECT_EQ(now->epoch, l.epoch);
            EXPECT_EQ(now->expires, unix_ms{b_->now + 9'000}) << "its effective expiry";
        }
        EXPECT_EQ(store().live({}).value().size(), 3u);
        EXPECT_EQ(store().owners().value(), std::vector<std::string>{"w1"});
    }
    b_->now += 9'000;  // no renewal for a ttl
    EXPECT_TRUE(store().live({}).value().empty());
    EXPECT_TRUE(store().owners().value().empty());
    EXPECT_EQ(granted(store().acquire(sid("b"), "w2", 9s)).taken_from, "w1");
    EXPECT_EQ(store().claim({sid("a"), sid("c")}, "w2", 9s, 10).value().size(), 2u);
    EXPECT_EQ(store().renew(held, 9s).value().size(), 3u) << "all lost";
}

// renew_generation() renews the owner's leases without naming them, only when it is told
// exactly what this store stamped with the owner's generation (their count and digest).
TEST_P(LeaseConformance, RenewingTheGenerationKeepsExactlyItsLeasesLiveWithoutNamingThem) {
    using ownership::generations;
    auto a = granted(store().acquire(sid("a"), "w1", 9s));
    auto b = granted(store().acquire(sid("b"), "w1", 9s));
    const auto both = generations::key(a) ^ generations::key(b);
    EXPECT_FALSE(store().renew_generation("w1", 2, both, 9s).value())
        << "a generation is live only once renewed lease by lease";
    ASSERT_TRUE(store().renew({a, b}, 9s).value().empty());
    b_->now += 6'000;
    EXPECT_FALSE(store().renew_generation("w1", 1, both, 9s).value()) << "a count that differs";
    EXPECT_FALSE(store().renew_generation("w1", 2, generations::key(a), 9s).value())
        << "a digest that differs";
    EXPECT_FALSE(store().renew_generation("w2", 2, both, 9s).value()) << "another owner";
    ASSERT_TRUE(store().renew_generation("w1", 2, both, 9s).value());
    b_->now += 6'000;  // past the leases' own expiry, within the generation's
    for (const auto& l : {a, b}) {
        auto now = store().owner_of(l.id).value();
        ASSERT_TRUE(now.has_value()) << l.id.str();
        EXPECT_EQ(now->epoch, l.epoch);
        EXPECT_EQ(now->expires, unix_ms{b_->now + 3'000}) << "the generation's expiry";
    }
    ASSERT_TRUE(store().release(b).has_value());
    auto c = granted(store().acquire(sid("c"), "w1", 9s));
    ASSERT_TRUE(
        store().renew_generation("w1", 2, generations::key(a) ^ generations::key(c), 9s).value())
        << "a release and an acquisition of this store keep its digest";
    b_->now += 9'000;  // no renewal for a ttl
    EXPECT_TRUE(store().live({}).value().empty());
    EXPECT_FALSE(
        store().renew_generation("w1", 2, generations::key(a) ^ generations::key(c), 9s).value())
        << "an expired generation is not renewed";
}

// A lease its owner stops renewing (the keeper dropped it past its deadline) expires within a
// ttl, though the owner goes on renewing the others: it is not kept live by the others' rounds.
TEST_P(LeaseConformance, ALeaseItsOwnerNoLongerRenewsExpiresWhileItRenewsTheOthers) {
    auto a = granted(store().acquire(sid("a"), "w1", 9s));
    auto b = granted(store().acquire(sid("b"), "w1", 9s));
    auto c = granted(store().acquire(sid("c"), "w1", 9s));
    for (int round = 0; round < 3; ++round) {
        b_->now += 3'000;
        ASSERT_TRUE(store().renew({a, b, c}, 9s).value().empty());
    }
    for (int round = 0; round < 4; ++round) {  // 12 s: c is no longer renewed
        b_->now += 3'000;
        ASSERT_TRUE(store().renew({a, b}, 9s).value().empty()) << "round " << round;
    }
    EXPECT_FALSE(store().owner_of(sid("c")).value().has_value());
    EXPECT_EQ(granted(store().acquire(sid("c"), "w2", 9s)).taken_from, "w1");
    EXPECT_EQ(store().owner_of(sid("a")).value()->epoch, a.epoch);
    EXPECT_EQ(store().owner_of(sid("b")).value()->epoch, b.epoch);
    EXPECT_EQ(store().renew({a, b, c}, 9s).value(), std::vector<session_id>{sid("c")});
}

// One lease renewed alone (the keeper checks one past its deadline) renews that one and leaves
// the others live as they were; the next renewal of all of them finds every one still held.
TEST_P(LeaseConformance, OneLeaseRenewedAloneLeavesTheOthersLiveUntilTheNextRound) {
    auto a = granted(store().acquire(sid("a"), "w1", 9s));
    auto b = granted(store().acquire(sid("b"), "w1", 9s));
    b_->now += 3'000;
    ASSERT_TRUE(store().renew({a, b}, 9s).value().empty());
    b_->now += 3'000;
    ASSERT_TRUE(store().renew({a, b}, 9s).value().empty());
    b_->now += 3'000;
    ASSERT_TRUE(store().renew({a}, 9s).value().empty());
    EXPECT_EQ(store().owner_of(sid("b")).value()->expires, unix_ms{b_->now + 6'000})
        << "b keeps the expiry of the last round";
    EXPECT_EQ(store().owner_of(sid("a")).value()->expires, unix_ms{b_->now + 9'000});
    b_->now += 3'000;
    ASSERT_TRUE(store().renew({a, b}, 9s).value().empty());
    b_->now += 8'000;
    EXPECT_EQ(store().owner_of(sid("a")).value()->epoch, a.epoch);
    EXPECT_EQ(store().owner_of(sid("b")).value()->epoch, b.epoch);
}

// Acquisitions and releases between rounds: what is acquired is renewed with the others, what
// is released is free at once, and neither changes how the others are kept.
TEST_P(LeaseConformance, LeasesTakenAndGivenUpBetweenRenewalsAreKeptOrFreedAsTheyShouldBe) {
    std::vector<lease> held{granted(store().acquire(sid("a"), "w1", 9s)),
                            granted(store().acquire(sid("b"), "w1", 9s))};
    b_->now += 3'000;
    ASSERT_TRUE(store().renew(held, 9s).value().empty());
    held.push_back(granted(store().acquire(sid("c"), "w1", 9s)));
    ASSERT_TRUE(store().release(held.front()));
    held.erase(held.begin());
    EXPECT_FALSE(store().owner_of(sid("a")).value().has_value()) << "released: free at once";
    for (int round = 0; round < 5; ++round) {
        b_->now += 3'000;
        ASSERT_TRUE(store().renew(held, 9s).value().empty()) << "round " << round;
    }
    EXPECT_EQ(store().owner_of(sid("c")).value()->epoch, held.back().epoch);
    EXPECT_EQ(store().owner_of(sid("b")).value()->expires, unix_ms{b_->now + 9'000});
    EXPECT_EQ(granted(store().acquire(sid("a"), "w2", 9s)).owner, "w2");
}

// Another run of the same worker id (a restarted process, while the first still renews) takes
// a lease afresh: the first run learns at its next renewal that it lost that one, and keeps the
// others.
TEST_P(LeaseConformance, AnotherRunOfTheSameWorkerIdTakingALeaseAfreshIsReportedLostToTheFirst) {
    auto second = b_->another();
    ownership::lease_store& rerun = second ? *second : store();
    auto a = granted(store().acquire(sid("a"), "w1", 9s));
    auto b = granted(store().acquire(sid("b"), "w1", 9s));
    for (int round = 0; round < 2; ++round) {
        b_->now += 3'000;
        ASSERT_TRUE(store().renew({a, b}, 9s).value().empty());
    }
    auto again = granted(rerun.acquire(sid("a"), "w1", 9s));
    EXPECT_GT(again.epoch, a.epoch);
    b_->now += 3'000;
    EXPECT_EQ(store().renew({a, b}, 9s).value(), std::vector<session_id>{sid("a")});
    b_->now += 3'000;
    EXPECT_TRUE(store().renew({b}, 9s).value().empty());
    EXPECT_TRUE(rerun.renew({again}, 9s).value().empty());
    EXPECT_EQ(store().owner_of(sid("a")).value()->epoch, again.epoch);
    EXPECT_EQ(store().owner_of(sid("b")).value()->epoch, b.epoch);
}

// Defect: PostgreSQL read an unquoted NULL in an array literal as a NULL element, and "null"
// is a valid session id: such a session's lease was never renewed (its owner lost it at every
// renewal), never claimed, and never listed. Every bulk operation treats it like any other.
TEST_P(LeaseConformance, ASessionNamedNullIsRenewedClaimedAndListedLikeAnyOther) {
    auto lower = granted(store().acquire(sid("null"), "w1", 10s));
    auto upper = granted(store().acquire(sid("NULL"), "w1", 10s));
    b_->now += 9'000;
    EXPECT_TRUE(store().renew({lower, upper}, 10s).value().empty()) << "neither is lost";
    ownership::lease_query both;
    both.ids = std::vector<session_id>{sid("null"), sid("NULL")};
    EXPECT_EQ(store().live(both).value().size(), 2u);
    b_->now += 20'000;  // both expired
    auto claimed = store().claim({sid("null"), sid("NULL"), sid("Null")}, "w2", 10s, 10).value();
    EXPECT_EQ(claimed.size(), 3u);
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
    auto live = store().live({}).value();
    ASSERT_EQ(live.size(), 1u);
    EXPECT_EQ(live[0], b);
    EXPECT_EQ(store().owners().value(), std::vector<std::string>{"w2"});
}

// The fleet view pages through the live leases: some ids, one owner's, after an id, at most a
// limit; in byte order of the ids.
TEST_P(LeaseConformance, LivePagesByIdsOwnerAndAfterInByteOrder) {
    for (const char* id : {"b", "B", "a-1", "a0", "z"}) {
        granted(store().acquire(sid(id), std::string(id) == "B" || std::string(id) == "z"
                                             ? "w2"
                                             : "w1",
                                10s));
    }
    using strings = std::vector<std::string>;
    EXPECT_EQ(ids_of(store().live({}).value()), (strings{"B", "a-1", "a0", "b", "z"}));
    ownership::lease_query q;
    q.owner = "w1";
    EXPECT_EQ(ids_of(store().live(q).value()), (strings{"a-1", "a0", "b"}));
    q.after = sid("a-1");
    q.limit = 1;
    EXPECT_EQ(ids_of(store().live(q).value()), (strings{"a0"}));
    ownership::lease_query some;
    some.ids = std::vector<session_id>{sid("z"), sid("gone"), sid("a0")};
    EXPECT_EQ(ids_of(store().live(some).value()), (strings{"a0", "z"}));
    EXPECT_EQ(store().owners().value(), (strings{"w1", "w2"}));
}

// Issue 29: a tenant's leases are keys `<tenant>.<id>`: equal ids of two tenants are two
// leases, and live() lists one tenant's (or those of no tenant), by owner and after a key too.
TEST_P(LeaseConformance, EqualIdsOfTwoTenantsAreTwoLeasesAndLiveListsOneTenant) {
    granted(store().acquire(sid("acme.s1"), "w1", 10s));
    granted(store().acquire(sid("globex.s1"), "w2", 10s));
    granted(store().acquire(sid("s1"), "w1", 10s));
    granted(store().acquire(sid("acme.s2"), "w2", 10s));
    granted(store().acquire(sid("acme-x.s1"), "w1", 10s));
    using strings = std::vector<std::string>;
    ownership::lease_query q;
    q.tenant = "acme";
    EXPECT_EQ(ids_of(store().live(q).value()), (strings{"acme.s1", "acme.s2"}));
    q.owner = "w2";
    EXPECT_EQ(ids_of(store().live(q).value()), (strings{"acme.s2"}));
    q.owner.reset();
    q.after = sid("acme.s1");
    EXPECT_EQ(ids_of(store().live(q).value()), (strings{"acme.s2"}));
    ownership::lease_query none;
    none.tenant = "";
    EXPECT_EQ(ids_of(store().live(none).value()), (strings{"s1"}));
    EXPECT_EQ(store().owner_of(sid("globex.s1")).value()->owner, "w2");
    EXPECT_EQ(store().owner_of(sid("acme.s1")).value()->owner, "w1");
}

// N concurrent contenders for one session: exactly one wins, and each round's winner (after
// the last one's lease expired) holds a higher epoch than the round before; no epoch is
// handed out twice.
TEST_P(LeaseConformance, RacingWorkersNeverBothWin) {
    // Two handles (two processes for SQLite), eight threads each racing for the same sessions.
    auto second = b_->another();
    ownership::lease_store& a = store();
    ownership::lease_store& b = second ? *second : store();
    constexpr int sessions = 20;
    std::vector<lease_epoch> last(sessions, lease_epoch{0});
    std::set<std::uint64_t> handed_out;
    for (int round = 0; round < 3; ++round) {
        std::atomic<int> wins[sessions] = {};
        std::mutex mu;
        std::vector<lease> won;
        std::vector<std::thread> threads;
        for (int t = 0; t < 8; ++t) {
            threads.emplace_back([&, t] {
                auto& st = t % 2 == 0 ? a : b;
                for (int i = 0; i < sessions; ++i) {
                    auto got = st.acquire(sid(("r" + std::to_string(i)).c_str()),
                                          "w" + std::to_string(t), 60s);
                    ASSERT_TRUE(got.has_value()) << got.error().message();
                    if (auto* l = std::get_if<lease>(&*got)) {
                        ++wins[i];
                        std::lock_guard lock(mu);
                        won.push_back(*l);
                    }
                }
            });
        }
        for (auto& th : threads) {
            th.join();
        }
        for (int i = 0; i < sessions; ++i) {
            EXPECT_EQ(wins[i].load(), 1) << "round " << round << ", session r" << i;
        }
        for (const auto& l : won) {
            const auto i = std::stoi(l.id.str().substr(1));
            EXPECT_GT(l.epoch, last[i]) << "round " << round << ", session r" << i;
            last[i] = l.epoch;
            EXPECT_TRUE(handed_out.insert(l.epoch.value).second)
                << "epoch " << l.epoch.value << " handed out twice";
        }
        b_->now += 60'000;  // every lease of the round expires
    }
}

// A burst of placements takes its leases together: each answered as acquire() would have
// answered it alone, in order, each at an epoch of its own.
TEST_P(LeaseConformance, AcquireAllAnswersEachSessionAsAcquireWould) {
    auto other = granted(store().acquire(sid("held"), "w2", 10s));
    auto expiring = granted(store().acquire(sid("expired"), "w2", 1s));
    auto mine = granted(store().acquire(sid("mine"), "w1", 10s));
    b_->now += 1'000;
    auto got = store().acquire_all({sid("free"), sid("held"), sid("expired"), sid("mine")}, "w1",
                                   10s);
    ASSERT_EQ(got.size(), 4u);
    auto free = granted(got[0]);
    EXPECT_EQ(free.id, sid("free"));
    EXPECT_EQ(free.taken_from, "");
    EXPECT_EQ(free.expires, unix_ms{b_->now + 10'000});
    ASSERT_TRUE(got[1].has_value());
    ASSERT_TRUE(std::holds_alternative<held_elsewhere>(*got[1]));
    EXPECT_EQ(std::get<held_elsewhere>(*got[1]).owner, "w2");
    EXPECT_EQ(std::get<held_elsewhere>(*got[1]).expires, other.expires);
    EXPECT_EQ(std::get<held_elsewhere>(*got[1]).epoch, other.epoch);
    auto taken = granted(got[2]);
    EXPECT_EQ(taken.taken_from, "w2");
    EXPECT_GT(taken.epoch, expiring.epoch);
    auto again = granted(got[3]);  // own lease, taken afresh
    EXPECT_GT(again.epoch, mine.epoch);
    std::set<std::uint64_t> epochs{free.epoch.value, taken.epoch.value, again.epoch.value};
    EXPECT_EQ(epochs.size(), 3u);
    for (auto l : {free, taken, again}) {
        l.taken_from.clear();  // a fact of the acquisition, not of the lease
        EXPECT_EQ(store().owner_of(l.id).value(), l);
    }
    EXPECT_EQ(store().owner_of(sid("held")).value(), other);
    EXPECT_TRUE(store().acquire_all({}, "w1", 10s).empty());
}

// A session given twice in one burst, free or released before it: the second is an own
// lease taken afresh, as a second acquire() would take it.
TEST_P(LeaseConformance, AcquireAllOfASessionTwiceTakesItAsTwoAcquiresWould) {
    auto before = granted(store().acquire(sid("released"), "w1", 10s));
    ASSERT_TRUE(store().release(before).has_value());
    auto got = store().acquire_all({sid("twice"), sid("released"), sid("twice")}, "w1", 10s);
    ASSERT_EQ(got.size(), 3u);
    auto first = granted(got[0]);
    auto released = granted(got[1]);
    auto second = granted(got[2]);
    EXPECT_EQ(first.id, sid("twice"));
    EXPECT_EQ(second.id, sid("twice"));
    EXPECT_GT(second.epoch, first.epoch);
    EXPECT_GT(released.epoch, before.epoch);
    EXPECT_EQ(released.taken_from, "");
    second.taken_from.clear();
    EXPECT_EQ(store().owner_of(sid("twice")).value(), second);
    EXPECT_EQ(store().owner_of(sid("released")).value(), released);
}

// Bursts from two handles (two processes for SQLite) for the same sessions: each session is
// won once, whoever wins it.
TEST_P(LeaseConformance, RacingBurstsNeverBothWin) {
    auto second = b_->another();
    ownership::lease_store& a = store();
    ownership::lease_store& b = second ? *second : store();
    std::vector<session_id> ids;
    for (int i = 0; i < 30; ++i) {
        ids.push_back(sid(("b" + std::to_string(i)).c_str()));
    }
    std::vector<std::vector<ownership::result<acquisition>>> answers(4);
    std::vector<std::thread> threads;
    // Half of them in the opposite order: a backend that locked rows as they come would
    // deadlock (PostgreSQL then fails one side).
    std::vector<session_id> reversed(ids.rbegin(), ids.rend());
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            auto got = (t % 2 == 0 ? a : b)
                           .acquire_all(t < 2 ? ids : reversed, "w" + std::to_string(t), 60s);
            if (t >= 2) {
                std::reverse(got.begin(), got.end());
            }
            answers[static_cast<std::size_t>(t)] = std::move(got);
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
        int wins = 0;
        for (const auto& per_thread : answers) {
            ASSERT_EQ(per_thread.size(), ids.size());
            ASSERT_TRUE(per_thread[i].has_value()) << per_thread[i].error().message();
            wins += std::holds_alternative<lease>(*per_thread[i]) ? 1 : 0;
        }
        EXPECT_EQ(wins, 1) << ids[i].str();
    }
}

// A burst of placements and another worker's sweep claiming the same sessions at once, some
// with an expired lease row and some with none, alternating in id order: neither fails the
// other (a backend that took the new rows before locking the existing ones, while the claim
// does the opposite, could deadlock, and PostgreSQL then fails one side; so could one that
// inserted a burst's new rows in a statement of its own, which waits for the claim's update
// of an existing row while holding the rows it inserted before it), and each session is won
// once.
TEST_P(LeaseConformance, ABurstAndAClaimOfTheSameSessionsAtOnceNeverFailEachOther) {
    auto second = b_->another();
    ownership::lease_store& a = store();
    ownership::lease_store& b = second ? *second : store();
    for (int round = 0; round < 200; ++round) {
        std::vector<session_id> ids;
        for (int i = 0; i < 12; ++i) {
            const auto id = "r" + std::to_string(round) + "s" + std::to_string(10 + i) +
                            (i % 2 == 0 ? "e" : "n");
            ids.push_back(sid(id.c_str()));
            if (i % 2 == 0) {
                granted(a.acquire(ids.back(), "w2", 1s));  // to expire: a row, nobody live
            }
        }
        b_->now += 2'000;
        std::vector<ownership::result<acquisition>> burst;
        ownership::result<std::vector<lease>> claimed(storage::errc::unavailable);
        std::thread sweep([&] { claimed = b.claim(ids, "w3", 60s, 100); });
        // The burst starts at another moment of the claim in each round.
        std::this_thread::sleep_for(std::chrono::microseconds(round % 20 * 100));
        burst = a.acquire_all(ids, "w1", 60s);
        sweep.join();
        ASSERT_TRUE(claimed.has_value()) << "round " << round << ": " << claimed.error().message();
        ASSERT_EQ(burst.size(), ids.size());
        for (std::size_t i = 0; i < ids.size(); ++i) {
            ASSERT_TRUE(burst[i].has_value())
                << "round " << round << ": " << burst[i].error().message();
            const bool burst_won = std::holds_alternative<lease>(*burst[i]);
            const bool sweep_won = std::any_of(claimed->begin(), claimed->end(),
                                               [&](const lease& l) { return l.id == ids[i]; });
            EXPECT_NE(burst_won, sweep_won) << ids[i].str();
        }
    }
}

// The recovery sweep's claim: only free, expired or own leases, at most `limit`, new epochs.
TEST_P(LeaseConformance, ClaimTakesAtMostLimitOfTheSessionsNoLiveOwnerHolds) {
    auto other = granted(store().acquire(sid("held"), "w2", 10s));
    auto expiring = granted(store().acquire(sid("expired"), "w2", 1s));
    auto mine = granted(store().acquire(sid("mine"), "w1", 10s));  // an earlier run's
    b_->now += 1'000;
    const std::vector<session_id> all{sid("held"), sid("expired"), sid("mine"), sid("free1"),
                                      sid("free2"), sid("free3")};
    auto first = store().claim(all, "w1", 10s, 4).value();
    ASSERT_EQ(first.size(), 4u);
    std::set<std::string> got;
    for (const auto& l : first) {
        got.insert(l.id.str());
        EXPECT_EQ(l.owner, "w1");
        EXPECT_EQ(l.expires, unix_ms{b_->now + 10'000});
        EXPECT_GT(l.epoch, mine.epoch);
        EXPECT_EQ(store().owner_of(l.id).value(), (lease{l.id, "w1", l.epoch, l.expires, {}}));
        EXPECT_EQ(l.taken_from, l.id == sid("expired") ? "w2" : "");
    }
    EXPECT_FALSE(got.contains("held")) << "another owner's live lease is never claimed";
    auto rest = store().claim(all, "w3", 10s, 10).value();
    ASSERT_EQ(rest.size(), 6u - 4u - 1u) << "what w1 did not take, but the held one";
    EXPECT_FALSE(got.contains(rest[0].id.str()));
    EXPECT_EQ(store().owner_of(sid("held")).value(), other);
    EXPECT_TRUE(store().claim(all, "w3", 10s, 0).value().empty());
    EXPECT_EQ(store().renew({expiring}, 10s).value(), std::vector<session_id>{sid("expired")})
        << "the claimed lease fences out the expired one";
}

// Workers claiming the same candidates at once share them: each session goes to one.
TEST_P(LeaseConformance, ConcurrentClaimsNeverTakeASessionTwice) {
    auto second = b_->another();
    ownership::lease_store& a = store();
    ownership::lease_store& b = second ? *second : store();
    std::vector<session_id> candidates;
    for (int i = 0; i < 200; ++i) {
        candidates.push_back(sid(("c" + std::to_string(i)).c_str()));
    }
    std::mutex mu;
    std::map<std::string, int> claims;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            auto& st = t % 2 == 0 ? a : b;
            auto mine = candidates;  // less what this worker holds (as its keeper passes them)
            for (int round = 0; round < 10; ++round) {
                auto got = st.claim(mine, "w" + std::to_string(t), 60s, 16);
                ASSERT_TRUE(got.has_value()) << got.error().message();
                std::lock_guard lock(mu);
                for (const auto& l : *got) {
                    ++claims[l.id.str()];
                    std::erase(mine, l.id);
                }
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    EXPECT_EQ(claims.size(), 200u) << "4 workers x 10 rounds x 16 cover the 200 sessions";
    for (const auto& [id, n] : claims) {
        EXPECT_EQ(n, 1) << id;
    }
}

}  // namespace wuhu::testing
