// Error codes of ownership (routing a request to a session's owner).
#pragma once

#include <boost/system/error_code.hpp>

#include <string_view>

namespace wuhu::ownership {

enum class errc {
    ok = 0,
    // A forwarded request reached a worker that no longer owns the session and cannot take it
    // (another live worker does): the client retries and the request is routed afresh.
    owner_changed,
    // This worker does not hold the session's lease (internal: the registry asked for an epoch
    // it was not given).
    not_held,
    // The worker is stopping: it answers for the sessions it still has loaded, but takes no
    // new one. The client retries; another worker takes the session.
    worker_stopping,
};

inline constexpr int errc_count = static_cast<int>(errc::worker_stopping) + 1;

std::string_view code_name(errc e);
const boost::system::error_category& ownership_category() noexcept;

inline boost::system::error_code make_error_code(errc e) noexcept {
    return {static_cast<int>(e), ownership_category()};
}

}  // namespace wuhu::ownership

namespace boost::system {
template <>
struct is_error_code_enum<wuhu::ownership::errc> : std::true_type {};
}  // namespace boost::system
