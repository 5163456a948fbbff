// The tests of the store conformance suite (see conformance.hpp). Compiled into every backend's
// test binary; each binary instantiates the suite with its own factory.
#include "tests/storage/conformance.hpp"

#include "session/summary.hpp"

#include <algorithm>

namespace wuhu::testing {

namespace {
using storage::errc;
}  // namespace

TEST_P(StoreConformance, ANewSessionLoadsEmpty) {
    auto log = open("fresh", 1);
    EXPECT_EQ(log->load().value(), session_state{});
    EXPECT_EQ(log->id().str(), "fresh");
    EXPECT_EQ(log->epoch(), lease_epoch{1});
    // The first load of the handle that made it reads nothing (issue 36); what the store holds
    // says the same.
    EXPECT_EQ(log->load().value(), session_state{}) << "read from the store";
    EXPECT_EQ(store().read(session_id::parse("fresh").value()).value(), session_state{});
    EXPECT_EQ(open("fresh", 2)->load().value(), session_state{}) << "opened again, not made";
}

// Only the open that makes a session skips its first read: a session that exists, opened at a
// newer epoch (a new owner) or again after its first commit, loads what it stored.
TEST_P(StoreConformance, OnlyTheOpenThatMakesASessionSkipsItsFirstRead) {
    const auto at = unix_ms{1};
    {
        auto log = open("kept", 1);
        auto st = log->load().value();
        ASSERT_TRUE(log->enqueue(st, user_in(lane::follow_up, "f1", "hello"), at));
    }
    auto next_owner = open("kept", 2);
    EXPECT_EQ(next_owner->load().value().in(lane::follow_up).pending.size(), 1u);
    // Made, committed to before any load: the load reads the commit.
    auto made = open("made", 1);
    ASSERT_TRUE(made->enqueue(session_state{}, user_in(lane::steer, "s1", "one"), at));
    EXPECT_EQ(made->load().value().in(lane::steer).pending.size(), 1u);
    // Removed, then made again: a new session.
    ASSERT_TRUE(store().remove(session_id::parse("kept").value(), lease_epoch{2}));
    EXPECT_EQ(open("kept", 3)->load().value(), session_state{});
}

TEST_P(StoreConformance, EveryOperationSatisfiesTheInvariant) {
    checked_session s(open("ops", 1));
    auto at = [](std::int64_t t) { return unix_ms{t}; };
    ASSERT_TRUE(s.run([&](auto& log, auto& st) {
        return log.enqueue(st, user_in(lane::follow_up, "f1", "hello", human("u1", "Ann")), at(1));
    }));
    ASSERT_TRUE(s.run([&](auto& log, auto& st) {
        return log.enqueue(st, user_in(lane::steer, "s1", "steer me"), at(2));
    }));
    ASSERT_TRUE(s.run(
        [&](auto& log, auto& st) { return log.enqueue(st, system_in("y1", "callback"), at(3)); }));
    ASSERT_TRUE(s.run([&](auto& log, auto& st) {
        return log.enqueue(st, user_in(lane::steer, "s2", "cancel me"), at(4));
    }));
    auto canceled =
        s.run([&](auto& log, auto& st) { return log.cancel(st, lane::steer, item("s2"), at(5)); });
    ASSERT_TRUE(canceled);
    EXPECT_TRUE(canceled->canceled);
    auto drained =
        s.run([&](auto& log, auto& st) { return log.drain(st, checkpoint::follow_up, at(6)); });
    ASSERT_TRUE(drained);
    EXPECT_EQ(drained->size(), 4u);  // steer + system: two entries, two facts
    ASSERT_TRUE(s.run([&](auto& log, auto& st) {
        return log.append_assistant(st, reply("calling", {{"c1", "echo"}}), at(7));
    }));
    ASSERT_TRUE(s.run(
        [&](auto& log, auto& st) { return log.tool_will_execute(st, call_id("c1"), at(8)); }));
    ASSERT_TRUE(s.run([&](auto& log, auto& st) {
        return log.tool_did_execute(st, result_of("c1", "echoed"), at(9));
    }));
    ASSERT_TRUE(
        s.run([&](auto& log, auto& st) { return log.drain(st, checkpoint::follow_up, at(10)); }));
    ASSERT_TRUE(s.run([&](auto& log, auto& st) {
        return log.append_compaction(st, compaction{"summary", entry_seq{3}, 40}, at(11));
    }));
    ASSERT_TRUE(s.run([&](auto& log, auto& st) {
        return log.append_marker(st, interruption{"aborted"}, at(12));
    }));
    settings next;
    next.model = "other";
    ASSERT_TRUE(s.run([&](auto& log, auto& st) { return log.set_settings(st, next); }));
    ASSERT_TRUE(s.run([&](auto& log, auto& st) { return log.set_paused(st, true); }));
    auto idle = s.run([&](auto& log, auto& st) { return log.mark_idle(st); });
    ASSERT_TRUE(idle);
    EXPECT_EQ(idle->size(), 1u);
    EXPECT_FALSE(s.state().has_work);
    EXPECT_EQ(s.state().config.model, "other");
    EXPECT_TRUE(s.state().paused);
    EXPECT_EQ(s.state().transcript.size(), 8u);
}

TEST_P(StoreConformance, RefusedOperationsChangeNothing) {
    checked_session s(open("refused", 1));
    ASSERT_TRUE(s.run(
        [&](auto& log, auto& st) { return log.enqueue(st, system_in("y", "cb"), unix_ms{1}); }));
    auto r1 = s.run(
        [&](auto& log, auto& st) { return log.cancel(st, lane::system, item("y"), unix_ms{2}); });
    EXPECT_EQ(r1.error(), make_error_code(session::errc::not_cancelable));
    auto r2 = s.run([&](auto& log, auto& st) {
        return log.tool_will_execute(st, call_id("nope"), unix_ms{2});
    });
    EXPECT_EQ(r2.error(), make_error_code(session::errc::unknown_tool_call));
    settings bad;
    bad.context_limit = 1;
    auto r3 = s.run([&](auto& log, auto& st) { return log.set_settings(st, bad); });
    EXPECT_EQ(r3.error(), make_error_code(session::errc::invalid_settings));
}

TEST_P(StoreConformance, EnqueueIsIdempotentByItemId) {
    checked_session s(open("idem", 1));
    auto first = s.run([&](auto& log, auto& st) {
        return log.enqueue(st, user_in(lane::follow_up, "key", "once"), unix_ms{1});
    });
    auto version = s.state().version();
    auto again = s.run([&](auto& log, auto& st) {
        return log.enqueue(st, user_in(lane::follow_up, "key", "twice"), unix_ms{2});
    });
    ASSERT_TRUE(first && again);
    EXPECT_EQ(first->id, again->id);
    EXPECT_TRUE(again->duplicate);
    EXPECT_EQ(s.log().load()->version(), version);
    EXPECT_EQ(std::get<user_input>(s.log().load()->in(lane::follow_up).pending_item(0).payload).content,
              "once");
}

TEST_P(StoreConformance, AWriteWithAnOlderEpochIsRejectedAndChangesNothing) {
    auto old_owner = open("fenced", 1);
    session_state st = old_owner->load().value();
    auto out = old_owner->enqueue(st, user_in(lane::steer, "a", "x"), unix_ms{1}).value();
    st = applied(out.actions, st);

    auto new_owner = open("fenced", 2);  // takeover: fences epoch 1
    session_state fresh = new_owner->load().value();
    EXPECT_EQ(fresh, st);

    auto stale = old_owner->enqueue(st, user_in(lane::steer, "b", "y"), unix_ms{2});
    ASSERT_FALSE(stale.has_value());
    EXPECT_EQ(stale.error(), make_error_code(errc::lease_lost));
    auto stale_drain = old_owner->drain(st, checkpoint::steer, unix_ms{2});
    EXPECT_EQ(stale_drain.error(), make_error_code(errc::lease_lost));
    EXPECT_EQ(new_owner->load().value(), fresh);

    // The new owner writes normally.
    EXPECT_TRUE(new_owner->drain(fresh, checkpoint::steer, unix_ms{3}).has_value());
    // Opening with an epoch older than the stored one is refused too.
    auto older = store().open(session_id::parse("fenced").value(), lease_epoch{1});
    EXPECT_EQ(older.error(), make_error_code(errc::lease_lost));
}

TEST_P(StoreConformance, AStaleStateIsAConflictNotASilentOverwrite) {
    auto log = open("conflict", 1);
    session_state st = log->load().value();
    ASSERT_TRUE(log->enqueue(st, user_in(lane::steer, "a", "x"), unix_ms{1}));
    // `st` is now behind the store: a write computed from it must not land.
    auto r = log->enqueue(st, user_in(lane::steer, "b", "y"), unix_ms{2});
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error(), make_error_code(errc::conflict));
    EXPECT_EQ(log->load()->in(lane::steer).pending.size(), 1u);
}

