// What the client's commands, its watch and wuhuctl share: reading a reply's string field, and
// the refusal of a session id that is no subject token (made before anything is sent).
#pragma once

#include "client/client.hpp"

#include <boost/json/object.hpp>

#include <string>
#include <string_view>

namespace wuhu::client::detail {

// The string `key` of `o`, or empty.
inline std::string field(const boost::json::object& o, const char* key) {
    const auto* x = o.if_contains(key);
    return x != nullptr && x->is_string() ? std::string(x->as_string()) : std::string();
}

inline failure invalid_id(std::string_view sid) {
    return failure{"invalid_session_id", "session id must be 1-64 characters of [A-Za-z0-9_-]: \"" +
                                             std::string(sid) + "\""};
}

}  // namespace wuhu::client::detail
