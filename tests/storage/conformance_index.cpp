// The store conformance suite (conformance.hpp), its index: what sessions() lists, in which
// order, for the recovery sweep and the fleet view. Compiled into every backend's test binary
// with conformance_suite.cpp.
#include "tests/storage/conformance.hpp"

#include "session/summary.hpp"

#include <algorithm>

namespace wuhu::testing {

namespace {

// The keys of index entries, in their order.
std::vector<std::string> ids_of(const std::vector<storage::catalog_entry>& es) {
    std::vector<std::string> out;
    for (const auto& e : es) {
        out.push_back(e.id.str());
    }
    return out;
}

}  // namespace

TEST_P(StoreConformance, SessionsListsStoredSessionsInIdOrderWithHasWork) {
    auto b = open("list-b", 1);
    auto a = open("list-a", 1);
    session_state sb = b->load().value();
    ASSERT_TRUE(b->enqueue(sb, user_in(lane::follow_up, "f", "work"), unix_ms{1}));
    auto all = store().sessions({}).value();
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].id.str(), "list-a");
    EXPECT_FALSE(all[0].summary.has_work);
    EXPECT_EQ(all[1].id.str(), "list-b");
    EXPECT_TRUE(all[1].summary.has_work);
    EXPECT_EQ(all[1].summary.lanes, (std::array<std::uint32_t, 3>{0, 0, 1}));
    EXPECT_EQ(all[1].summary.last_activity, unix_ms{1});
    storage::catalog_query needing;
    needing.needing_owner_by = unix_ms{1000};
    auto busy = store().sessions(needing).value();
    ASSERT_EQ(busy.size(), 1u);
    EXPECT_EQ(busy[0].id.str(), "list-b");
    ASSERT_TRUE(store().remove(session_id::parse("list-b").value(), lease_epoch{1}));
    ASSERT_EQ(store().sessions({}).value().size(), 1u);
}

// A paused session with queued work makes no progress until resume (which loads it): the
// sweep's query leaves it out, so that paused backlogs do not pin memory in every worker. Its
// timers still need an owner.
TEST_P(StoreConformance, APausedSessionWithWorkNeedsNoOwnerButItsTimersDo) {
    auto log = open("paused-work", 1);
    session_state st = log->load().value();
    auto queued = log->enqueue(st, user_in(lane::follow_up, "f", "work"), unix_ms{1});
    ASSERT_TRUE(queued);
    session::apply_actions(queued->actions, st);
    auto paused = log->set_paused(st, true);
    ASSERT_TRUE(paused);
    session::apply_actions(*paused, st);
    storage::catalog_query needing;
    needing.needing_owner_by = unix_ms{1000};
    EXPECT_TRUE(store().sessions(needing).value().empty());
    storage::catalog_query working;
    working.has_work = true;
    EXPECT_EQ(ids_of(store().sessions(working).value()),
              (std::vector<std::string>{"paused-work"}))
        << "it still has work (the fleet view shows it)";
    const timer tick{item("t1"), unix_ms{500}, system_source::parse("scheduledCallback").value(),
                     "tick"};
    auto scheduled = log->schedule_timer(st, tick, unix_ms{1});
    ASSERT_TRUE(scheduled) << scheduled.error().message();
    session::apply_actions(*scheduled, st);
    EXPECT_EQ(ids_of(store().sessions(needing).value()),
              (std::vector<std::string>{"paused-work"}));
    auto resumed = log->set_paused(st, false);
    ASSERT_TRUE(resumed);
    needing.needing_owner_by = unix_ms{100};  // the timer is not due by then: the work is
    EXPECT_EQ(ids_of(store().sessions(needing).value()),
              (std::vector<std::string>{"paused-work"}));
}

