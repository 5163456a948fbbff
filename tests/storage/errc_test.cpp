#include "storage/errc.hpp"
#include "tests/support/error_table.hpp"

namespace wuhu::storage {

TEST(StorageErrc, EveryEnumeratorHasAStableCodeAndAMessage) {
    testing::expect_every_enumerator_coded<errc>(errc_count, "unknown storage error");
    EXPECT_EQ(code_name(errc::lease_lost), "lease_lost");
}

}  // namespace wuhu::storage