TEST_P(StoreConformance, PatchSinceEqualsThePureStablePatchFromAnyVersion) {
    checked_session s(open("since", 1));
    std::mt19937_64 rng(7);
    std::vector<version_vector> versions{s.state().version()};
    for (int i = 0; i < 150; ++i) {
        auto op = next_op(rng, s.state(), unix_ms{i});
        auto r = s.run([&](auto& log, auto& st) { return run_store(op, log, st); });
        if (r && !r->empty()) {
            versions.push_back(s.state().version());
        }
    }
    // Also from inside a commit: a store that keeps a commit's values together must still
    // answer from any of them.
    const auto to = s.state().version();
    for (std::uint64_t t = 0; t <= to.transcript; ++t) {
        versions.push_back(version_vector{t, 0, 0, 0});
    }
    for (lane l : all_lanes) {
        for (std::uint64_t seq = 0; seq <= to.of(l); ++seq) {
            version_vector v;
            v.of(l) = seq;
            versions.push_back(v);
        }
    }
    for (const auto& v : versions) {
        auto from_store = s.log().since(v);
        ASSERT_TRUE(from_store.has_value());
        EXPECT_EQ(*from_store, since(s.state(), v).value());
    }
    EXPECT_EQ(s.log().since(version_vector{s.state().version().transcript + 1, 0, 0, 0}).error(),
              make_error_code(session::errc::invalid_version));
}

