// Bodies of the commands of the NATS contract (DESIGN.md), decoded strictly at the edge.
//
// A decoded request is valid: ids parsed, lanes known, content within the configured size,
// valid UTF-8 and free of NUL. What is left to check needs the session's state (rules.hpp).
#pragma once

#include "session/codec.hpp"
#include "session/rules.hpp"
#include "session/text.hpp"

#include <array>
#include <optional>

namespace wuhu::session {

struct request_limits {
    std::size_t max_content_bytes = default_max_content_bytes;
    std::size_t max_request_bytes = 1024 * 1024;  // NATS max payload by default
};

// enqueue: {lane: "steer"|"followUp", id?, author?: {id, name, email?, kind}, content}
struct enqueue_request {
    lane in = lane::follow_up;
    std::optional<queue_item_id> id;
    author from = unknown_author{};
    std::string content;
};

// cancel: {lane, id}
struct cancel_request {
    lane in = lane::follow_up;
    queue_item_id id;
};

// system: {id?, source, content}
struct system_request {
    std::optional<queue_item_id> id;
    system_source source;
    std::string content;
};

// subscribe: {since?: {transcript, system, steer, followUp}}
struct subscribe_request {
    version_vector since;
};

// configure: any subset of the settings fields; the rest keep their value.
struct configure_request {
    std::optional<std::string> model;
    std::optional<std::string> system_prompt;
    std::optional<std::vector<std::string>> tools;
    std::optional<std::uint64_t> context_limit;
    std::optional<std::uint64_t> compaction_buffer;
    std::optional<std::uint64_t> keep_recent_tokens;
    std::optional<int> utc_offset_minutes;

    // The settings after this update; invalid_settings when out of range.
    result<settings> applied_to(settings current) const;
};

// The states a row of the fleet view shows: the five loop states of a loaded session, then
// "unloaded" (its owner holds the lease but has not loaded it), "unowned" (no live lease) and
// "unreachable" (its owner did not answer in time).
inline constexpr std::array<std::string_view, 8> session_row_states{
    "idle",       "preparing", "inferring", "executing_tools",
    "compacting", "unloaded",  "unowned",   "unreachable"};

// wuhu.admin.sessions: {state?, has_work?, owner?, limit?, after?}; limit 1-1000 (100); state
// one of session_row_states.
struct sessions_query {
    std::optional<std::string> state;
    std::optional<bool> has_work;
    std::optional<std::string> owner;
    std::size_t limit = 100;
    std::optional<session_id> after;  // the page starts after this id
};

// abort: {reason?}
struct abort_request {
    std::string reason = "aborted";
};

// Raw body -> JSON object: request_too_large is reported as content_too_large, then
// invalid_utf8, invalid_json, and invalid_type when the body is not an object. An empty body
// is read as {}.
decoded<boost::json::value> parse_body(std::string_view raw, const request_limits& limits);

decoded<enqueue_request> decode_enqueue(const boost::json::value& body,
                                        const request_limits& limits);
decoded<cancel_request> decode_cancel(const boost::json::value& body);
decoded<system_request> decode_system(const boost::json::value& body, const request_limits& limits);
decoded<subscribe_request> decode_subscribe(const boost::json::value& body);
decoded<configure_request> decode_configure(const boost::json::value& body,
                                            const request_limits& limits);
decoded<abort_request> decode_abort(const boost::json::value& body);
decoded<sessions_query> decode_sessions_query(const boost::json::value& body);
// pause, resume, delete: {}
decoded<void> decode_empty(const boost::json::value& body);

}  // namespace wuhu::session
