#include "storage/errc.hpp"

#include "session/error_table.hpp"

namespace wuhu::storage {
namespace {

constexpr std::array<session::error_text, errc_count> texts{{
    {"ok", "success"},
    {"lease_lost", "a newer owner holds this session; this worker must drop it"},
    {"conflict", "the owner's state does not match the stored state"},
    {"unavailable", "the store failed or the outcome of the write is unknown"},
    {"corrupt", "stored session data could not be decoded"},
    {"not_found", "no such session"},
    {"closed", "the session was closed under this command (deleted, or moved): nothing changed"},
}};

const session::table_category<errc_count>& category() {
    static const session::table_category<errc_count> instance("wuhu.storage", texts,
                                                              "unknown storage error");
    return instance;
}

}  // namespace

std::string_view code_name(errc e) {
    return category().code(static_cast<int>(e));
}

const boost::system::error_category& storage_category() noexcept {
    return category();
}

}  // namespace wuhu::storage
