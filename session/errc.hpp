// Error codes of the session domain.
//
// Every expected failure that depends on input (a bad id, an unknown lane, oversized content) or
// on the session's state (cancel of the system lane, an unknown item) is one of these. Each has a
// stable wire name (`code` in an error reply) and a readable message; both tables live in
// errc.cpp and a test checks that every enumerator has both.
#pragma once

#include <boost/system/error_code.hpp>
#include <boost/system/result.hpp>

#include <string_view>

namespace wuhu::session {

enum class errc {
    ok = 0,
    invalid_session_id,
    invalid_item_id,
    invalid_participant_id,
    invalid_tool_call_id,
    invalid_json,
    invalid_type,
    missing_field,
    unknown_field,
    invalid_lane,
    invalid_source,
    invalid_author,
    invalid_utf8,
    invalid_content,
    content_too_large,
    invalid_settings,
    invalid_version,
    not_cancelable,
    item_not_found,
    unknown_tool_call,
    tool_call_not_started,
    tool_call_finished,
    nothing_to_compact,
    input_too_large,
    invalid_entry,
    invalid_query,
    unknown_command,
    session_not_found,
    invalid_tenant,
    not_awaiting_approval,  // the call asks for no decision (none was asked, or it has a result)
    already_decided,        // the call has another decision (the same one is a duplicate)
    invalid_arguments,      // approve's edited arguments fail the tool's schema
    // Bounds (DESIGN.md "Bounds"): refusals that change nothing, retried by the client.
    lane_full,       // the lane holds its limit of pending items or bytes
    overloaded,      // the worker or the session has its limit of requests waiting
    rate_limited,    // the tenant's (or fleet's) requests or new sessions per second
    quota_exceeded,  // the tenant's (or fleet's) limit of sessions
};

inline constexpr int errc_count = static_cast<int>(errc::quota_exceeded) + 1;

// Whether a refusal is one of the bounds' (retried later, nothing changed).
inline bool is_refusal(errc e) {
    return e == errc::lane_full || e == errc::overloaded || e == errc::rate_limited ||
           e == errc::quota_exceeded;
}

// The stable wire name, e.g. "invalid_session_id". Never changes once released.
std::string_view code_name(errc e);

const boost::system::error_category& session_category() noexcept;

inline boost::system::error_code make_error_code(errc e) noexcept {
    return {static_cast<int>(e), session_category()};
}

template <class T>
using result = boost::system::result<T>;

}  // namespace wuhu::session

namespace boost::system {
template <>
struct is_error_code_enum<wuhu::session::errc> : std::true_type {};
}  // namespace boost::system
