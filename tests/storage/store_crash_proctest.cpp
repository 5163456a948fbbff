// Crash test: a child process appends and acknowledges operations as fast as it can; the parent
// kills it with SIGKILL at random moments, reopens the store, and checks that every acknowledged
// operation is present and the state loads cleanly. 50 rounds per backend.
#include "tests/storage/crash_rounds.hpp"
#include "storage/errc.hpp"
#include "storage/sqlite_store.hpp"
#include "tests/storage/share_rounds.hpp"
#include "tests/storage/store_for.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

namespace wuhu::testing {

namespace {

// The text of a file ("" when there is none).
std::string text_of(const std::string& path) {
    std::ifstream f(path);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Waits (30 s at most) until the child printed `line` on its stdout (`out`); false when it
// exited or the time ran out first.
bool printed_line(pid_t child, const std::string& out, const std::string& line) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (text_of(out).find(line + "\n") == std::string::npos) {
        if (std::chrono::steady_clock::now() > give_up || waitpid(child, nullptr, WNOHANG) != 0) {
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// Whether the session's WAL and shared memory are on disk: {-wal, -shm}.
std::pair<bool, bool> wal_and_shm(const std::filesystem::path& data_dir, const std::string& sid) {
    const auto file = data_dir / "sessions" / (sid + ".sqlite");
    return {std::filesystem::exists(file.string() + "-wal"),
            std::filesystem::exists(file.string() + "-shm")};
}

}  // namespace

TEST(StoreCrash, SqliteKeepsEveryAcknowledgedOperationAcrossSigkill) {
    temp_dir dir;
    crash_rounds("sqlite://" + dir.path().string(), "sqlite", 50);
}

// One process creates, writes and removes a session again and again while another opens it.
// Each open meets the files as they are unlinked and created again; it gets the session, or
// not_found, or lease_lost, and neither process ever sees an error of the store (before the
// open and the unlink took turns, a connection could pair the old file with the new one's
// shared memory: load then read another owner's epoch, or the process died of SIGBUS).
TEST(StoreCrash, SqliteOpeningWhileAnotherProcessRemovesAndCreatesAgainNeverFails) {
    temp_dir dir;
    const std::string url = "sqlite://" + dir.path().string();
    auto store = store_for(url);
    const auto sid = session::session_id::parse("churn").value();
    const std::string log = dir.path().string() + "/child.log";
    pid_t child = spawn(WUHU_CRASH_CHILD, {"churn", url, sid.str(), "300"}, log);
    ASSERT_GT(child, 0);
    int opened = 0;
    std::map<std::string, int> refusals;
    int status = -1;
    for (;;) {
        auto r = store->open(sid, session::lease_epoch{1}, storage::open_mode::existing);
        if (r) {
            ++opened;
        } else {
            ++refusals[std::string(
                storage::code_name(static_cast<storage::errc>(r.error().value())))];
        }
        int st = 0;
        if (waitpid(child, &st, WNOHANG) == child) {
            status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
    }
    const std::string said = text_of(log);
    EXPECT_EQ(status, 0) << said;
    for (const auto& [code, n] : refusals) {
        EXPECT_TRUE(code == "lease_lost" || code == "not_found") << n << " x " << code;
    }
    EXPECT_GT(refusals["lease_lost"] + refusals["not_found"], 0) << "the opener never met it";
}

// Two processes load and unload one session by turns, as two workers of a host do. The last
// connection to close deletes the file's WAL and shared memory: never while the other process
// has them open (it would then write a WAL nobody reads, or map memory another connection
// truncates). Every acknowledged item is in the file, and neither process meets an error of
// the store.
TEST(StoreCrash, SqliteTwoProcessesLoadingAndUnloadingOneSessionLoseNothing) {
    temp_dir dir;
    const std::string url = "sqlite://" + dir.path().string();
    const auto sid = session::session_id::parse("shared").value();
    const std::string log = dir.path().string() + "/child.log";
    const std::string out = dir.path().string() + "/child.out";
    const std::string go = dir.path().string() + "/go";
    constexpr int items = 100;
    pid_t child = spawn(WUHU_CRASH_CHILD, {"share", url, sid.str(), std::to_string(items), go},
                        spawn_options{log, std::nullopt, out});
    ASSERT_GT(child, 0);
    shared_rounds mine;
    {
        auto store = store_for(url);
        ASSERT_TRUE(printed_line(child, out, "ready")) << text_of(log);
        std::ofstream(go).put('\n');  // both start at once
        mine = share_rounds(*store, sid, items, 1, "parent-");
    }
    const int status = wait_exit(child, std::chrono::seconds(90));
    const std::string said = text_of(log);
    ASSERT_EQ(status, 0) << said;
    EXPECT_EQ(mine.failure, "");
    std::set<std::string> acknowledged(mine.acknowledged.begin(), mine.acknowledged.end());
    std::istringstream printed(text_of(out));
    for (std::string line; std::getline(printed, line);) {
        if (line != "ready") {
            acknowledged.insert(line);
        }
    }
    EXPECT_EQ(acknowledged.size(), 2u * items);
    int child_fenced = -1;
    if (const auto at = said.find("fenced "); at != std::string::npos) {
        child_fenced = std::stoi(said.substr(at + 7));
    }
    ASSERT_GE(child_fenced, 0) << said;
    EXPECT_GT(mine.fenced + child_fenced, 0) << "the two processes never met";
    {
        auto store = store_for(url);
        auto last = store->open(sid, session::lease_epoch{std::uint64_t{1} << 62}).value();
        auto state = last->load().value();
        std::set<std::string> present;
        const auto& steer = state.in(session::lane::steer);
        for (std::size_t i = 0; i < steer.pending.size(); ++i) {
            present.insert(steer.pending_item(i).id.str());
        }
        for (const auto& item : acknowledged) {
            EXPECT_TRUE(present.count(item) == 1) << item << " was acknowledged and is lost";
        }
    }
    // Unloaded with nobody else there: the file is alone on disk.
    EXPECT_EQ(wal_and_shm(dir.path(), sid.str()), std::make_pair(false, false));
}

// A process keeps a session's file open (a stale owner, say) while another loads and unloads
// the session: the unload leaves the WAL and shared memory, which the first still uses; that
// one's next command is fenced out, and once it is gone an unload deletes them. On files
// SQLite made too: their first sync went through a descriptor of the store's own, and closing
// it dropped every lock the process held on the file (fcntl locks are the process's), so the
// unload deleted the WAL and shared memory from under the other connection.
TEST(StoreCrash, SqliteAnUnloadNeverDeletesTheWalOfAFileAnotherProcessHasOpen) {
    for (const std::string scheme : {"sqlite-no-image://", "sqlite://"}) {
        SCOPED_TRACE(scheme);
        temp_dir dir;
        const std::string url = scheme + dir.path().string();
        const auto sid = session::session_id::parse("held").value();
        const std::string log = dir.path().string() + "/child.log";
        const std::string out = dir.path().string() + "/child.out";
        const std::string go = dir.path().string() + "/go";
        pid_t child = spawn(WUHU_CRASH_CHILD, {"hold", url, sid.str(), go},
                            spawn_options{log, std::nullopt, out});
        ASSERT_GT(child, 0);
        ASSERT_TRUE(printed_line(child, out, "opened")) << text_of(log);
        auto store = store_for(url);
        {
            auto mine = store->open(sid, session::lease_epoch{2}).value();
            ASSERT_TRUE(mine->load());
        }
        EXPECT_EQ(wal_and_shm(dir.path(), sid.str()), std::make_pair(true, true))
            << "deleted while another process had the file open";
        std::ofstream(go).put('\n');
        ASSERT_EQ(wait_exit(child, std::chrono::seconds(60)), 0) << text_of(log);
        EXPECT_EQ(text_of(out), "opened\nlease_lost\n");
        {
            auto mine = store->open(sid, session::lease_epoch{3}).value();
            ASSERT_TRUE(mine->load());
        }
        EXPECT_EQ(wal_and_shm(dir.path(), sid.str()), std::make_pair(false, false))
            << "the last connection kept them";
    }
}

// Issue 31, defect 9: the catalog row that tells the sweep a session has work was written after
// the session file's commit; a worker killed between the two left durable work that no sweep
// found (until a request came, or the machine rebooted). The row is now raised before the
// commit: a process that dies right after the file's commit leaves a row that says so.
TEST(StoreCrash, SqliteAProcessKilledRightAfterACommitLeavesItsWorkFoundByTheSweep) {
    temp_dir dir;
    const std::string log = dir.path().string() + "/child.log";
    pid_t child = spawn(WUHU_CRASH_CHILD, {"die-after-commit", dir.path().string(), "worked"}, log);
    ASSERT_GT(child, 0);
    ASSERT_EQ(wait_exit(child, std::chrono::seconds(60)), 9) << text_of(log);
    // Another worker's sweep, on the store as the child left it (nothing loaded since).
    storage::sqlite_options o;
    o.data_dir = dir.path();
    storage::sqlite_store store(o);
    const auto sid = session::session_id::parse("worked").value();
    storage::catalog_query q;
    q.needing_owner_by = session::unix_ms{1};
    auto found = store.sessions(q);
    ASSERT_TRUE(found) << found.error().message();
    bool listed = false;
    for (const auto& e : *found) {
        listed |= e.id == sid;
    }
    {
        auto mine = store.open(sid, session::lease_epoch{3}).value();
        EXPECT_TRUE(mine->load().value().has_work) << "the file holds the enqueued item";
    }
    EXPECT_TRUE(listed) << "the sweep finds the session's work";
}

}  // namespace wuhu::testing