TEST_P(StoreConformance, RandomOperationSequencesKeepTheInvariant) {
    std::uint64_t operations = 0;
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
        checked_session s(open("random" + std::to_string(seed), seed));
        std::mt19937_64 rng(seed);
        for (int i = 0; i < 250; ++i) {
            auto op = next_op(rng, s.state(), unix_ms{i});
            auto pure = run_pure(op, s.state());
            auto r = s.run([&](auto& log, auto& st) { return run_store(op, log, st); });
            ASSERT_EQ(r.has_value(), pure.has_value()) << op.name;
            if (r) {
                ASSERT_EQ(*r, *pure) << "the store records what the rules decide: " << op.name;
            }
            // The index says what the state says.
            storage::catalog_query just{};
            just.ids = std::vector<session_id>{s.log().id()};
            auto indexed = store().sessions(just);
            ASSERT_TRUE(indexed.has_value()) << indexed.error().message();
            ASSERT_EQ(indexed->size(), 1u);
            ASSERT_EQ(indexed->front().summary, summarize(s.state())) << op.name;
            if (HasFatalFailure()) {
                return;
            }
        }
        // A second owner that loads from scratch sees the same session.
        auto reopened = open("random" + std::to_string(seed), seed + 1);
        EXPECT_EQ(reopened->load().value(), s.state());
        operations += s.operations();
    }
    EXPECT_EQ(operations, 8u * 250u);
}

TEST_P(StoreConformance, RemoveIsIdempotentAndLeavesOtherSessionsAlone) {
    auto a = open("gone", 1);
    auto b = open("kept", 1);
    session_state sa = a->load().value();
    ASSERT_TRUE(a->enqueue(sa, user_in(lane::steer, "x", "y"), unix_ms{1}));
    session_state sb = b->load().value();
    ASSERT_TRUE(b->enqueue(sb, user_in(lane::steer, "x", "y"), unix_ms{1}));
    EXPECT_TRUE(store().exists(session_id::parse("gone").value()).value());
    EXPECT_TRUE(store().remove(session_id::parse("gone").value(), lease_epoch{2}).has_value());
    EXPECT_FALSE(store().exists(session_id::parse("gone").value()).value());
    EXPECT_TRUE(store().remove(session_id::parse("gone").value(), lease_epoch{2}).has_value());
    EXPECT_TRUE(
        store().remove(session_id::parse("never-existed").value(), lease_epoch{1}).has_value());
    EXPECT_FALSE(store().exists(session_id::parse("never-existed").value()).value());
    EXPECT_EQ(open("gone", 3)->load().value(), session_state{});
    EXPECT_EQ(b->load()->in(lane::steer).pending.size(), 1u);
}

