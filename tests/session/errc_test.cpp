#include "session/errc.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace wuhu::session {

TEST(SessionErrc, EveryEnumeratorHasAStableCodeAndAMessage) {
    std::set<std::string> codes;
    for (int i = 0; i < errc_count; ++i) {
        auto e = static_cast<errc>(i);
        std::string code(code_name(e));
        EXPECT_NE(code, "unknown") << i;
        EXPECT_TRUE(codes.insert(code).second) << "duplicate code " << code;
        EXPECT_FALSE(make_error_code(e).message().empty());
        EXPECT_NE(make_error_code(e).message(), "unknown session error") << code;
    }
    EXPECT_EQ(code_name(errc::invalid_session_id), "invalid_session_id");
    EXPECT_EQ(code_name(errc::not_cancelable), "not_cancelable");
}

}  // namespace wuhu::session
