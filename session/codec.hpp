// JSON codec (Boost.JSON) for every external type of the session domain.
//
// Encoding is total. Decoding is strict: a wrong type, a missing required field, an unknown
// field, an unknown lane, invalid UTF-8, oversized content or a bad id is a decode_error with a
// stable code (errc) and the path of the offending field. Stores use the same codec for what
// they persist, so there is one wire shape per type.
#pragma once

#include "session/patch.hpp"
#include "session/state.hpp"

#include <boost/json.hpp>
#include <boost/system/result.hpp>

#include <string>

namespace wuhu::session {

struct decode_error {
    errc code = errc::invalid_json;
    std::string field;  // dotted path, e.g. "author.kind"; empty for the whole body
    // "<errc message> (field: author.kind)"
    std::string message() const;
    bool operator==(const decode_error&) const = default;
};

[[noreturn]] void throw_exception_from_error(const decode_error& e,
                                             const boost::source_location& loc);

template <class T>
using decoded = boost::system::result<T, decode_error>;

// ---- encoders
boost::json::value to_json(const author& a);
boost::json::value to_json(const queue_item& q);
boost::json::value to_json(const journal_entry& j);
boost::json::value to_json(const entry& e);
boost::json::value to_json(const settings& s);
boost::json::value to_json(const status& s);
// An inference's tokens (in an assistant entry), and a session's ledger (in its status:
// the tokens, then `cost` in nano-dollars, `turns`, `tool_calls`).
boost::json::value to_json(const token_usage& u);
boost::json::value to_json(const usage_totals& t);
boost::json::value to_json(const version_vector& v);
boost::json::value to_json(const patch& p);
boost::json::value to_json(const timer& t);
boost::json::value to_json(const action& a);

// ---- decoders (strict)
// `path`: where the author sits in the request (errors name `author.email`, not `email`).
decoded<author> author_from_json(const boost::json::value& v, const std::string& path = "");
decoded<queue_item> queue_item_from_json(const boost::json::value& v);
decoded<journal_entry> journal_entry_from_json(const boost::json::value& v);
decoded<entry> entry_from_json(const boost::json::value& v);
decoded<settings> settings_from_json(const boost::json::value& v);
// A budget: {"tokens"?, "cost_usd"? (dollars: a decimal string, or a number), "turns"?,
// "tool_calls"?, "soft_percent"? (0-100)}, each absent or 0 for the fleet's default.
boost::json::value to_json(const budget& b);
decoded<budget> budget_from_json(const boost::json::value& v, const std::string& path);
// {"tools": {"<tool>" | "*": "always" | "never"}, "deadline_ms"?, "on_deadline"?: "approve" |
// "reject"}
boost::json::value to_json(const approval_settings& a);
// {call, tool, decision, by, arguments (approve) | message, by_deadline?}: an approval_decided
// entry's fields.
boost::json::value to_json(const approval_decided& d);
decoded<approval_settings> approval_from_json(const boost::json::value& v, const std::string& path);
decoded<status> status_from_json(const boost::json::value& v);
decoded<usage_totals> usage_totals_from_json(const boost::json::value& v);
decoded<version_vector> version_from_json(const boost::json::value& v);
decoded<patch> patch_from_json(const boost::json::value& v);
decoded<timer> timer_from_json(const boost::json::value& v);
decoded<action> action_from_json(const boost::json::value& v);

// Parses raw bytes as JSON: invalid UTF-8 is invalid_utf8, anything else unparsable is
// invalid_json. Content inside strings is checked again by the type decoders.
decoded<boost::json::value> parse_json(std::string_view raw);

}  // namespace wuhu::session
