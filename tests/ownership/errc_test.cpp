#include "ownership/errc.hpp"
#include "tests/support/error_table.hpp"

namespace wuhu::ownership {

TEST(OwnershipErrc, EveryEnumeratorHasAStableCodeAndAMessage) {
    testing::expect_every_enumerator_coded<errc>(errc_count, "unknown ownership error");
    EXPECT_EQ(code_name(errc::owner_changed), "owner_changed");
    EXPECT_EQ(code_name(errc::worker_stopping), "worker_stopping");
}

}  // namespace wuhu::ownership
