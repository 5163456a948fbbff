// The SQLite store: the conformance suite, new session files, the WAL, the catalog, open-file
// limits, what an unloaded session leaves.
#include "storage/sqlite_store.hpp"
#include "storage/sqlite_catalog.hpp"
#include "storage/sqlite_db.hpp"
#include "tests/storage/conformance.hpp"
#include "tests/storage/temp_sqlite_store.hpp"
#include "tests/support/temp_dir.hpp"

#include <sys/stat.h>
#include <chrono>
#include <fstream>
#include <iostream>
#include <latch>
#include <map>
#include <optional>
#include <set>
#include <thread>

namespace wuhu::testing {

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreConformance,
                         ::testing::Values(store_factory{
                             "sqlite",
                             [] {
                                 return std::unique_ptr<storage::session_store>(
                                     std::make_unique<temp_sqlite_store>());
                             }}),
                         [](const auto& info) { return info.param.name; });

// Workers of one host start together on a fresh data directory: each opens the catalog and
// the same session file with its own connection, and every one must find the schema in place
// (the schema version is read under the write lock, not before it).
// Both ways of making a new session file: from the prepared image, and by SQLite.
class SqliteNewFiles : public ::testing::TestWithParam<bool> {};

INSTANTIATE_TEST_SUITE_P(SqliteStore, SqliteNewFiles, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "FromImage" : "BySqlite"; });

TEST_P(SqliteNewFiles, WorkersOpeningAFreshDirectoryAtOnceAllSucceed) {
    constexpr int rounds = 20;
    constexpr int workers = 4;
    storage::sqlite_options options;
    options.new_files_from_image = GetParam();
    for (int round = 0; round < rounds; ++round) {
        temp_dir dir;
        std::latch go(workers);
        std::vector<std::string> errors(workers);
        std::vector<std::thread> threads;
        for (int w = 0; w < workers; ++w) {
            threads.emplace_back([&, w] {
                go.arrive_and_wait();
                try {
                    auto o = options;
                    o.data_dir = dir.path();
                    storage::sqlite_store store(o);
                    auto log = store.open(session_id::parse("shared").value(), lease_epoch{1});
                    if (!log) {
                        errors[w] = log.error().message();
                    }
                } catch (const std::exception& e) {
                    errors[w] = e.what();
                }
            });
        }
        for (auto& t : threads) {
            t.join();
        }
        for (int w = 0; w < workers; ++w) {
            ASSERT_EQ(errors[w], "") << "round " << round << ", worker " << w;
        }
    }
}

// A session file written from the prepared image is the file SQLite makes: WAL mode, the
// page size, the schema and its version, the first rows; and it works as one.
TEST(SqliteStore, ANewSessionFileFromTheImageIsTheOneSqliteWouldMake) {
    auto describe = [](const std::filesystem::path& file) {
        storage::sqlite::db d(file.string(), "FULL", 5000, storage::sqlite::if_missing::fail);
        std::string out;
        for (const char* q : {"PRAGMA journal_mode", "PRAGMA page_size", "PRAGMA user_version",
                              "SELECT group_concat(type || name || sql, ';') FROM "
                              "(SELECT * FROM sqlite_schema ORDER BY name)",
                              "SELECT group_concat(k || '=' || v, ';') FROM meta",
                              "PRAGMA integrity_check"}) {
            auto& st = d.prepare(q);
            EXPECT_TRUE(st.step()) << q;
            out += std::string(st.text(0)) + "\n";
            st.reset();
        }
        return out;
    };
    std::map<bool, std::string> made;
    for (bool image : {true, false}) {
        temp_dir dir;
        storage::sqlite_options o;
        o.data_dir = dir.path();
        o.new_files_from_image = image;
        {
            storage::sqlite_store store(o);
            auto log = store.open(session_id::parse("s").value(), lease_epoch{3}).value();
            session_state st = log->load().value();
            ASSERT_TRUE(log->enqueue(st, user_in(lane::steer, "a", "hello"), unix_ms{1}));
        }
        made[image] = describe(dir.path() / "sessions" / "s.sqlite");
        storage::sqlite_store again(o);
        auto st = again.open(session_id::parse("s").value(), lease_epoch{4})
                      .value()->load().value();
        ASSERT_EQ(st.in(lane::steer).pending.size(), 1u);
        // Nothing but the file: its WAL and shared memory went with its last connection.
        std::set<std::string> files;
        for (const auto& e : std::filesystem::directory_iterator(dir.path() / "sessions")) {
            files.insert(e.path().filename().string());
        }
        EXPECT_EQ(files, (std::set<std::string>{"s.sqlite"}));
    }
    EXPECT_EQ(made[true], made[false]);
    EXPECT_NE(made[true].find("wal\n1024\n1\n"), std::string::npos) << made[true];
    EXPECT_NE(made[true].find("epoch=3"), std::string::npos) << made[true];
}

