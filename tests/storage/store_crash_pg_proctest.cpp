// The SIGKILL crash test against PostgreSQL (see store_crash_proctest.cpp).
#include "tests/storage/crash_rounds.hpp"
#include "tests/support/pg_env.hpp"

namespace wuhu::testing {

TEST(StoreCrash, PostgresKeepsEveryAcknowledgedOperationAcrossSigkill) {
    const std::string schema = fresh_schema("crash");
    crash_rounds("postgres:" + schema + ":" + pg_dsn(), "postgres", 50);
    drop_schema(schema);
}

}  // namespace wuhu::testing
