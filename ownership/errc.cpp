#include "ownership/errc.hpp"

#include "session/error_table.hpp"

namespace wuhu::ownership {
namespace {

constexpr std::array<session::error_text, errc_count> texts{{
    {"ok", "success"},
    {"owner_changed", "the session changed owner while the request was forwarded; retry"},
    {"not_held", "this worker does not hold the session's lease"},
    {"worker_stopping", "the worker is stopping; retry (another worker takes the session)"},
}};

const session::table_category<errc_count>& category() {
    static const session::table_category<errc_count> instance("wuhu.ownership", texts,
                                                              "unknown ownership error");
    return instance;
}

}  // namespace

std::string_view code_name(errc e) {
    return category().code(static_cast<int>(e));
}

const boost::system::error_category& ownership_category() noexcept {
    return category();
}

}  // namespace wuhu::ownership
