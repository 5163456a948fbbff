#include "storage/errc.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace wuhu::storage {

TEST(StorageErrc, EveryEnumeratorHasAStableCodeAndAMessage) {
    std::set<std::string> codes;
    for (int i = 0; i < errc_count; ++i) {
        auto e = static_cast<errc>(i);
        std::string code(code_name(e));
        EXPECT_NE(code, "unknown");
        EXPECT_TRUE(codes.insert(code).second) << code;
        EXPECT_NE(make_error_code(e).message(), "unknown storage error") << code;
    }
    EXPECT_EQ(code_name(errc::lease_lost), "lease_lost");
}

}  // namespace wuhu::storage