// Another worker makes the file (and owns the session at a newer epoch, and writes) while
// this one writes its own new file: this one's link fails, and it opens that file as it is,
// changing nothing of it (it is fenced out).
TEST(SqliteStore, ANewFileMadeElsewhereFirstIsOpenedAsItIs) {
    temp_dir dir;
    const auto sid = session_id::parse("raced").value();
    storage::sqlite_options o;
    o.data_dir = dir.path();
    std::optional<storage::sqlite_store> other;
    std::unique_ptr<storage::session_log> newer;
    o.before_new_file_is_linked = [&] {
        if (other) {
            return;
        }
        auto elsewhere = o;
        elsewhere.before_new_file_is_linked = nullptr;
        other.emplace(elsewhere);
        newer = other->open(sid, lease_epoch{2}).value();
        session_state st = newer->load().value();
        ASSERT_TRUE(newer->enqueue(st, user_in(lane::steer, "a", "acknowledged"), unix_ms{1}));
    };
    storage::sqlite_store store(o);
    auto stale = store.open(sid, lease_epoch{1});
    ASSERT_FALSE(stale.has_value());
    EXPECT_EQ(stale.error(), storage::errc::lease_lost);
    ASSERT_TRUE(newer);
    auto st = newer->load().value();  // still the owner, with what it wrote
    ASSERT_EQ(st.in(lane::steer).pending.size(), 1u);
    EXPECT_TRUE(newer->mark_idle(st).has_value());
    // The file this one wrote, linked at a hidden name before its rename failed, is gone.
    for (const auto& e : std::filesystem::directory_iterator(dir.path() / "sessions")) {
        EXPECT_EQ(e.path().filename().string().rfind("raced.sqlite", 0), 0u) << e.path();
    }
}

// Issue 16: a session at work commits to a WAL given its working size in written zeros, so
// that an fdatasync never extends the file (which makes it write the inode too); a session
// created and left pays nothing; another connection reads what was committed past the zeros.
TEST(SqliteStore, ASessionAtWorkCommitsToAWalThatDoesNotGrow) {
    temp_sqlite_store t;
    const auto id = session_id::parse("w").value();
    const auto wal = t.dir.path() / "sessions" / "w.sqlite-wal";
    auto log = t.store.open(id, lease_epoch{1}).value();
    int sent = 0;
    auto enqueue = [&] {
        auto st = log->load().value();
        ASSERT_TRUE(log->enqueue(st, user_in(lane::steer, "i" + std::to_string(sent), "text"),
                                 unix_ms{1 + sent}));
        ++sent;
    };
    enqueue();
    EXPECT_LT(std::filesystem::file_size(wal), 16u * 1024) << "one command: no zeros";
    while (sent < 12) {
        enqueue();
    }
    const storage::sqlite_options defaults{};
    const auto sized = std::filesystem::file_size(wal);
    EXPECT_GE(sized, static_cast<std::uintmax_t>(32 + defaults.wal_prealloc_frames *
                                                          (defaults.page_size + 24)));
    while (sent < 40) {
        enqueue();
        ASSERT_EQ(std::filesystem::file_size(wal), sized) << "after command " << sent;
    }
    // Another connection (another worker's, say) reads the WAL up to its last commit.
    storage::sqlite_store other(storage::sqlite_options{t.dir.path(), "FULL", 5000, 16});
    auto again = other.open(id, lease_epoch{2}).value();
    EXPECT_EQ(again->load().value().in(lane::steer).pending.size(), 40u);
}