// The fleet view pages through the index: after an id, at most a limit, by has_work, or just
// some ids; always in byte order of the ids (uppercase before lowercase, '-' before digits).
TEST_P(StoreConformance, SessionsPagesThroughTheIndexInByteOrder) {
    std::vector<std::string> names{"b", "B", "a-1", "a0", "a_", "z", "A"};
    for (const auto& n : names) {
        auto log = open(n, 1);
        if (n == "a0" || n == "z") {
            session_state st = log->load().value();
            ASSERT_TRUE(log->enqueue(st, user_in(lane::steer, "i", "x"), unix_ms{5}));
        }
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(ids_of(store().sessions({}).value()), names);
    storage::catalog_query page;
    page.limit = 3;
    EXPECT_EQ(ids_of(store().sessions(page).value()),
              (std::vector<std::string>{names[0], names[1], names[2]}));
    page.after = session_id::parse(names[2]).value();
    EXPECT_EQ(ids_of(store().sessions(page).value()),
              (std::vector<std::string>{names[3], names[4], names[5]}));
    storage::catalog_query working;
    working.has_work = true;
    EXPECT_EQ(ids_of(store().sessions(working).value()), (std::vector<std::string>{"a0", "z"}));
    working.has_work = false;
    working.after = session_id::parse("a0").value();
    EXPECT_EQ(ids_of(store().sessions(working).value()), (std::vector<std::string>{"a_", "b"}));
    storage::catalog_query some;
    some.ids = std::vector<session_id>{session_id::parse("z").value(),
                                       session_id::parse("nope").value(),
                                       session_id::parse("A").value()};
    auto got = store().sessions(some).value();
    EXPECT_EQ(ids_of(got), (std::vector<std::string>{"A", "z"}));
    // "null" is a session id like any other (PostgreSQL arrays read an unquoted one as NULL).
    open("null", 1);
    some.ids = std::vector<session_id>{session_id::parse("null").value()};
    EXPECT_EQ(ids_of(store().sessions(some).value()), (std::vector<std::string>{"null"}));
    EXPECT_EQ(got[1].summary.lanes, (std::array<std::uint32_t, 3>{0, 1, 0}));
}

// Issue 29: a tenant's sessions are keys `<tenant>.<id>`: equal ids of two tenants are two
// sessions, each with its own state, and the index lists one tenant's (a range of keys, paged
// like the rest) or those of no tenant, never another's.
TEST_P(StoreConformance, EqualIdsOfTwoTenantsAreTwoSessionsAndTheIndexListsOneTenant) {
    for (const char* key : {"acme.s1", "globex.s1", "s1", "acme.s2", "acme-x.s1", "acmf.s0",
                            "acme_.s1", "acm.s9"}) {
        auto log = open(key, 1);
        session_state st = log->load().value();
        ASSERT_TRUE(log->enqueue(st, user_in(lane::steer, "i", key), unix_ms{5}));
    }
    auto acme = open("acme.s1", 1)->load().value();
    auto globex = open("globex.s1", 1)->load().value();
    ASSERT_EQ(acme.in(lane::steer).pending.size(), 1u);
    EXPECT_NE(acme, globex) << "each tenant's session has its own content";
    using strings = std::vector<std::string>;
    storage::catalog_query q;
    q.tenant = "acme";
    EXPECT_EQ(ids_of(store().sessions(q).value()), (strings{"acme.s1", "acme.s2"}));
    q.limit = 1;
    EXPECT_EQ(ids_of(store().sessions(q).value()), (strings{"acme.s1"}));
    q.after = session_id::parse_key("acme.s1").value();
    EXPECT_EQ(ids_of(store().sessions(q).value()), (strings{"acme.s2"}));
    q.after = session_id::parse_key("acme.s2").value();
    EXPECT_TRUE(store().sessions(q).value().empty());
    q.after = session_id::parse_key("acm.s9").value();  // before the tenant's range
    EXPECT_EQ(ids_of(store().sessions(q).value()), (strings{"acme.s1"}));
    storage::catalog_query mine;
    mine.tenant = "acme";
    mine.has_work = true;
    mine.ids = std::vector<session_id>{session_id::parse_key("globex.s1").value(),
                                       session_id::parse_key("acme.s2").value()};
    EXPECT_EQ(ids_of(store().sessions(mine).value()), (strings{"acme.s2"}));
    storage::catalog_query untenanted;
    untenanted.tenant = "";
    EXPECT_EQ(ids_of(store().sessions(untenanted).value()), (strings{"s1"}));
    ASSERT_TRUE(store().remove(session_id::parse_key("acme.s1").value(), lease_epoch{1}));
    EXPECT_FALSE(open("globex.s1", 2)->load().value().in(lane::steer).pending.empty())
        << "removing one tenant's session leaves the other's";
}

// A session with nothing queued but a pending timer needs an owner once the timer is due:
// nobody would load it otherwise, and its timer would never fire. Before that it need not be
// loaded (a worker may passivate it); once the timer fires it no longer needs one.
TEST_P(StoreConformance, ASessionWithAPendingTimerNeedsAnOwnerWhenItIsDue) {
    auto log = open("timed", 1);
    session_state st = log->load().value();
    const timer later{item("t2"), unix_ms{900}, system_source::parse("scheduledCallback").value(),
                      "pong"};
    const timer t{item("t1"), unix_ms{500}, system_source::parse("scheduledCallback").value(),
                  "ping"};
    for (const auto& x : {later, t}) {
        auto scheduled = log->schedule_timer(st, x, unix_ms{1});
        ASSERT_TRUE(scheduled);
        apply_actions(*scheduled, st);
    }
    storage::catalog_query due;
    due.needing_owner_by = unix_ms{499};
    EXPECT_TRUE(store().sessions(due).value().empty()) << "not due yet";
    due.needing_owner_by = unix_ms{500};
    auto needing = store().sessions(due).value();
    ASSERT_EQ(needing.size(), 1u);
    EXPECT_EQ(needing[0].id.str(), "timed");
    EXPECT_EQ(needing[0].summary.timers, 2u);
    EXPECT_EQ(needing[0].summary.next_timer, unix_ms{500});
    auto fired = log->fire_timer(st, item("t1"), unix_ms{600});
    ASSERT_TRUE(fired);
    apply_actions(*fired, st);
    auto drained = log->drain(st, checkpoint::follow_up, unix_ms{601});
    ASSERT_TRUE(drained);
    apply_actions(*drained, st);
    auto idle = log->mark_idle(st);
    ASSERT_TRUE(idle);
    apply_actions(*idle, st);
    due.needing_owner_by = unix_ms{899};
    EXPECT_TRUE(store().sessions(due).value().empty()) << "the first timer fired, the work is done";
    auto all = store().sessions({}).value();
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].summary, summarize(st));
    EXPECT_EQ(all[0].summary.next_timer, unix_ms{900});
}

}  // namespace wuhu::testing

