// The Model Context Protocol's messages, as the worker (an MCP client) writes and reads them
// (docs/tools.md "MCP servers"; issue 34). Pure: no IO. The transport (mcp/client.hpp)
// posts what these functions write and feeds what comes back into a reader.
//
// Streamable HTTP: each JSON-RPC message the client sends is one HTTP POST; a request's answer
// is either one JSON object (Content-Type application/json) or a server-sent event stream
// (text/event-stream) whose events carry JSON-RPC messages: notifications (progress), requests
// of the server's, and, last, the response. `reader` takes such a body in whatever pieces the
// connection delivers and hands each message over as it completes.
//
// Everything read is hostile: a message that is not JSON-RPC 2.0, a response without an id, a
// body past the size limit are errors that say what was wrong, never a crash.
#pragma once

#include "providers/sse.hpp"
#include "tools/tools.hpp"

#include <boost/json/value.hpp>
#include <boost/system/result.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wuhu::mcp {

// The protocol revisions this client speaks, newest first; it asks for the first.
inline constexpr std::string_view protocol_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};
bool speaks(std::string_view version);

// ---- what the client writes

// JSON-RPC requests (with an id) and notifications (without), serialized.
std::string initialize_request(std::int64_t id, std::string_view client_version);
std::string initialized_notification();
std::string tools_list_request(std::int64_t id, const std::string& cursor);
// `arguments`: the call's JSON object (text the tool's schema already accepted).
// `progress_token`: sent as _meta.progressToken, so that the server may send progress.
std::string tools_call_request(std::int64_t id, std::string_view tool,
                               const boost::json::value& arguments,
                               std::string_view progress_token);
std::string cancelled_notification(std::int64_t request_id, std::string_view reason);
// The answer to a server's request this client does not serve (ping is served: an empty
// result).
std::string answer_to_server_request(const boost::json::value& id, std::string_view method);

// ---- what the client reads

struct message {
    enum kind_t { response, notification, request } kind = response;
    boost::json::value id;                   // response, request
    std::string method;                      // notification, request
    boost::json::value params;               // notification, request (null when absent)
    boost::json::value result;               // response: its result (null when it is an error)
    std::optional<std::int64_t> error_code;  // response: the error's code, if it is one
    std::string error_message;               // response: the error's message
};

// One JSON-RPC message (or an error saying why it is not one). A batch (an array) is refused:
// the current revisions send none.
boost::system::result<message, std::string> parse_message(std::string_view json_text);

// Reads a POST's answer as it arrives: JSON (`event_stream` false: the whole body is one
// message, handed over at finish()) or SSE (each event's data is one message).
class reader {
  public:
    using handler = std::function<void(message)>;
    reader(bool event_stream, std::size_t max_bytes = std::size_t{16} << 20)
        : event_stream_(event_stream), max_(max_bytes), sse_(max_bytes) {}
    // False once the body is unusable (too large, malformed): error() says why.
    bool feed(std::string_view bytes, const handler& on_message);
    // The body ended: the JSON answer's message is handed over now. False if it was not one.
    bool finish(const handler& on_message);
    const std::string& error() const { return error_; }

  private:
    bool event_stream_;
    std::size_t max_;
    providers::sse_parser sse_;
    std::string body_;
    std::string error_;
};

// ---- the answers' contents

struct server_info {
    bool tools_list_changed = false;  // the server says when its tools change
    std::string protocol_version;
    std::string name;
};
boost::system::result<server_info, std::string> parse_initialize(const boost::json::value& result);

struct tool_info {
    std::string name;
    std::string description;
    std::string input_schema;  // JSON text
    std::optional<bool> idempotent_hint;
    std::optional<bool> read_only_hint;
};
struct tools_page {
    std::vector<tool_info> tools;
    std::string next_cursor;  // empty: the last page
};
// A tool whose name or schema is unusable is left out, and said why in `skipped`.
boost::system::result<tools_page, std::string> parse_tools_page(const boost::json::value& result,
                                                                std::vector<std::string>* skipped);

// What the model sees of a tools/call result: its text content, in order, joined by blank
// lines; an image or audio as "[image: image/png, 1234 bytes of base64]"; a resource link as
// "[resource: <uri>]" and an embedded resource's text (or "[resource: <uri>, binary]");
// structured content, when there is no text, as its JSON. isError makes it an error result.
tools::tool_output render_call_result(const boost::json::value& result);

// A progress notification's token and progress (nullopt when it is not a well-formed one).
struct progress {
    std::string token;
    double value = 0;
};
std::optional<progress> parse_progress(const boost::json::value& params);

}  // namespace wuhu::mcp