// Issue 31, defect 12: a catalog write that failed was swallowed, and its row was lost until the
// session's next urgent write. Now it is counted, and the row is kept and written with the next
// write of the catalog. The commit itself goes on (the catalog is a hint, the file the truth).
TEST(SqliteStore, ACatalogRowThatCannotBeWrittenIsCountedAndWrittenWithTheNextWrite) {
    temp_dir dir;
    storage::sqlite_options o;
    o.data_dir = dir.path();
    o.busy_timeout_ms = 50;
    storage::sqlite_store store(o);
    const auto sid = session_id::parse("blocked").value();
    auto log = store.open(sid, lease_epoch{1}).value();
    auto state = log->load().value();
    storage::catalog_query q;
    q.needing_owner_by = unix_ms{2};
    {
        // Another connection holds the catalog's write lock past the busy timeout.
        storage::sqlite::db other((dir.path() / "catalog.sqlite").string(), "NORMAL", 50);
        other.exec("BEGIN IMMEDIATE");
        auto committed = log->enqueue(state, user_in(lane::follow_up, "f1", "work"), unix_ms{1});
        ASSERT_TRUE(committed) << "the file is the truth: the commit goes on";
        apply_actions(committed->actions, state);
        EXPECT_EQ(store.catalog_failures(), 1u);
        const storage::session_store& any = store;
        EXPECT_EQ(any.index_write_failures(), 1u)
            << "what wuhu_store_index_write_failures_total counts";
        other.exec("ROLLBACK");
    }
    // The next raise of the catalog (here another session's) writes the kept row too, before
    // anything reads the catalog.
    auto other_log = store.open(session_id::parse("other").value(), lease_epoch{1}).value();
    auto other_state = other_log->load().value();
    ASSERT_TRUE(other_log->enqueue(other_state, user_in(lane::follow_up, "g1", "x"), unix_ms{1}));
    {
        storage::sqlite::db raw((dir.path() / "catalog.sqlite").string(), "NORMAL", 5000,
                                storage::sqlite::if_missing::fail);
        auto& q = raw.prepare("SELECT has_work FROM sessions WHERE id = 'blocked'");
        ASSERT_TRUE(q.step());
        EXPECT_EQ(q.int64(0), 1) << "the kept raise waited for a read";
        q.reset();
    }
    std::set<std::string> listed;
    for (const auto& e : store.sessions(q).value()) {
        listed.insert(e.id.str());
    }
    EXPECT_EQ(listed, (std::set<std::string>{"blocked", "other"}));
}

TEST(SqliteStore, OneFilePerSessionUnderTheDataDirectory) {
    temp_sqlite_store t;
    auto log = t.store.open(session_id::parse("abc-1_X").value(), lease_epoch{1}).value();
    EXPECT_TRUE(std::filesystem::exists(t.dir.path() / "sessions" / "abc-1_X.sqlite"));
    EXPECT_TRUE(std::filesystem::exists(t.dir.path() / "catalog.sqlite"));
    // Ids that could escape the directory or name a special database never become paths.
    for (const char* bad : {"../x", "..", ":memory:", "file:x?mode=memory", "a/b", ""}) {
        EXPECT_FALSE(session_id::parse(bad).has_value()) << bad;
    }
}