TEST_P(StoreConformance, ARemoveFencesEveryOldHandleAndANewOwnerStartsEmpty) {
    auto old_owner = open("fenced", 1);
    session_state before = old_owner->load().value();
    ASSERT_TRUE(old_owner->enqueue(before, user_in(lane::steer, "d1", "one"), unix_ms{1}));
    const auto sid = session_id::parse("fenced").value();
    // A remover older than the stored epoch is itself fenced out, and removes nothing.
    auto newer = open("fenced", 3);
    EXPECT_EQ(store().remove(sid, lease_epoch{2}).error(), storage::errc::lease_lost);
    session_state st = newer->load().value();
    EXPECT_EQ(st.in(lane::steer).pending.size(), 1u);
    // The owner at epoch 3 removes it: both handles are fenced out, for writes and loads.
    ASSERT_TRUE(store().remove(sid, lease_epoch{3}));
    EXPECT_EQ(newer->load().error(), storage::errc::lease_lost);
    EXPECT_EQ(old_owner->load().error(), storage::errc::lease_lost);
    EXPECT_EQ(newer->enqueue(st, user_in(lane::steer, "d2", "two"), unix_ms{2}).error(),
              storage::errc::lease_lost);
    // The next owner starts from nothing; the old handles still cannot write into it.
    auto next = open("fenced", 4);
    session_state fresh = next->load().value();
    EXPECT_EQ(fresh, session_state{});
    ASSERT_TRUE(next->enqueue(fresh, user_in(lane::steer, "d3", "three"), unix_ms{3}));
    EXPECT_EQ(
        newer->enqueue(session_state{}, user_in(lane::steer, "d4", "four"), unix_ms{4}).error(),
        storage::errc::lease_lost);
    auto seen = open("fenced", 5)->load().value();
    ASSERT_EQ(seen.in(lane::steer).pending.size(), 1u);
    EXPECT_EQ(seen.in(lane::steer).pending_item(0).id.str(), "d3");
}

