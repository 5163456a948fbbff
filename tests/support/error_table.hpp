// The check every module's error table passes: each enumerator has a code of its own (never
// "unknown") and a message of its own (never the table's message for unknown values).
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

namespace wuhu::testing {

template <class Errc>
void expect_every_enumerator_coded(int count, std::string_view unknown_message) {
    std::set<std::string> codes;
    for (int i = 0; i < count; ++i) {
        auto e = static_cast<Errc>(i);
        std::string code(code_name(e));
        EXPECT_NE(code, "unknown") << i;
        EXPECT_TRUE(codes.insert(code).second) << "duplicate code " << code;
        EXPECT_FALSE(make_error_code(e).message().empty()) << code;
        EXPECT_NE(make_error_code(e).message(), unknown_message) << code;
    }
}

}  // namespace wuhu::testing
