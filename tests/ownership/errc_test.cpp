#include "ownership/errc.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace wuhu::ownership {

TEST(OwnershipErrc, EveryEnumeratorHasAStableCodeAndAMessage) {
    std::set<std::string> codes;
    for (int i = 0; i < errc_count; ++i) {
        auto e = static_cast<errc>(i);
        std::string code(code_name(e));
        EXPECT_NE(code, "unknown");
        EXPECT_TRUE(codes.insert(code).second) << code;
        EXPECT_FALSE(make_error_code(e).message().empty()) << code;
        EXPECT_NE(make_error_code(e).message(), "unknown ownership error") << code;
    }
    EXPECT_EQ(code_name(errc::owner_changed), "owner_changed");
    EXPECT_EQ(code_name(errc::worker_stopping), "worker_stopping");
}

}  // namespace wuhu::ownership