// The invariant harness folds stored rows through the same reducer as the live path, so a
// reducer bug would pass it. Here the expected state is written out by hand, field by field,
// from the spec's rules: a loaded state must equal it.
TEST_P(StoreConformance, ALoadedStateEqualsTheOneTheRulesDescribeWrittenByHand) {
    auto log = open("by-hand", 1);
    session_state st = log->load().value();
    auto run = [&](auto r) {
        ASSERT_TRUE(r.has_value()) << r.error().message();
        const action_list* actions = nullptr;
        if constexpr (std::is_same_v<std::decay_t<decltype(*r)>, action_list>) {
            actions = &*r;
        } else {
            actions = &r->actions;
        }
        apply_actions(*actions, st);  // the owner's copy, to feed the next operation
    };
    const author ann = human("u1", "Ann", "ann@example.com");
    run(log->enqueue(st, user_in(lane::steer, "s1", "please", ann), unix_ms{10}));
    run(log->enqueue(st, user_in(lane::follow_up, "f1", "later", ann), unix_ms{11}));
    run(log->enqueue(st, system_in("c1", "build done"), unix_ms{12}));
    run(log->cancel(st, lane::follow_up, item("f1"), unix_ms{13}));
    run(log->drain(st, checkpoint::steer, unix_ms{20}));
    assistant_message answer;
    answer.text = "checking";
    answer.tool_calls = {tool_call{call_id("k1"), "echo", R"({"text":"hi"})"}};
    answer.usage = token_usage{10, 0, 2, 0, 1};
    answer.model = "m";
    answer.cost = 42;
    run(log->append_assistant(st, answer, unix_ms{30}));
    run(log->tool_will_execute(st, call_id("k1"), unix_ms{31}));
    run(log->tool_did_execute(st, tool_result{call_id("k1"), "echo", "hi", false}, unix_ms{32}));
    settings next;
    next.model = "m2";
    run(log->set_settings(st, next));
    const timer ping{item("t1"), unix_ms{1000}, system_source::parse("scheduledCallback").value(),
                     "ping"};
    run(log->schedule_timer(st, ping, unix_ms{40}));
    // A timer scheduled, then canceled before it fires: both facts stay in the system lane.
    const timer pong{item("t2"), unix_ms{2000}, system_source::parse("scheduledCallback").value(),
                     "pong"};
    run(log->schedule_timer(st, pong, unix_ms{41}));
    auto unscheduled = log->cancel(st, lane::system, item("t2"), unix_ms{42});
    ASSERT_TRUE(unscheduled && unscheduled->canceled);
    session::apply_actions(unscheduled->actions, st);
    run(log->set_paused(st, true));

    session_state expected;
    const system_source bash = system_source::parse("asyncBashCallback").value();
    const queue_item s1{item("s1"), lane::steer, unix_ms{10}, user_input{ann, "please"}};
    const queue_item f1{item("f1"), lane::follow_up, unix_ms{11}, user_input{ann, "later"}};
    const queue_item c1{item("c1"), lane::system, unix_ms{12}, system_input{bash, "build done"}};
    // The steer checkpoint drains system and steer by enqueue time: s1 (10), then c1 (12).
    expected.transcript = {
        entry{entry_seq{1}, unix_ms{20},
              party_message{ann, lane::steer, item("s1"), "please", unix_ms{10}}},
        entry{entry_seq{2}, unix_ms{20}, system_message{bash, item("c1"), "build done"}},
        entry{entry_seq{3}, unix_ms{30}, answer},
        entry{entry_seq{4}, unix_ms{31}, tool_started{call_id("k1"), "echo"}},
        entry{entry_seq{5}, unix_ms{32}, tool_result{call_id("k1"), "echo", "hi", false}},
    };
    expected.lanes[index_of(lane::system)].journal = {
        journal_entry{journal_seq{1}, unix_ms{12}, enqueued_fact{c1}},
        journal_entry{journal_seq{2}, unix_ms{20}, materialized_fact{item("c1"), entry_seq{2}}},
        journal_entry{journal_seq{3}, unix_ms{40}, scheduled_fact{ping}},
        journal_entry{journal_seq{4}, unix_ms{41}, scheduled_fact{pong}},
        journal_entry{journal_seq{5}, unix_ms{42}, unscheduled_fact{item("t2"), false}},
    };
    expected.lanes[index_of(lane::steer)].journal = {
        journal_entry{journal_seq{1}, unix_ms{10}, enqueued_fact{s1}},
        journal_entry{journal_seq{2}, unix_ms{20}, materialized_fact{item("s1"), entry_seq{1}}},
    };
    expected.lanes[index_of(lane::follow_up)].journal = {
        journal_entry{journal_seq{1}, unix_ms{11}, enqueued_fact{f1}},
        journal_entry{journal_seq{2}, unix_ms{13}, canceled_fact{item("f1")}},
    };
    expected.items = {
        {"s1", item_record{lane::steer, item_status::materialized, entry_seq{1}}},
        {"f1", item_record{lane::follow_up, item_status::canceled, entry_seq{}}},
        {"c1", item_record{lane::system, item_status::materialized, entry_seq{2}}},
        {"t2", item_record{lane::system, item_status::canceled, entry_seq{}}},
    };
    expected.tool_calls = {tool_call_state{answer.tool_calls[0],
                                           tool_status::finished,
                                           approval_status::none,
                                           {},
                                           decision::reject,
                                           {}}};
    expected.tool_calls_entry = entry_seq{3};
    expected.timers = {{"t1", ping}};
    expected.config = next;
    expected.paused = true;
    expected.has_work = true;  // set by the first enqueue; only mark_idle clears it
    // The ledger: one answer (its tokens and cost), one tool call started.
    expected.usage = usage_totals{token_usage{10, 0, 2, 0, 1}, 42, 1, 1};

    auto loaded = log->load().value();
    EXPECT_EQ(loaded.transcript, expected.transcript);
    for (lane l : all_lanes) {
        EXPECT_EQ(loaded.in(l), expected.in(l)) << lane_name(l);
    }
    EXPECT_EQ(loaded.items, expected.items);
    EXPECT_EQ(loaded.tool_calls, expected.tool_calls);
    EXPECT_EQ(loaded.tool_calls_entry, expected.tool_calls_entry);
    EXPECT_EQ(loaded.timers, expected.timers);
    EXPECT_EQ(loaded.config, expected.config);
    EXPECT_EQ(loaded.paused, expected.paused);
    EXPECT_EQ(loaded.has_work, expected.has_work);
    EXPECT_EQ(loaded.usage, expected.usage);
    EXPECT_EQ(loaded, expected);
    EXPECT_EQ(st, expected) << "the live path (the reducer) agrees too";
    EXPECT_EQ(loaded.version(), (version_vector{5, 5, 2, 2}));
    // The backfill carries the timers' facts too (a client sees what is scheduled).
    auto backfill = log->since(version_vector{5, 2, 2, 2});
    ASSERT_TRUE(backfill) << backfill.error().message();
    EXPECT_EQ(backfill->journal[index_of(lane::system)],
              (std::vector<journal_entry>{
                  journal_entry{journal_seq{3}, unix_ms{40}, scheduled_fact{ping}}}))
        << "t2 was scheduled and unscheduled within the window: coalesced away";
}