// Issue 29: the data directory is the worker's user's alone (0700), and so are the session
// files, their WALs and shared memory, the catalog and the lock file (0600), whatever the
// umask; a directory made earlier with a wider mode is narrowed.
TEST(SqliteStore, TheDataDirectoryAndEveryFileAreTheWorkersUsersAlone) {
    auto mode_of = [](const std::filesystem::path& p) {
        struct stat st {};
        EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
        return st.st_mode & 07777;
    };
    for (const mode_t mask : {mode_t{0}, mode_t{022}, mode_t{0277}}) {
        temp_dir dir;
        std::filesystem::create_directories(dir.path() / "data" / "sessions");
        std::filesystem::permissions(dir.path() / "data", std::filesystem::perms::all);
        const mode_t before = ::umask(mask);
        {
            storage::sqlite_store store(storage::sqlite_options{dir.path() / "data"});
            auto log = store.open(session_id::parse("p1").value(), lease_epoch{1}).value();
            auto st = log->load().value();
            ASSERT_TRUE(log->enqueue(st, user_in(lane::steer, "i1", "text"), unix_ms{1}));
            const auto data = dir.path() / "data";
            EXPECT_EQ(mode_of(data), 0700u) << "umask " << mask;
            EXPECT_EQ(mode_of(data / "sessions"), 0700u) << "umask " << mask;
            EXPECT_EQ(mode_of(data / "catalog.sqlite"), 0600u) << "umask " << mask;
            for (const auto& e : std::filesystem::directory_iterator(data / "sessions")) {
                EXPECT_EQ(mode_of(e.path()), 0600u) << e.path() << " umask " << mask;
            }
            for (const auto& e : std::filesystem::directory_iterator(data)) {
                if (e.is_regular_file()) {
                    EXPECT_EQ(mode_of(e.path()), 0600u) << e.path() << " umask " << mask;
                }
            }
            EXPECT_TRUE(std::filesystem::exists(data / "sessions" / "p1.sqlite-wal"));
        }
        ::umask(before);
    }
}

TEST(SqliteStore, ClosesIdleFilesToStayUnderTheLimit) {
    temp_sqlite_store t(4);
    std::vector<std::unique_ptr<storage::session_log>> logs;
    for (int i = 0; i < 20; ++i) {
        auto log = t.store.open(session_id::parse("s" + std::to_string(i)).value(), lease_epoch{1})
                       .value();
        session_state st = log->load().value();
        ASSERT_TRUE(
            log->enqueue(st, user_in(lane::steer, "a", "x" + std::to_string(i)), unix_ms{1}));
        EXPECT_LE(t.store.open_files(), 4u);
        logs.push_back(std::move(log));
    }
    // Every session still works after its file was closed: it is reopened on use.
    for (int i = 0; i < 20; ++i) {
        auto st = logs[static_cast<std::size_t>(i)]->load().value();
        ASSERT_EQ(st.in(lane::steer).pending.size(), 1u);
        EXPECT_EQ(std::get<user_input>(st.in(lane::steer).pending_item(0).payload).content,
                  "x" + std::to_string(i));
        EXPECT_TRUE(logs[static_cast<std::size_t>(i)]->mark_idle(st).has_value());
    }
    EXPECT_LE(t.store.open_files(), 4u);
}

// Issue 36: what an idle loaded session holds open (a connection, its page cache, its shared
// memory) goes back once nobody has used it for a while; the session works on, its file opened
// again by its next operation, and a file in use is never closed under it.
TEST(SqliteStore, FilesUnusedSinceACutOffAreClosedAndOpenedAgainOnUse) {
    temp_sqlite_store t(100);
    const auto files = t.dir.path() / "sessions";
    auto a = t.store.open(session_id::parse("a").value(), lease_epoch{1}).value();
    auto b = t.store.open(session_id::parse("b").value(), lease_epoch{1}).value();
    auto st_a = a->load().value();
    ASSERT_TRUE(a->enqueue(st_a, user_in(lane::steer, "a1", "one"), unix_ms{1}));
    const auto cut_off = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto st_b = b->load().value();
    ASSERT_TRUE(b->enqueue(st_b, user_in(lane::steer, "b1", "one"), unix_ms{1}));
    ASSERT_EQ(t.store.open_files(), 2u);
    EXPECT_EQ(t.store.close_idle(cut_off), 1u) << "a's file only: b's was used since";
    EXPECT_EQ(t.store.open_files(), 1u);
    EXPECT_FALSE(std::filesystem::exists(files / "a.sqlite-wal")) << "checkpointed and deleted";
    EXPECT_FALSE(std::filesystem::exists(files / "a.sqlite-shm"));
    // a is still loaded under its lease: its next operations open the file again.
    st_a = a->load().value();
    ASSERT_EQ(st_a.in(lane::steer).pending.size(), 1u);
    ASSERT_TRUE(a->enqueue(st_a, user_in(lane::steer, "a2", "two"), unix_ms{2}));
    EXPECT_EQ(a->load().value().in(lane::steer).pending.size(), 2u);
    EXPECT_EQ(t.store.close_idle(std::chrono::steady_clock::now()), 2u);
    EXPECT_EQ(t.store.open_files(), 0u);
    // Fenced as before: an older epoch still loses.
    auto stale = t.store.open(session_id::parse("a").value(), lease_epoch{0});
    EXPECT_EQ(stale.error(), storage::errc::lease_lost);
    EXPECT_EQ(t.store.close_idle(std::chrono::steady_clock::now()), 1u) << "the one it read";
    EXPECT_EQ(t.store.close_idle(std::chrono::steady_clock::now()), 0u);
    EXPECT_EQ(t.store.open_files(), 0u);
}

