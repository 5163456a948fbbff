// Crash test: a child process appends and acknowledges operations as fast as it can; the parent
// kills it with SIGKILL at random moments, reopens the store, and checks that every acknowledged
// operation is present and the state loads cleanly. 50 rounds per backend.
#include "tests/storage/crash_rounds.hpp"
#include "storage/errc.hpp"
#include "tests/storage/store_for.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

#include <map>

namespace wuhu::testing {

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
    std::ifstream f(log);
    std::string said((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(status, 0) << said;
    for (const auto& [code, n] : refusals) {
        EXPECT_TRUE(code == "lease_lost" || code == "not_found") << n << " x " << code;
    }
    EXPECT_GT(refusals["lease_lost"] + refusals["not_found"], 0) << "the opener never met it";
}

}  // namespace wuhu::testing
