// Error codes of the storage layer.
//
// lease_lost: a newer owner holds the session (its epoch is higher), or it was removed at the
// caller's epoch or later; the caller must drop the session. conflict: the caller's state is not
// the stored state (a bug, or a writer that bypassed the fence); the caller must drop the session
// and reload. unavailable: the backend failed or its outcome is unknown; persist-first says the
// caller must not guess: it drops the session and the next load rebuilds from storage. corrupt:
// stored data does not decode. not_found: open(existing) of a session that does not exist (nothing
// was created). closed: the owner closed the session's loop under the command (it deleted the
// session, lost its lease, or loaded a newer one): nothing changed, and the command is routed
// again.
#pragma once

#include <boost/system/error_code.hpp>

#include <string_view>

namespace wuhu::storage {

enum class errc {
    ok = 0,
    lease_lost,
    conflict,
    unavailable,
    corrupt,
    not_found,
    closed,
};

inline constexpr int errc_count = static_cast<int>(errc::closed) + 1;

std::string_view code_name(errc e);
const boost::system::error_category& storage_category() noexcept;

inline boost::system::error_code make_error_code(errc e) noexcept {
    return {static_cast<int>(e), storage_category()};
}

}  // namespace wuhu::storage

namespace boost::system {
template <>
struct is_error_code_enum<wuhu::storage::errc> : std::true_type {};
}  // namespace boost::system