// A call closes at most 256 files: a burst of sessions that went idle together is closed over
// several calls, and the store thread goes back to commits in between.
TEST(SqliteStore, ACallClosesAtMost256IdleFiles) {
    temp_sqlite_store t(400);
    std::vector<std::unique_ptr<storage::session_log>> logs;
    for (int i = 0; i < 300; ++i) {
        logs.push_back(
            t.store.open(session_id::parse("s" + std::to_string(i)).value(), lease_epoch{1})
                .value());
    }
    ASSERT_EQ(t.store.open_files(), 300u);
    const auto now = std::chrono::steady_clock::now();
    EXPECT_EQ(t.store.close_idle(now), 256u);
    EXPECT_EQ(t.store.close_idle(now), 44u);
    EXPECT_EQ(t.store.open_files(), 0u);
}

// A file closed to make room keeps its WAL (its frames and the zeros of its working size) for
// the session's next connection; once the session is unloaded no connection comes, and the
// WAL is checkpointed and emptied as an unloaded session's is: nothing of ~150 KiB a session
// stays behind on disk.
TEST(SqliteStore, AFileClosedToMakeRoomLeavesNoWalOnceItsSessionIsUnloaded) {
    temp_sqlite_store t(2);
    const auto files = t.dir.path() / "sessions";
    int sent = 0;
    auto work = [&](storage::session_log& log, int commands) {
        for (int i = 0; i < commands; ++i, ++sent) {
            auto st = log.load().value();
            ASSERT_TRUE(log.enqueue(st, user_in(lane::steer, "i" + std::to_string(sent), "text"),
                                    unix_ms{1}));
        }
    };
    auto a = t.store.open(session_id::parse("a").value(), lease_epoch{1}).value();
    work(*a, 14);
    const storage::sqlite_options defaults{};
    const auto working_size = static_cast<std::uintmax_t>(defaults.wal_prealloc_frames) *
                              static_cast<std::uintmax_t>(defaults.page_size);
    ASSERT_GE(std::filesystem::file_size(files / "a.sqlite-wal"), working_size);
    auto b = t.store.open(session_id::parse("b").value(), lease_epoch{1}).value();
    work(*b, 1);
    auto c = t.store.open(session_id::parse("c").value(), lease_epoch{1}).value();
    work(*c, 1);
    ASSERT_LE(t.store.open_files(), 2u);
    ASSERT_GE(std::filesystem::file_size(files / "a.sqlite-wal"), working_size)
        << "a's file was not closed to make room";
    a.reset();  // unloaded
    b.reset();  // unloaded, its file open until then
    for (const char* left : {"a.sqlite-wal", "a.sqlite-shm", "b.sqlite-wal", "b.sqlite-shm"}) {
        EXPECT_FALSE(std::filesystem::exists(files / left)) << left;  // a's as b's, closed last
    }
    EXPECT_LE(t.store.open_files(), 2u);
    // What the WAL held is in the file.
    auto again = t.store.open(session_id::parse("a").value(), lease_epoch{2}).value();
    EXPECT_EQ(again->load().value().in(lane::steer).pending.size(), 14u);
    // A store that is stopping leaves such a WAL to the next start, which reads it back.
    work(*again, 14);
    b = t.store.open(session_id::parse("b").value(), lease_epoch{2}).value();
    work(*b, 1);
    c = t.store.open(session_id::parse("c").value(), lease_epoch{2}).value();
    work(*c, 1);
    ASSERT_GE(std::filesystem::file_size(files / "a.sqlite-wal"), working_size);
    t.store.stopping();
    again.reset();
    EXPECT_GE(std::filesystem::file_size(files / "a.sqlite-wal"), working_size);
}

