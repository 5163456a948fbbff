// An HTTP/1.1 client for the model providers, on Boost.Beast over TCP or OpenSSL.
//
// One client per endpoint (a base URL): it keeps the connections a response left open and
// reuses them for the next request. TLS verifies the server's certificate against the system's
// CA store (or a CA file given by configuration) and the host name, and sends SNI.
//
// A request's response is read as it arrives: the head once, then each piece of the body as
// the connection delivers it (a streamed answer is never buffered whole). Timeouts: connecting
// (resolve, TCP, TLS handshake), the first byte of the response after the request was sent,
// and the silence between two pieces of the body. Cancellation through the awaiting
// coroutine's cancellation slot (an abort, the loop's own timeout) closes the connection at
// once; the request then completes with operation_aborted.
//
// Threads: one executor (the sessions'); every call on it.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/result.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wuhu::providers::http {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// Where an endpoint is: `https://api.openai.com/v1` is tls, host api.openai.com, port 443,
// path /v1.
struct base_url {
    bool tls = false;
    std::string host;
    std::string port;
    std::string path;  // without a trailing '/'
    bool operator==(const base_url&) const = default;
};
// http:// or https://, a host (a name, IPv4, or [IPv6]), an optional port, an optional path;
// no user info, query or fragment. An error message for anything else.
boost::system::result<base_url, std::string> parse_base_url(std::string_view url);

struct client_options {
    std::chrono::milliseconds connect_timeout = 10s;
    std::chrono::milliseconds first_byte_timeout = 120s;
    std::chrono::milliseconds idle_timeout = 60s;
    std::string ca_file;  // PEM; empty: the system's CA store
    std::size_t max_idle_connections = 16;
    std::size_t max_header_bytes = 64 * 1024;
};

using header_list = std::vector<std::pair<std::string, std::string>>;

struct request {
    std::string method = "POST";
    std::string target;  // appended to the base URL's path: "/chat/completions"
    header_list headers;
    std::string body;
};

struct response_head {
    int status = 0;
    header_list headers;
    // The first header of that name (case-insensitive), or "".
    std::string_view header(std::string_view name) const;
};

// What a request's transport failure was (its message names the endpoint, never a header).
enum class errc {
    connect_failed = 1,  // resolve, TCP connect or TLS handshake
    timeout,             // connect, first byte or idle
    connection_lost,     // reset, or closed before the response's end
    protocol,            // not an HTTP/1.1 response, or one past the limits
    no_such_host,        // the name does not resolve (not a passing DNS failure)
    not_trusted,         // the server's certificate does not verify (CA, name, dates)
};
const boost::system::error_category& category();
inline boost::system::error_code make_error_code(errc e) {
    return {static_cast<int>(e), category()};
}

class client {
  public:
    using head_handler = std::function<void(const response_head&)>;
    // Returns false to stop reading (the connection is closed, and the request succeeds).
    using body_handler = std::function<bool(std::string_view)>;

    // Throws std::invalid_argument if the CA certificates cannot be loaded.
    client(asio::any_io_executor ex, base_url base, client_options o = {});
    ~client();
    client(const client&) = delete;
    client& operator=(const client&) = delete;

    // Sends `req` and reads its response. Completes with success once the body has ended
    // (or on_body asked to stop), operation_aborted if cancelled, or a transport error (errc,
    // or the TLS error). A description of the failure is in `detail` when given.
    asio::awaitable<boost::system::error_code> send(request req, head_handler on_head,
                                                    body_handler on_body,
                                                    std::string* detail = nullptr);

    const base_url& base() const { return base_; }
    // Connections open now, idle (for tests: reuse).
    std::size_t idle() const;
    // Connections opened since the start.
    std::size_t opened() const { return opened_; }

  private:
    struct connection;
    // Opens a connection into `c`; `arm` is called before each wait (send() above), and
    // `slot` (the coroutine's) cancels the name resolution.
    asio::awaitable<boost::system::error_code> connect(std::shared_ptr<connection>& c,
                                                       asio::cancellation_slot slot,
                                                       std::function<void()> arm,
                                                       std::string* detail);

    asio::any_io_executor ex_;
    base_url base_;
    client_options opts_;
    struct tls_context;
    std::unique_ptr<tls_context> tls_;
    std::vector<std::shared_ptr<connection>> idle_;
    std::size_t opened_ = 0;
};

}  // namespace wuhu::providers::http

template <>
struct boost::system::is_error_code_enum<wuhu::providers::http::errc> : std::true_type {};
