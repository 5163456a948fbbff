// A local HTTP/1.1 server for the provider tests, on 127.0.0.1 and a free port: each request
// is answered by the test's handler with a plan (status, headers, the body in pieces with
// delays, or cut off, or never answered). A connection the client closes is noticed at once,
// even while the server waits between two pieces, and its time recorded (an abort must close
// the stream within 50 ms).
//
// Plain POSIX sockets and threads: a server the client under test does not share code with.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace wuhu::testing {

struct http_received {
    std::string method;
    std::string target;
    std::map<std::string, std::string> headers;  // names in lower case
    std::string body;
};

struct http_piece {
    std::chrono::milliseconds delay{0};  // before this piece
    std::string bytes;
};

struct http_plan {
    int status = 200;
    std::vector<std::pair<std::string, std::string>> headers = {
        {"Content-Type", "text/event-stream"}};
    std::vector<http_piece> pieces;  // sent as chunks (Transfer-Encoding: chunked)
    bool cut = false;                // close after the pieces, without the last chunk
    std::optional<std::chrono::milliseconds> hang;  // wait this long before any byte
    bool close = false;                             // Connection: close after this response
    bool drop_after = false;         // close after the response without saying so (a stale pool)
    std::optional<std::string> raw;  // instead of all the above: these bytes, then close
};

class http_server {
  public:
    using handler = std::function<http_plan(const http_received&)>;

    explicit http_server(handler h) : handler_(std::move(h)) {
        listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = 0;
        if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::listen(listener_, 64) != 0) {
            throw std::runtime_error("http_server: cannot listen on 127.0.0.1");
        }
        socklen_t len = sizeof a;
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
        port_ = ntohs(a.sin_port);
        acceptor_ = std::thread([this] { accept_loop(); });
    }
    ~http_server() {
        stopping_ = true;
        ::shutdown(listener_, SHUT_RDWR);
        ::close(listener_);
        acceptor_.join();
        std::vector<std::thread> threads;
        {
            std::lock_guard lock(mu_);
            for (int fd : open_) {
                ::shutdown(fd, SHUT_RDWR);
            }
            threads = std::move(threads_);
        }
        for (auto& t : threads) {
            t.join();
        }
    }

    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    int port() const { return port_; }
    int connections() const { return connections_; }
    int requests() const { return requests_; }
    // When the client closed a connection in the middle of a response, in order.
    std::vector<std::chrono::steady_clock::time_point> closed_mid_response() const {
        std::lock_guard lock(mu_);
        return closed_;
    }

  private:
    void accept_loop() {
        for (;;) {
            int fd = ::accept(listener_, nullptr, nullptr);
            if (fd < 0) {
                return;
            }
            if (stopping_) {
                ::close(fd);
                return;
            }
            ++connections_;
            int one = 1;  // each piece goes out when written, as a streaming server sends it
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            std::lock_guard lock(mu_);
            open_.push_back(fd);
            threads_.emplace_back([this, fd] { serve(fd); });
        }
    }

    // Waits up to `d` for the client to close; true if it did.
    bool client_closed_within(int fd, std::chrono::milliseconds d) {
        pollfd p{fd, POLLIN | POLLRDHUP, 0};
        if (::poll(&p, 1, static_cast<int>(d.count())) <= 0) {
            return false;
        }
        if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) {
            return true;
        }
        char c;
        return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }

    bool send_all(int fd, std::string_view bytes) {
        while (!bytes.empty()) {
            auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
            if (n <= 0) {
                return false;
            }
            bytes.remove_prefix(static_cast<std::size_t>(n));
        }
        return true;
    }

    // Reads one request (headers and a Content-Length body) from `fd`, `pending` holding what
    // was read past the last one. False at the end of the connection.
    bool read_request(int fd, std::string& pending, http_received& out) {
        auto fill = [&] {
            char buf[8192];
            auto n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) {
                return false;
            }
            pending.append(buf, static_cast<std::size_t>(n));
            return true;
        };
        std::size_t end;
        while ((end = pending.find("\r\n\r\n")) == std::string::npos) {
            if (!fill()) {
                return false;
            }
        }
        std::string head = pending.substr(0, end);
        pending.erase(0, end + 4);
        auto line_end = head.find("\r\n");
        const std::string request_line = head.substr(0, line_end);
        const auto sp1 = request_line.find(' ');
        const auto sp2 = request_line.find(' ', sp1 + 1);
        out = {};
        out.method = request_line.substr(0, sp1);
        out.target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
        std::size_t at = line_end == std::string::npos ? head.size() : line_end + 2;
        while (at < head.size()) {
            auto next = head.find("\r\n", at);
            if (next == std::string::npos) {
                next = head.size();
            }
            const std::string line = head.substr(at, next - at);
            const auto colon = line.find(':');
            std::string name = line.substr(0, colon);
            for (auto& ch : name) {
                ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            }
            std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
            while (!value.empty() && value.front() == ' ') {
                value.erase(0, 1);
            }
            out.headers[name] = value;
            at = next + 2;
        }
        const std::size_t length =
            out.headers.contains("content-length") ? std::stoul(out.headers["content-length"]) : 0;
        while (pending.size() < length) {
            if (!fill()) {
                return false;
            }
        }
        out.body = pending.substr(0, length);
        pending.erase(0, length);
        return true;
    }

    void serve(int fd) {
        std::string pending;
        http_received req;
        while (!stopping_ && read_request(fd, pending, req)) {
            ++requests_;
            const auto plan = handler_(req);
            if (plan.raw) {
                send_all(fd, *plan.raw);
                break;
            }
            if (plan.hang && client_closed_within(fd, *plan.hang)) {
                note_closed();
                break;
            }
            std::string head = "HTTP/1.1 " + std::to_string(plan.status) + " X\r\n";
            for (const auto& [k, v] : plan.headers) {
                head += k + ": " + v + "\r\n";
            }
            head += "Transfer-Encoding: chunked\r\n";
            head += plan.close ? "Connection: close\r\n\r\n" : "\r\n";
            if (!send_all(fd, head)) {
                break;
            }
            bool closed = false;
            for (const auto& piece : plan.pieces) {
                if (piece.delay.count() > 0 && client_closed_within(fd, piece.delay)) {
                    note_closed();
                    closed = true;
                    break;
                }
                char size[32];
                std::snprintf(size, sizeof size, "%zx\r\n", piece.bytes.size());
                if (piece.bytes.empty()) {
                    continue;  // an empty chunk would end the body
                }
                if (!send_all(fd, std::string(size) + piece.bytes + "\r\n")) {
                    closed = true;
                    break;
                }
            }
            if (closed || plan.cut || plan.close) {
                if (!closed && !plan.cut) {
                    send_all(fd, "0\r\n\r\n");
                }
                break;
            }
            if (!send_all(fd, "0\r\n\r\n") || plan.drop_after) {
                break;
            }
        }
        ::shutdown(fd, SHUT_RDWR);
        std::lock_guard lock(mu_);
        open_.erase(std::find(open_.begin(), open_.end(), fd));
        ::close(fd);
    }

    void note_closed() {
        std::lock_guard lock(mu_);
        closed_.push_back(std::chrono::steady_clock::now());
    }

    handler handler_;
    int listener_ = -1;
    int port_ = 0;
    std::atomic<bool> stopping_ = false;
    std::atomic<int> connections_ = 0;
    std::atomic<int> requests_ = 0;
    std::thread acceptor_;
    mutable std::mutex mu_;
    std::vector<int> open_;
    std::vector<std::thread> threads_;
    std::vector<std::chrono::steady_clock::time_point> closed_;
};

}  // namespace wuhu::testing