// An unloaded session leaves its file alone on disk: its WAL and its shared memory (32 KiB
// written, more than a short session's file) go with the file's last connection, as they do
// with SQLite's own last connection. While another connection has the file open (another
// worker's on this host, say) both stay, and that connection goes on as before; and when the
// store is stopping.
TEST(SqliteStore, AnUnloadedSessionLeavesOnlyItsFile) {
    temp_sqlite_store t;
    const auto id = session_id::parse("u").value();
    auto there = [&](const char* suffix) {
        return std::filesystem::exists(t.dir.path() / "sessions" /
                                       (std::string("u.sqlite") + suffix));
    };
    auto send = [](storage::session_log& log, const char* item) {
        auto st = log.load();
        return st && log.enqueue(*st, user_in(lane::steer, item, "text"), unix_ms{1}).has_value();
    };
    {
        auto log = t.store.open(id, lease_epoch{1}).value();
        ASSERT_TRUE(send(*log, "a"));
        ASSERT_TRUE(there("-wal") && there("-shm"));
    }
    EXPECT_TRUE(there(""));
    EXPECT_FALSE(there("-wal"));
    EXPECT_FALSE(there("-shm"));
    storage::sqlite_store other(storage::sqlite_options{t.dir.path(), "FULL", 5000, 16});
    auto elsewhere = other.open(id, lease_epoch{2}).value();
    ASSERT_TRUE(send(*elsewhere, "b"));
    {
        auto log = t.store.open(id, lease_epoch{3}).value();
        ASSERT_TRUE(send(*log, "c"));
    }
    EXPECT_TRUE(there("-wal")) << "deleted while another connection had the file open";
    EXPECT_TRUE(there("-shm"));
    EXPECT_FALSE(send(*elsewhere, "d")) << "fenced out at epoch 2";
    elsewhere.reset();  // the last connection
    EXPECT_FALSE(there("-wal"));
    EXPECT_FALSE(there("-shm"));
    auto again = t.store.open(id, lease_epoch{4}).value();
    EXPECT_EQ(again->load().value().in(lane::steer).pending.size(), 3u);
    // A store that is stopping closes its files as they are: a stop is not made longer.
    t.store.stopping();
    again.reset();
    EXPECT_TRUE(there("-wal"));
    EXPECT_TRUE(there("-shm"));
}

// Passivation: a session's file is closed once its log is (the session was unloaded), so a
// worker's descriptors follow the sessions it has loaded, not every one it has touched.
TEST(SqliteStore, ClosingALogClosesItsFile) {
    temp_sqlite_store t;
    std::vector<std::unique_ptr<storage::session_log>> logs;
    for (int i = 0; i < 10; ++i) {
        auto log = t.store.open(session_id::parse("c" + std::to_string(i)).value(), lease_epoch{1})
                       .value();
        ASSERT_TRUE(log->load());
        logs.push_back(std::move(log));
    }
    EXPECT_EQ(t.store.open_files(), 10u);
    logs.resize(4);
    EXPECT_EQ(t.store.open_files(), 4u);
    logs.clear();
    EXPECT_EQ(t.store.open_files(), 0u);
}

TEST(SqliteStore, TheCatalogListsSessionsAndHasWork) {
    temp_sqlite_store t;
    auto busy = t.store.open(session_id::parse("busy").value(), lease_epoch{1}).value();
    auto idle = t.store.open(session_id::parse("idle").value(), lease_epoch{1}).value();
    session_state st = busy->load().value();
    ASSERT_TRUE(busy->enqueue(st, user_in(lane::follow_up, "f", "x"), unix_ms{1}));
    auto all = t.store.sessions({}).value();
    ASSERT_EQ(all.size(), 2u);
    storage::catalog_query needing;
    needing.needing_owner_by = unix_ms{0};
    auto working = t.store.sessions(needing).value();
    ASSERT_EQ(working.size(), 1u);
    EXPECT_EQ(working[0].id.str(), "busy");
    ASSERT_TRUE(t.store.remove(session_id::parse("busy").value(), lease_epoch{1}));
    EXPECT_TRUE(t.store.sessions(needing).value().empty());
    EXPECT_FALSE(std::filesystem::exists(t.store.path_of(session_id::parse("busy").value())));
}

