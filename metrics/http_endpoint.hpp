// The worker's one HTTP port (`--metrics-addr`, default 127.0.0.1:9464):
//
//   GET /metrics   the Prometheus text format, after the node refreshed its gauges
//   GET /healthz   200 while the process is alive and its executor turns (503 otherwise)
//   GET /readyz    200 when the worker is ready to serve: connected to NATS, the store and the
//                  lease backend answer, not stopping; 503 with the reason otherwise
//   GET /console/… the web console's files, when the worker serves it (docs/console.md)
//
// It runs on a thread of its own, so a worker whose executor is stuck still answers (/healthz
// then says so). Connections are served one request at a time, each bounded by a timeout; at
// most `max_connections` are open at once (one past it is closed at once, unread).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

namespace wuhu::metrics {

// A file served as it is (the console's), with the content security policy it is served under.
struct static_file {
    std::string_view content_type;
    std::string_view body;
    std::string_view security_policy;
};

struct endpoint_handlers {
    // The body of /metrics (the node refreshes its gauges first).
    std::function<std::string()> metrics;
    // Whether the executor turned within the time given (/healthz).
    std::function<bool(std::chrono::milliseconds)> alive;
    // Why the worker is not ready, or nullopt when it is (/readyz).
    std::function<std::optional<std::string>()> unready;
    // The file a path names under /console/ (none: the console is off, every such path 404).
    std::function<std::optional<static_file>(std::string_view path)> files = {};
};

class http_endpoint {
  public:
    // Listens on `address` ("host:port"; port 0 picks a free one). Throws
    // std::invalid_argument for an address it cannot parse, std::runtime_error when it cannot
    // listen.
    http_endpoint(const std::string& address, endpoint_handlers handlers,
                  std::size_t max_connections = 64);
    ~http_endpoint();
    http_endpoint(const http_endpoint&) = delete;
    http_endpoint& operator=(const http_endpoint&) = delete;

    // "127.0.0.1:9464", with the real port.
    std::string address() const;
    // Connections closed at once because `max_connections` were open.
    std::size_t turned_away() const;

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
    std::thread thread_;
};

}  // namespace wuhu::metrics