// A request that waited behind a removal carries the removal's epoch (or an older one): it must
// not bring the session back. An owner with a later lease starts a new, empty session.
TEST_P(StoreConformance, ARemovalRefusesOpensAtItsEpochOrOlder) {
    const auto sid = session_id::parse("floor").value();
    auto log = open("floor", 3);
    session_state st = log->load().value();
    ASSERT_TRUE(log->enqueue(st, user_in(lane::steer, "s1", "x"), unix_ms{1}));
    ASSERT_TRUE(store().remove(sid, lease_epoch{3}));
    EXPECT_EQ(store().open(sid, lease_epoch{3}).error(), storage::errc::lease_lost);
    EXPECT_EQ(store().open(sid, lease_epoch{2}).error(), storage::errc::lease_lost);
    EXPECT_FALSE(store().exists(sid).value()) << "the refused opens created nothing";
    auto next = store().open(sid, lease_epoch{4});
    ASSERT_TRUE(next.has_value()) << next.error().message();
    EXPECT_EQ((*next)->load().value(), session_state{});
}

// Reads open with open_mode::existing: a session that does not exist is not_found, and
// nothing is created.
TEST_P(StoreConformance, OpeningAnExistingSessionCreatesNothing) {
    const auto sid = session_id::parse("maybe").value();
    EXPECT_EQ(store().open(sid, lease_epoch{1}, storage::open_mode::existing).error(),
              storage::errc::not_found);
    EXPECT_FALSE(store().exists(sid).value());
    EXPECT_TRUE(store().sessions({}).value().empty());
    ASSERT_TRUE(store().open(sid, lease_epoch{2}));
    auto again = store().open(sid, lease_epoch{3}, storage::open_mode::existing);
    ASSERT_TRUE(again.has_value()) << again.error().message();
    EXPECT_EQ(store().open(sid, lease_epoch{2}, storage::open_mode::existing).error(),
              storage::errc::lease_lost);
}

// Issue 31, defect 4: a read of a session nobody owns took its lease and loaded it. The store
// answers it instead: read() is the stored state, without a lease, a fence or a new session.
TEST_P(StoreConformance, AReadWithoutALeaseFencesNothingAndCreatesNothing) {
    const auto sid = session_id::parse("looked-at").value();
    auto missing = store().read(sid);
    ASSERT_TRUE(missing) << missing.error().message();
    EXPECT_FALSE(missing->has_value());
    EXPECT_FALSE(store().exists(sid).value()) << "a read creates nothing";
    EXPECT_TRUE(store().sessions({}).value().empty());

    auto log = open("looked-at", 3);
    session_state st = log->load().value();
    auto queued = log->enqueue(st, user_in(lane::follow_up, "f1", "hello"), unix_ms{5});
    ASSERT_TRUE(queued);
    session::apply_actions(queued->actions, st);
    auto scheduled = log->schedule_timer(
        st, timer{item("t1"), unix_ms{900}, system_source::parse("scheduledCallback").value(), "x"},
        unix_ms{6});
    ASSERT_TRUE(scheduled);
    session::apply_actions(*scheduled, st);
    auto read = store().read(sid);
    ASSERT_TRUE(read) << read.error().message();
    ASSERT_TRUE(read->has_value());
    EXPECT_EQ(**read, st);
    EXPECT_EQ(**read, log->load().value());
    // The owner goes on at its epoch: nothing was fenced.
    auto more = log->enqueue(st, user_in(lane::follow_up, "f2", "again"), unix_ms{7});
    ASSERT_TRUE(more) << more.error().message();
    session::apply_actions(more->actions, st);
    EXPECT_EQ(store().read(sid).value().value(), st);
    EXPECT_TRUE(store().open(sid, lease_epoch{3}, storage::open_mode::existing))
        << "the stored epoch is still the owner's";
    // A removed session reads as none.
    ASSERT_TRUE(store().remove(sid, lease_epoch{4}));
    EXPECT_FALSE(store().read(sid).value().has_value());
}

}  // namespace wuhu::testing