// Issue 36: a turn raised its session's catalog row before its first commit and lowered it
// after its last, a catalog commit each (9% of the worker's CPU in the turn benchmark at
// `normal`). The row stays raised now until the catalog is next written or read: the next
// turn's raise, which the row already says, commits nothing, and the recovery sweep's read
// writes the row lowered first.
TEST(SqliteStore, ARowLeftRaisedByATurnCostsTheNextTurnNoCatalogCommit) {
    temp_sqlite_store t;
    const auto id = session_id::parse("busy").value();
    auto log = t.store.open(id, lease_epoch{1}).value();
    session_state st = log->load().value();
    storage::sqlite::db catalog((t.dir.path() / "catalog.sqlite").string(), "NORMAL", 5000,
                                storage::sqlite::if_missing::fail);
    auto commits_seen = [&] {  // changes with every commit of another connection
        auto& q = catalog.prepare("PRAGMA data_version");
        EXPECT_TRUE(q.step());
        const auto v = q.int64(0);
        q.reset();  // ends the read
        return v;
    };
    auto row_has_work = [&] {
        auto& q = catalog.prepare("SELECT has_work FROM sessions WHERE id = 'busy'");
        EXPECT_TRUE(q.step());
        const bool v = q.int64(0) == 1;
        q.reset();
        return v;
    };
    auto turn = [&](const char* item, std::int64_t at) {
        auto in = log->enqueue(st, user_in(lane::follow_up, item, "work"), unix_ms{at});
        ASSERT_TRUE(in);
        apply_actions(in->actions, st);
        EXPECT_TRUE(row_has_work()) << "raised before the commit";
        auto drained = log->drain(st, checkpoint::follow_up, unix_ms{at + 1});
        ASSERT_TRUE(drained);
        apply_actions(*drained, st);
        auto idle = log->mark_idle(st);
        ASSERT_TRUE(idle);
        apply_actions(*idle, st);
        ASSERT_FALSE(st.has_work);
    };
    turn("f1", 1);
    EXPECT_TRUE(row_has_work()) << "lowered later: it says too much meanwhile, never too little";
    const auto seen = commits_seen();
    turn("f2", 3);
    EXPECT_EQ(commits_seen(), seen) << "the second turn wrote the catalog";
    storage::catalog_query needing;
    needing.needing_owner_by = unix_ms{0};
    EXPECT_TRUE(t.store.sessions(needing).value().empty()) << "a read writes the rows first";
    EXPECT_FALSE(row_has_work());
    EXPECT_NE(commits_seen(), seen);
    turn("f3", 5);  // raised again, at once
    EXPECT_TRUE(row_has_work());
    log.reset();  // unloaded: its row is written
    EXPECT_FALSE(row_has_work());
}

// The sweep finds sessions with work that are not paused: unpausing a session that has work
// raises its row as work does, at once, before the file's commit (a worker killed after it
// would otherwise leave the row paused, and the session unseen by every sweep of the host).
TEST(SqliteStore, UnpausingASessionWithWorkRaisesItsRowAtOnce) {
    temp_sqlite_store t;
    auto log = t.store.open(session_id::parse("p").value(), lease_epoch{1}).value();
    session_state st = log->load().value();
    auto paused = log->set_paused(st, true);
    ASSERT_TRUE(paused);
    apply_actions(*paused, st);
    auto in = log->enqueue(st, user_in(lane::follow_up, "f1", "work"), unix_ms{1});
    ASSERT_TRUE(in);
    apply_actions(in->actions, st);
    auto resumed = log->set_paused(st, false);
    ASSERT_TRUE(resumed);
    apply_actions(*resumed, st);
    ASSERT_TRUE(st.has_work);
    storage::sqlite::db catalog((t.dir.path() / "catalog.sqlite").string(), "NORMAL", 5000,
                                storage::sqlite::if_missing::fail);
    auto& q = catalog.prepare("SELECT has_work, paused FROM sessions WHERE id = 'p'");
    ASSERT_TRUE(q.step());
    EXPECT_EQ(q.int64(0), 1);
    EXPECT_EQ(q.int64(1), 0) << "the row still says paused: no sweep would find the session";
    q.reset();
}

