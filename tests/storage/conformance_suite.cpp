// The tests of the store conformance suite (see conformance.hpp). Compiled into every backend's
// test binary; each binary instantiates the suite with its own factory.
#include "tests/storage/conformance.hpp"

namespace wuhu::testing {

namespace {
using storage::errc;
}

TEST_P(StoreConformance, ANewSessionLoadsEmpty) {
    auto log = open("fresh", 1);
    EXPECT_EQ(log->load().value(), session_state{});
    EXPECT_EQ(log->id().str(), "fresh");
    EXPECT_EQ(log->epoch(), lease_epoch{1});
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
    EXPECT_EQ(std::get<user_input>(s.log().load()->in(lane::follow_up).pending[0].payload).content,
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

TEST_P(StoreConformance, PatchSinceEqualsThePureStablePatch) {
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
    EXPECT_EQ(seen.in(lane::steer).pending[0].id.str(), "d3");
}

TEST_P(StoreConformance, SessionsListsStoredSessionsInIdOrderWithHasWork) {
    auto b = open("list-b", 1);
    auto a = open("list-a", 1);
    session_state sb = b->load().value();
    ASSERT_TRUE(b->enqueue(sb, user_in(lane::follow_up, "f", "work"), unix_ms{1}));
    auto all = store().sessions(false).value();
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].id.str(), "list-a");
    EXPECT_FALSE(all[0].has_work);
    EXPECT_EQ(all[1].id.str(), "list-b");
    EXPECT_TRUE(all[1].has_work);
    auto busy = store().sessions(true).value();
    ASSERT_EQ(busy.size(), 1u);
    EXPECT_EQ(busy[0].id.str(), "list-b");
    ASSERT_TRUE(store().remove(session_id::parse("list-b").value(), lease_epoch{1}));
    ASSERT_EQ(store().sessions(false).value().size(), 1u);
}

}  // namespace wuhu::testing
