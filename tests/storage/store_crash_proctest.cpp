// Crash test: a child process appends and acknowledges operations as fast as it can; the parent
// kills it with SIGKILL at random moments, reopens the store, and checks that every acknowledged
// operation is present and the state loads cleanly. 50 rounds per backend.
#include "tests/storage/crash_rounds.hpp"
#include "tests/support/temp_dir.hpp"

namespace wuhu::testing {

TEST(StoreCrash, SqliteKeepsEveryAcknowledgedOperationAcrossSigkill) {
    temp_dir dir;
    crash_rounds("sqlite://" + dir.path().string(), "sqlite", 50);
}

}  // namespace wuhu::testing
