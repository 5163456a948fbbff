// The bodies of the requests of the NATS contract (DESIGN.md), decoded strictly at the edge,
// and decode_request(), which reads a whole request (subject and body) once.
//
// A decoded request is valid: ids parsed, lanes known, content within the configured size,
// valid UTF-8 and free of NUL. What is left to check needs the session's state (the rules,
// session/rules.hpp) or the worker (which tools exist).
#pragma once

#include "protocol/subjects.hpp"
#include "session/approval.hpp"
#include "session/codec.hpp"
#include "session/rules.hpp"
#include "session/settings.hpp"
#include "session/text.hpp"

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <variant>

namespace wuhu::protocol {

struct request_limits {
    std::size_t max_content_bytes = session::default_max_content_bytes;
    std::size_t max_request_bytes = 1024 * 1024;  // NATS max payload by default
};

// enqueue: {lane: "steer"|"followUp", id?, author?: {id, name, email?, kind}, content}
struct enqueue_request {
    session::lane in = session::lane::follow_up;
    std::optional<session::queue_item_id> id;
    session::author from = session::unknown_author{};
    std::string content;
};

// cancel: {lane, id}
struct cancel_request {
    session::lane in = session::lane::follow_up;
    session::queue_item_id id;
};

// system: {id?, source, content}
struct system_request {
    std::optional<session::queue_item_id> id;
    session::system_source source;
    std::string content;
};

// subscribe: {since?: {transcript, system, steer, followUp}}
struct subscribe_request {
    session::version_vector since;
};

// abort: {reason?, id?}
struct abort_request {
    std::string reason = "aborted";
    std::string id;  // idempotency key (empty: none)
};

// approve: {call, arguments?: {...}, author?}; reject: {call, message?, author?}; respond:
// {call, output, author?} (docs/protocol.md "Approvals"). `arguments` is a JSON object (the
// tool's schema is checked by the session's owner), `message` and `output` content.
struct decide_request {
    session::decision_input in;
};

// pause, resume, delete: {}
struct pause_request {};
struct resume_request {};
struct remove_request {};

// The states a row of the fleet view shows: the six loop states of a loaded session, then
// "unloaded" (its owner holds the lease but has not loaded it), "unowned" (no live lease) and
// "unreachable" (its owner did not answer in time).
inline constexpr std::array<std::string_view, 9> session_row_states{
    "idle",     "preparing", "inferring",  "executing_tools", "compacting", "awaiting_approval",
    "unloaded", "unowned",   "unreachable"};

// wuhu.admin.sessions: {state?, has_work?, owner?, limit?, after?, ids?, tenant?,
// awaiting_approval?, order?: "id" | "cost", after_cost?}; limit
// 1-1000 (100); state one of session_row_states; owner a worker id (valid_worker_id); ids:
// 1-1000 session ids; tenant (the fleet's own view with tenancy, and admin.local): only that
// tenant's sessions.
struct sessions_query {
    std::optional<std::string> state;
    std::optional<bool> has_work;
    std::optional<std::string> owner;
    std::size_t limit = 100;
    std::optional<session::session_id> after;  // the page starts after this session (its key)
    std::optional<std::vector<session::session_id>> ids;  // only these sessions
    std::optional<std::string> tenant;                    // only this tenant's sessions
    std::optional<bool> awaiting_approval;  // only sessions with (or without) calls waiting
    // "order": "cost": the highest cost first (ties by id), paged from (`after_cost`, `after`),
    // the reply's `next_cost` and `next`; with no owner or loop state filter.
    bool by_cost = false;
    std::optional<std::uint64_t> after_cost;
};

// How a fleet view names sessions in `after` and `ids`: by their ids (a tenant's view, or a
// fleet without tenancy), or by their keys (`<tenant>.<id>`: the fleet's own view of every
// tenant, and admin.local between workers).
enum class session_names { ids, keys };

// Raw body -> JSON object: request_too_large is reported as content_too_large, then
// invalid_utf8, invalid_json, and invalid_type when the body is not an object. An empty body
// is read as {}.
session::decoded<boost::json::value> parse_body(std::string_view raw,
                                                const request_limits& limits);

session::decoded<enqueue_request> decode_enqueue(const boost::json::value& body,
                                                 const request_limits& limits);
session::decoded<cancel_request> decode_cancel(const boost::json::value& body);
session::decoded<system_request> decode_system(const boost::json::value& body,
                                               const request_limits& limits);
session::decoded<subscribe_request> decode_subscribe(const boost::json::value& body);
// configure: any subset of the settings fields.
session::decoded<session::settings_update> decode_configure(const boost::json::value& body,
                                                            const request_limits& limits);
session::decoded<abort_request> decode_abort(const boost::json::value& body);
session::decoded<decide_request> decode_decide(session::decision what,
                                               const boost::json::value& body,
                                               const request_limits& limits);
session::decoded<sessions_query> decode_sessions_query(
    const boost::json::value& body, session_names names = session_names::ids);
session::decoded<void> decode_empty(const boost::json::value& body);
// A tenant budgets file (--tenant-budgets): {"<tenant>": {budget as configure's}, ...}, each
// tenant a valid_tenant name.
session::decoded<std::map<std::string, session::budget, std::less<>>> decode_tenant_budgets(
    const boost::json::value& file);

// What a session request asks for. Enqueue and system both become the input to enqueue (an
// item without an id gets one from `new_id`, called only then).
using request_body =
    std::variant<session::enqueue_input, cancel_request, session::settings_update, abort_request,
                 pause_request, resume_request, subscribe_request, remove_request, decide_request>;

struct request {
    route to;
    request_body body;
};

// A whole request: its subject read by the layout (`to`), then its body, each checked once.
// The error is what the reply says (error_reply in protocol/replies.hpp).
session::decoded<request> decode_request(session::result<route> to, std::string_view body,
                                         const request_limits& limits,
                                         const std::function<session::queue_item_id()>& new_id);
// The same for a request on `subject` (subject_layout::parse_request).
session::decoded<request> decode_request(std::string_view subject, const subject_layout& layout,
                                         std::string_view body, const request_limits& limits,
                                         const std::function<session::queue_item_id()>& new_id);

}  // namespace wuhu::protocol
