// The SQLite store after what may befall it: a restart of the machine, a file removed by
// another process, a newer schema, corrupt files and rows, a session of 100,000 entries.
#include "session/approval.hpp"
#include "session/reducer.hpp"
#include "session/rules.hpp"
#include "storage/rows.hpp"
#include "storage/sqlite_db.hpp"
#include "tests/storage/temp_sqlite_store.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <chrono>
#include <fstream>
#include <latch>
#include <map>
#include <set>
#include <thread>

namespace wuhu::testing {

TEST(SqliteStore, AfterTheMachineRestartedTheCatalogIsCheckedAgainstTheSessionFiles) {
    temp_dir dir;
    const auto boot = dir.path() / "boot_id";
    auto options = [&] {
        storage::sqlite_options o{dir.path() / "data"};
        o.boot_id_file = boot;
        return o;
    };
    std::ofstream(boot) << "boot-a\n";
    {
        storage::sqlite_store store(options());
        EXPECT_EQ(store.files_checked_at_start(), 0u) << "a new data directory";
        for (const char* id : {"working", "waiting", "gone", "idle", "asking"}) {
            auto log = store.open(session_id::parse(id).value(), lease_epoch{1}).value();
            session_state st = log->load().value();
            if (std::string(id) == "asking") {
                // A call waiting for a person, its deadline due (issue 33), and no work.
                apply_actions(
                    log->enqueue(st, user_in(lane::follow_up, "f", "x"), unix_ms{1})->actions, st);
                apply_actions(log->drain(st, checkpoint::follow_up, unix_ms{1}).value(), st);
                const auto m = reply("", {{"c1", "charge"}});
                auto asked = plan_response(
                    st, m, {}, false, unix_ms{2},
                    {request_of(m.tool_calls[0], tool_approval{approval_mode::always, 3},
                                unix_ms{2})});
                ASSERT_TRUE(log->commit(st, asked.value()));
                apply_actions(asked.value(), st);
                ASSERT_TRUE(log->commit(st, plan_await_approval(st)));
            } else if (std::string(id) == "waiting") {
                ASSERT_TRUE(log->schedule_timer(
                    st,
                    timer{item("t1"), unix_ms{5}, system_source::parse("scheduledCallback").value(),
                          "wake"},
                    unix_ms{1}));
            } else if (std::string(id) != "idle") {
                ASSERT_TRUE(log->enqueue(st, user_in(lane::follow_up, "f", "x"), unix_ms{1}));
            }
        }
    }
    // What a power loss may leave: rows that say nothing about the work, or say paused what
    // is not (the sweep skips paused sessions), or no row at all.
    auto lose_rows = [&] {
        storage::sqlite::db catalog((dir.path() / "data" / "catalog.sqlite").string(), "FULL",
                                    5000);
        catalog.exec("UPDATE sessions SET has_work = 0, timers = 0, next_timer = NULL, paused = 1");
        catalog.exec("DELETE FROM sessions WHERE id = 'gone'");
    };
    storage::catalog_query needing;
    needing.needing_owner_by = unix_ms{10};
    auto listed = [&](storage::sqlite_store& store) {
        std::vector<std::string> out;
        for (const auto& e : store.sessions(needing).value()) {
            out.push_back(e.id.str());
        }
        return out;
    };
    lose_rows();
    {
        storage::sqlite_store store(options());
        EXPECT_EQ(store.files_checked_at_start(), 0u) << "the same boot: the rows stand";
        EXPECT_TRUE(listed(store).empty());
    }
    std::ofstream(boot) << "boot-b\n";
    // New files a process never named (killed between their link and their rename): one from
    // before, removed; one just written, perhaps another worker's now, kept.
    const auto files = dir.path() / "data" / "sessions";
    const auto stale = files / ".x.sqlite.1.0.new";
    const auto young = files / ".y.sqlite.2.0.new";
    std::ofstream(stale) << "x";
    std::ofstream(young) << "y";
    std::filesystem::last_write_time(
        stale, std::filesystem::file_time_type::clock::now() - std::chrono::minutes(2));
    {
        storage::sqlite_store store(options());
        EXPECT_EQ(store.files_checked_at_start(), 5u);
        EXPECT_EQ(store.rows_raised_at_start(), 4u);
        EXPECT_EQ(store.open_files(), 0u) << "the check leaves no file open";
        EXPECT_EQ(listed(store), (std::vector<std::string>{"asking", "gone", "waiting", "working"}))
            << "a deadline of a call waiting for approval is due like a timer";
    }
    EXPECT_FALSE(std::filesystem::exists(stale));
    EXPECT_TRUE(std::filesystem::exists(young));
    // Checked once per boot.
    lose_rows();
    storage::sqlite_store store(options());
    EXPECT_EQ(store.files_checked_at_start(), 0u);
}

// Two stores on one data directory are two worker processes of one host. A handle one of them
// cached of a file the other removed (and created again) is never used: not to open, not to
// remove, and its writes fail.
TEST(SqliteStore, AHandleCachedOfARemovedFileIsNeverUsedAgain) {
    temp_dir dir;
    storage::sqlite_store a(storage::sqlite_options{dir.path()});
    storage::sqlite_store b(storage::sqlite_options{dir.path()});
    const auto sid = session_id::parse("shared").value();
    auto old = a.open(sid, lease_epoch{1}).value();  // A caches the first file
    session_state st = old->load().value();
    ASSERT_TRUE(old->enqueue(st, user_in(lane::steer, "d1", "one"), unix_ms{1}));
    ASSERT_TRUE(b.remove(sid, lease_epoch{2}));
    auto fresh = b.open(sid, lease_epoch{3}).value();  // a new file at the same path
    session_state fs = fresh->load().value();
    ASSERT_TRUE(fresh->enqueue(fs, user_in(lane::steer, "d2", "two"), unix_ms{2}));
    // A's old handle cannot write (the tombstone), and A's next open sees the new file.
    EXPECT_EQ(old->enqueue(st, user_in(lane::steer, "d3", "three"), unix_ms{3}).error(),
              storage::errc::lease_lost);
    auto reopened = a.open(sid, lease_epoch{4}).value();
    auto seen = reopened->load().value();
    ASSERT_EQ(seen.in(lane::steer).pending.size(), 1u);
    EXPECT_EQ(seen.in(lane::steer).pending_item(0).id.str(), "d2");
    // And a removal through A removes the new file, not the old one A once had open.
    ASSERT_TRUE(a.remove(sid, lease_epoch{4}));
    EXPECT_FALSE(std::filesystem::exists(a.path_of(sid)));
    EXPECT_FALSE(b.exists(sid).value());
    EXPECT_EQ(b.open(sid, lease_epoch{4}, storage::open_mode::existing).error(),
              storage::errc::lease_lost);
    EXPECT_EQ(b.open(sid, lease_epoch{5}, storage::open_mode::existing).error(),
              storage::errc::not_found);
}

// One worker removes and creates a session again and again while another opens it (two store
// instances: two processes of one host). The opener meets the file as it is being unlinked;
// it gets the session, or not_found, or lease_lost, never an error of the store.
TEST(SqliteStore, OpeningWhileAnotherProcessRemovesNeverFailsTheStore) {
    temp_dir dir;
    storage::sqlite_store remover(storage::sqlite_options{dir.path()});
    storage::sqlite_store opener(storage::sqlite_options{dir.path()});
    const auto sid = session_id::parse("churn").value();
    std::atomic<bool> done{false};
    std::atomic<int> opened{0};
    std::map<std::string, int> refusals;
    std::thread reader([&] {
        while (!done) {
            auto r = opener.open(sid, lease_epoch{1}, storage::open_mode::existing);
            if (r) {
                ++opened;
            } else {
                ++refusals[std::string(
                    storage::code_name(static_cast<storage::errc>(r.error().value())))];
            }
        }
    });
    // The churn runs in a function of its own, so that a failed assertion still stops and joins
    // the reader (a joinable thread's destructor would end the process without a word).
    auto churn = [&] {
        for (std::uint64_t e = 2; e < 300; e += 2) {
            auto log = remover.open(sid, lease_epoch{e});
            ASSERT_TRUE(log) << "epoch " << e << ": " << log.error().message();
            auto st = (*log)->load();
            ASSERT_TRUE(st) << "epoch " << e << ": " << st.error().message();
            auto queued = (*log)->enqueue(*st, user_in(lane::steer, "x", "y"), unix_ms{1});
            ASSERT_TRUE(queued) << "epoch " << e << ": " << queued.error().message();
            auto removed = remover.remove(sid, lease_epoch{e});
            ASSERT_TRUE(removed) << "epoch " << e << ": " << removed.error().message();
        }
    };
    churn();
    done = true;
    reader.join();
    for (const auto& [code, n] : refusals) {
        EXPECT_TRUE(code == "lease_lost" || code == "not_found") << n << " x " << code;
    }
    EXPECT_GT(refusals["lease_lost"] + refusals["not_found"] + opened, 0);
}

TEST(SqliteStore, SchemaIsVersionedAndANewerSchemaIsRefused) {
    temp_sqlite_store t;
    auto id = session_id::parse("v").value();
    { auto log = t.store.open(id, lease_epoch{1}).value(); }
    {
        storage::sqlite::db db(t.store.path_of(id).string(), "FULL", 1000);
        auto& q = db.prepare("PRAGMA user_version");
        ASSERT_TRUE(q.step());
        EXPECT_EQ(q.int64(0), 1);
        q.reset();
        db.exec("PRAGMA user_version = 99");
    }
    // A new store object sees the file for the first time.
    storage::sqlite_store again(storage::sqlite_options{t.dir.path()});
    EXPECT_EQ(again.open(id, lease_epoch{2}).error(), make_error_code(storage::errc::corrupt));
}

TEST(SqliteStore, ACorruptFileIsAClearErrorNotACrash) {
    temp_sqlite_store t;
    auto id = session_id::parse("bad").value();
    {
        std::ofstream f(t.store.path_of(id), std::ios::binary);
        f << std::string(8192, 'x');
    }
    EXPECT_EQ(t.store.open(id, lease_epoch{1}).error(), make_error_code(storage::errc::corrupt));
}

TEST(SqliteStore, ACorruptRowIsReportedAsCorrupt) {
    temp_sqlite_store t;
    auto id = session_id::parse("rows").value();
    auto log = t.store.open(id, lease_epoch{1}).value();
    session_state st = log->load().value();
    auto out = log->enqueue(st, user_in(lane::steer, "a", "x"), unix_ms{1}).value();
    {
        storage::sqlite::db db(t.store.path_of(id).string(), "FULL", 1000);
        db.exec("UPDATE journal SET body = '{\"seq\":\"oops\"}'");
    }
    EXPECT_EQ(log->load().error(), make_error_code(storage::errc::corrupt));
}

// The whole session loads exactly; a backfill since a recent version reads the tail alone: with
// every older row made unreadable, it still answers (and a full load reports the damage). How
// fast a load is lives in bench/store_bench, not here.
TEST(SqliteStore, LoadsA100000EntrySessionAndBackfillsFromTheTailAlone) {
    temp_sqlite_store t;
    const auto id = session_id::parse("big").value();
    auto log = t.store.open(id, lease_epoch{1}).value();
    session_state st = log->load().value();
    session_state target = st;
    action_list actions;
    for (int i = 0; i < 100'000; ++i) {
        auto a = plan_append_marker(target, diagnostic{"note", "entry " + std::to_string(i)},
                                    unix_ms{i});
        apply_actions(a, target);
        actions.insert(actions.end(), a.begin(), a.end());
    }
    ASSERT_TRUE(log->commit(st, actions));
    auto loaded = log->load();
    ASSERT_TRUE(loaded.has_value());
    EXPECT_EQ(loaded->transcript.size(), 100'000u);
    EXPECT_EQ(*loaded, target);
    {
        storage::sqlite::db raw(t.store.path_of(id).string(), "FULL", 5000);
        raw.exec("UPDATE transcript SET body = 'not json' WHERE seq <= 99990");
    }
    version_vector v = target.version();
    v.transcript -= 10;
    auto tail = log->since(v);
    ASSERT_TRUE(tail.has_value()) << "the backfill read a row before its version";
    EXPECT_EQ(tail->transcript.size(), 10u);
    EXPECT_EQ(std::get<diagnostic>(tail->transcript.back().body).message, "entry 99999");
    EXPECT_EQ(log->load().error(), storage::errc::corrupt);
}

// A timer row whose id is also a queue item's is corrupt data: loaded, a cancel of that id
// would record a timer's end for an item and fail the reducer's check in the owner (found in
// review of the timer facts, issue 31).
TEST(StoredRows, ATimerWhoseIdIsAnItemIsCorrupt) {
    const std::string_view item =
        R"({"seq":1,"at":1,"fact":"enqueued","item":{"id":"t1","lane":"system","enqueued_at":1,)"
        R"("source":"scheduledCallback","content":"x"}})";
    storage::state_builder alone;
    alone.fact(lane::system, item);
    alone.registers("", false, false);
    ASSERT_TRUE(alone.finish()) << "the item alone loads";
    storage::state_builder b;
    b.fact(lane::system, item);
    b.timer(R"({"id":"t1","due":5,"source":"scheduledCallback","content":"x"})");
    b.registers("", false, false);
    auto st = b.finish();
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error(), make_error_code(storage::errc::corrupt));
    storage::state_builder fine;
    fine.timer(R"({"id":"t2","due":5,"source":"scheduledCallback","content":"x"})");
    fine.registers("", false, false);
    EXPECT_TRUE(fine.finish());
}

}  // namespace wuhu::testing
