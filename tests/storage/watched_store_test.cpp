#include "storage/faulty_store.hpp"
#include "storage/memory_store.hpp"
#include "storage/watched_store.hpp"
#include "tests/storage/conformance.hpp"

namespace wuhu::testing {

namespace {

struct reports {
    std::vector<bool> seen;  // true: back, false: away
    storage::watched_store::listener listener() {
        return [this](bool available, const boost::system::error_code&) {
            seen.push_back(available);
        };
    }
};

}  // namespace

TEST(WatchedStore, AnOutageIsReportedOnceEachWayHoweverManyOperationsFail) {
    storage::memory_store inner;
    storage::faulty_store faulty(inner);
    reports r;
    storage::watched_store store(faulty, r.listener());
    auto log = store.open(session_id::parse("s").value(), lease_epoch{1}).value();
    session_state s = log->load().value();
    faulty.fail_next_commits(3);
    for (int i = 0; i < 3; ++i) {
        EXPECT_FALSE(log->enqueue(s, user_in(lane::steer, "a", "x"), unix_ms{1}));
    }
    EXPECT_FALSE(store.available());
    EXPECT_TRUE(log->enqueue(s, user_in(lane::steer, "a", "x"), unix_ms{1}));
    EXPECT_TRUE(store.available());
    EXPECT_EQ(r.seen, (std::vector<bool>{false, true}));
}

// Defect: at the edge of a PostgreSQL outage, an operation that was under way on a connection
// whose backend had not exited yet succeeded after another had failed, and the worker logged
// "unavailable", "back", "unavailable" for one outage. An outcome of an operation that began
// before the last reported change does not change the state again.
TEST(WatchedStore, AnOperationUnderWayAcrossAChangeDoesNotReportItAgain) {
    storage::memory_store inner;
    reports r;
    storage::watched_store store(inner, r.listener());
    const auto before_outage = store.changes();
    store.note(storage::errc::unavailable, store.changes());
    store.note({}, before_outage);  // began before the outage was seen: old news
    EXPECT_FALSE(store.available());
    const auto during_outage = store.changes();
    store.note({}, store.changes());  // began during the outage: the store is back
    store.note(storage::errc::unavailable, during_outage);  // began before it came back
    EXPECT_TRUE(store.available());
    EXPECT_EQ(r.seen, (std::vector<bool>{false, true}));
    store.note(storage::errc::unavailable, store.changes());  // a new outage
    EXPECT_EQ(r.seen, (std::vector<bool>{false, true, false}));
}

}  // namespace wuhu::testing
