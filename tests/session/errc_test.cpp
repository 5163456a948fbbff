#include "session/errc.hpp"
#include "tests/support/error_table.hpp"

namespace wuhu::session {

TEST(SessionErrc, EveryEnumeratorHasAStableCodeAndAMessage) {
    testing::expect_every_enumerator_coded<errc>(errc_count, "unknown session error");
    EXPECT_EQ(code_name(errc::invalid_session_id), "invalid_session_id");
    EXPECT_EQ(code_name(errc::not_cancelable), "not_cancelable");
}

}  // namespace wuhu::session