namespace wuhu::testing {

namespace {

// A session whose one answer cost `cost` and called `calls` (ids c1.., echo), the first
// `asking` of them asked for approval (with a deadline at 5000).
void answered(storage::session_store& store, const std::string& id, std::uint64_t cost, int calls,
              int asking) {
    auto log = store.open(session_id::parse(id).value(), lease_epoch{1}).value();
    session_state st = log->load().value();
    std::vector<std::pair<std::string, std::string>> named;
    for (int i = 1; i <= calls; ++i) {
        named.emplace_back("c" + std::to_string(i), "echo");
    }
    auto m = reply("", named);
    m.cost = cost;
    m.usage = {100, 0, 10, 0, 0};
    std::vector<approval_requested> asked;
    for (int i = 0; i < asking; ++i) {
        asked.push_back(request_of(m.tool_calls[static_cast<std::size_t>(i)],
                                   tool_approval{approval_mode::always, 4000, decision::reject},
                                   unix_ms{1000}));
    }
    auto actions = plan_response(st, m, {}, false, unix_ms{1000}, asked).value();
    ASSERT_TRUE(log->commit(st, actions));
}

}  // namespace

// The fleet view's approvals and cost (issue 33): each session's waiting calls, cost and tokens
// are in the index; it lists the sessions that wait, and pages in order of cost.
TEST_P(StoreConformance, TheIndexListsSessionsAwaitingApprovalAndPagesByCost) {
    answered(store(), "cost-a", 300, 1, 1);
    answered(store(), "cost-b", 900, 0, 0);
    answered(store(), "cost-c", 300, 2, 2);
    answered(store(), "cost-d", 50, 1, 0);
    auto all = store().sessions({}).value();
    ASSERT_EQ(all.size(), 4u);
    EXPECT_EQ(all[0].summary.approvals, 1u);
    EXPECT_EQ(all[0].summary.cost, 300u);
    EXPECT_EQ(all[0].summary.tokens, 110u);
    EXPECT_EQ(all[0].summary.next_timer, unix_ms{5000}) << "the deadline is due then";
    EXPECT_EQ(all[2].summary.approvals, 2u);

    storage::catalog_query waiting;
    waiting.awaiting_approval = true;
    EXPECT_EQ(ids_of(store().sessions(waiting).value()),
              (std::vector<std::string>{"cost-a", "cost-c"}));
    waiting.awaiting_approval = false;
    EXPECT_EQ(ids_of(store().sessions(waiting).value()),
              (std::vector<std::string>{"cost-b", "cost-d"}));

    storage::catalog_query by_cost;
    by_cost.by_cost = true;
    EXPECT_EQ(ids_of(store().sessions(by_cost).value()),
              (std::vector<std::string>{"cost-b", "cost-a", "cost-c", "cost-d"}));
    // Pages of two, from the last row's (cost, id).
    by_cost.limit = 2;
    auto first = store().sessions(by_cost).value();
    EXPECT_EQ(ids_of(first), (std::vector<std::string>{"cost-b", "cost-a"}));
    by_cost.after_cost = first.back().summary.cost;
    by_cost.after = first.back().id;
    EXPECT_EQ(ids_of(store().sessions(by_cost).value()),
              (std::vector<std::string>{"cost-c", "cost-d"}));
    // Listed ids, by cost, cut to the limit: the costliest of them.
    storage::catalog_query listed;
    listed.ids = std::vector<session_id>{session_id::parse("cost-d").value(),
                                         session_id::parse("cost-a").value(),
                                         session_id::parse("cost-b").value()};
    listed.by_cost = true;
    listed.limit = 2;
    EXPECT_EQ(ids_of(store().sessions(listed).value()),
              (std::vector<std::string>{"cost-b", "cost-a"}));
    // With a filter: the waiting ones by cost.
    storage::catalog_query costly_waiting;
    costly_waiting.by_cost = true;
    costly_waiting.awaiting_approval = true;
    costly_waiting.after_cost = 300;
    costly_waiting.after = session_id::parse("cost-a").value();
    EXPECT_EQ(ids_of(store().sessions(costly_waiting).value()),
              (std::vector<std::string>{"cost-c"}));
}

}  // namespace wuhu::testing