// The rows a read of the catalog writes first are bounded: the note that makes them
// max_unwritten writes them all, so that no write holds the catalog (and the host's leases in it)
// for long.
TEST(SqliteStore, TheCatalogKeepsFewerThanMaxUnwrittenRowsUnwritten) {
    temp_dir dir;
    const auto file = dir.path() / "catalog.sqlite";
    storage::sqlite::catalog catalog(file, 5000);
    storage::sqlite::db other(file.string(), "NORMAL", 5000, storage::sqlite::if_missing::fail);
    auto lowered = [&] {
        auto& q = other.prepare("SELECT count(*) FROM sessions WHERE has_work = 0");
        EXPECT_TRUE(q.step());
        const auto n = q.int64(0);
        q.reset();
        return n;
    };
    const std::size_t n = storage::sqlite::catalog::max_unwritten + 8;
    session_summary working;
    working.has_work = true;
    for (std::size_t i = 0; i < n; ++i) {
        const auto id = session_id::parse("s" + std::to_string(i)).value();
        catalog.note_opened(id, lease_epoch{1}, false);
        catalog.note(id, lease_epoch{1}, working, true);
    }
    EXPECT_EQ(lowered(), 0);
    for (std::size_t i = 0; i < n; ++i) {
        const auto id = session_id::parse("s" + std::to_string(i)).value();
        catalog.note(id, lease_epoch{1}, session_summary{}, false);  // its turn ended
        if (i + 2 == storage::sqlite::catalog::max_unwritten) {
            EXPECT_EQ(lowered(), 0) << "kept until a read, below the bound";
        }
    }
    EXPECT_EQ(lowered(), static_cast<std::int64_t>(storage::sqlite::catalog::max_unwritten))
        << "the note that reached the bound wrote every row kept, its own too";
    catalog.flush();
    EXPECT_EQ(lowered(), static_cast<std::int64_t>(n));
}

// Defect (issue 36): the catalog has no statistics, and without them SQLite answered the
// recovery sweep's query (every round, every worker) by walking the primary key for its
// timers' half: every session's row, 100,000 of them each round on a worker that idles. Each
// half must search its partial index.
TEST(SqliteStore, TheSweepsQuerySearchesThePartialIndexesNotEverySession) {
    temp_sqlite_store t;
    for (const char* id : {"a", "b", "c"}) {
        ASSERT_TRUE(t.store.open(session_id::parse(id).value(), lease_epoch{1}));
    }
    storage::catalog_query needing;
    needing.needing_owner_by = unix_ms{0};
    ASSERT_TRUE(t.store.sessions(needing));  // the catalog is there, with its rows
    storage::sqlite::db catalog((t.dir.path() / "catalog.sqlite").string(), "NORMAL", 5000,
                                storage::sqlite::if_missing::fail);
    const std::string plan_of =
        "EXPLAIN QUERY PLAN " + std::string(storage::sqlite::needing_owner_statement());
    auto& plan = catalog.prepare(plan_of.c_str());
    std::vector<std::string> searches;
    while (plan.step()) {
        const std::string detail(plan.text(3));
        EXPECT_EQ(detail.find("SCAN"), std::string::npos) << detail;
        EXPECT_EQ(detail.find("autoindex"), std::string::npos) << detail;
        if (detail.starts_with("SEARCH")) {
            searches.push_back(detail);
        }
    }
    ASSERT_EQ(searches.size(), 2u);
    EXPECT_NE(searches[0].find("USING INDEX sessions_has_work"), std::string::npos) << searches[0];
    EXPECT_NE(searches[1].find("USING INDEX sessions_next_timer"), std::string::npos)
        << searches[1];
}

// Issue 16: the catalog's rows are written without waiting for an fsync, so a power loss may
// take the last ones. After the machine restarted (another boot id), the store checks the rows
// against the session files before anything reads them: a session with work, or with a timer,
// whose row was lost or says otherwise is listed for the recovery sweep again.

}  // namespace wuhu::testing
