// What the server answers a request: its reply messages, in order (one, or the chunks of a
// large subscribe reply; none when it was forwarded to the session's owner, which answers), and
// its outcome for the metrics, as a value: "ok" or the error reply's code (a bounded set), never
// read back from the reply's text.
#pragma once

#include "protocol/replies.hpp"
#include "session/error_table.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace wuhu::broker {

struct answer {
    std::vector<std::string> replies;
    std::string_view outcome;  // "ok", an error code (static), or empty: forwarded

    static answer ok(std::string reply) { return {{std::move(reply)}, "ok"}; }
    static answer ok(std::vector<std::string> replies) { return {std::move(replies), "ok"}; }
    // `code` must be a string that lives as long as the program (a literal, an error table's).
    static answer error(std::string_view code, std::string_view message) {
        return {{protocol::error_reply(code, message)}, code};
    }
    static answer error(const boost::system::error_code& ec) {
        return {{protocol::error_reply(ec)}, session::wire_code(ec)};
    }
    static answer error(const session::decode_error& e) {
        return {{protocol::error_reply(e)}, session::code_name(e.code)};
    }
    // A refusal with its retry hint (nullopt: none).
    static answer refused(const boost::system::error_code& ec,
                          std::optional<std::chrono::milliseconds> retry_after) {
        return {{protocol::error_reply(ec, retry_after)}, session::wire_code(ec)};
    }
    // Forwarded to the session's owner: nothing to send, nothing to count here.
    static answer forwarded() { return {}; }
};

}  // namespace wuhu::broker
