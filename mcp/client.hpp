// A client of one MCP server over Streamable HTTP (docs/tools.md "MCP servers"; the messages
// are mcp/messages.hpp's): each message is an HTTP POST to the server's endpoint on the providers'
// HTTP client (Beast, OpenSSL, the same TLS rules), with `Accept: application/json,
// text/event-stream`; the session id the server hands out at initialize
// (`Mcp-Session-Id`) and the protocol revision agreed (`MCP-Protocol-Version`) go with every
// message after it. A server that forgot the session (404 to a message that carried it) is
// initialized again and the message sent once more.
//
// A call sends a progress token; the server's progress notifications reach `on_progress` (the
// tool keeps the call alive with them, mcp/tools.hpp). A call cancelled (an abort, a
// timeout: the awaiting coroutine's cancellation slot) closes its connection and sends the
// server `notifications/cancelled` for the request, in the background.
//
// Threads: one executor (the sessions'); every call on it. Held by shared_ptr: a cancellation
// notice in flight keeps it alive.
#pragma once

#include "mcp/messages.hpp"
#include "providers/http_client.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>
#include <boost/system/result.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace wuhu::mcp {

namespace asio = boost::asio;
namespace http = providers::http;

struct endpoint {
    std::string name;  // the tools file's name for the server (logs, metrics)
    http::base_url url;
    http::header_list headers;  // values may be secrets: never logged, never in an error
    http::client_options http;
};

// How a request ended: its response (a result, or the server's error), or why there is none.
struct outcome {
    enum kind_t { ok, server_error, failed, cancelled } kind = failed;
    boost::json::value result;
    std::string error;  // server_error, failed: what happened (no header value in it)
};

class client : public std::enable_shared_from_this<client> {
  public:
    client(asio::any_io_executor ex, endpoint e);

    // initialize, then notifications/initialized.
    asio::awaitable<boost::system::result<server_info, std::string>> initialize();
    // Every page of tools/list.
    asio::awaitable<boost::system::result<std::vector<tool_info>, std::string>> list_tools(
        std::vector<std::string>* skipped);
    // tools/call; `on_progress` for each progress notification of this call.
    asio::awaitable<outcome> call(std::string tool, boost::json::value arguments,
                                  std::function<void()> on_progress);

    // How the server's event stream ended: the server said its tools changed; it ended (or the
    // connection failed, or it was cancelled: `why` says how); the server offers none (405,
    // another status, not an event stream): the tools are listed now and then instead.
    enum class heard { changed, ended, unsupported };
    // Opens the server's event stream (a GET, in the session) and reads it until it ends.
    asio::awaitable<heard> listen(std::string* why);

    const endpoint& where() const { return endpoint_; }
    const std::string& session() const { return session_; }
    // Notifications the server sent on the answers' streams, besides progress (e.g.
    // notifications/tools/list_changed), by method.
    void on_notification(std::function<void(const std::string&)> f) { notified_ = std::move(f); }

  private:
    // Posts `body`; reads the answer (JSON or SSE) until the response to `id` (none for a
    // notification: 202 Accepted), answering the server's requests and passing progress of
    // `token` to `on_progress`.
    asio::awaitable<outcome> post(std::string body, std::optional<std::int64_t> id,
                                  std::string token, std::function<void()> on_progress);
    // `initializing`: the initialize request (no session id sent; the one in the answer's
    // head is the new session's; never cancelled by a notice).
    asio::awaitable<outcome> post_once(std::string body, std::optional<std::int64_t> id,
                                       std::string token, std::function<void()> on_progress,
                                       bool* forgotten, bool initializing = false);
    static asio::awaitable<void> send_cancelled(std::shared_ptr<client> self, std::int64_t id);
    static asio::awaitable<void> answer(std::shared_ptr<client> self, std::string body);
    // Answers a server's request in the background (at most a few at once: others are dropped).
    void answer_later(const boost::json::value& id, const std::string& method);
    // A POST of `body` to the endpoint, or with no body the GET of its event stream; with the
    // session's headers unless `with_session` is false (initialize).
    http::request request_for(std::string body, bool with_session = true) const;
    // `text` (an error body, a server's message) without any configured header's value.
    std::string scrubbed(std::string text) const;

    asio::any_io_executor ex_;
    endpoint endpoint_;
    http::client http_;
    http::client listener_;         // the event stream's, without the calls' timeouts
    std::string session_;           // Mcp-Session-Id, once initialized
    std::string protocol_version_;  // agreed at initialize
    server_info info_;              // the last initialize's answer
    bool initializing_ = false;     // one initialize at a time: the others wait for it
    std::size_t answering_ = 0;     // answers to the server's requests in flight
    std::int64_t next_id_ = 1;
    std::function<void(const std::string&)> notified_;
};

}  // namespace wuhu::mcp
