// A NATS client on a raw TCP socket, for requests no library would send: subjects with NUL
// bytes or other bytes a client library refuses. It speaks just enough of the protocol
// (INFO, CONNECT, SUB, PUB, PING/PONG, MSG) to send a request and read its replies.
// Not thread-safe; every read is bounded by its timeout.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace wuhu::testing {

class raw_nats {
  public:
    // `url`: nats://127.0.0.1:<port>. Throws std::runtime_error when it cannot connect.
    explicit raw_nats(const std::string& url) {
        const auto colon = url.rfind(':');
        const int port = std::stoi(url.substr(colon + 1));
        fd_ = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(static_cast<std::uint16_t>(port));
        if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
            close(fd_);
            throw std::runtime_error("raw_nats: cannot connect to " + url);
        }
        if (!read_line(std::chrono::seconds(5)).starts_with("INFO")) {
            throw std::runtime_error("raw_nats: no INFO from " + url);
        }
        send(R"(CONNECT {"verbose":false,"pedantic":false,"headers":false,"name":"raw"})"
             "\r\nSUB _RAW.inbox.> 1\r\nPING\r\n");
        expect_pong();
    }
    ~raw_nats() { close(fd_); }
    raw_nats(const raw_nats&) = delete;

    // Publishes `data` on `subject` (any bytes but space, tab and CR/LF) with a reply subject
    // of this client's, and waits up to `timeout` for the first reply. nullopt: none came.
    std::optional<std::string> request(std::string_view subject, std::string_view data,
                                       std::chrono::milliseconds timeout) {
        const std::string inbox = "_RAW.inbox." + std::to_string(++next_);
        return request_to(subject, inbox, inbox, data, timeout);
    }

    // Publishes with `reply` as the reply subject (any bytes but whitespace) and waits up to
    // `timeout` for a message on `inbox` (one of this client's, under _RAW.inbox.).
    std::optional<std::string> request_to(std::string_view subject, std::string_view reply,
                                          const std::string& inbox, std::string_view data,
                                          std::chrono::milliseconds timeout) {
        std::string pub = "PUB ";
        pub.append(subject).append(" ").append(reply).append(" ");
        pub.append(std::to_string(data.size())).append("\r\n").append(data).append("\r\n");
        send(pub);
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) {
                return std::nullopt;
            }
            std::string line = read_line(left);
            if (line.empty()) {
                return std::nullopt;
            }
            if (line == "PING") {
                send("PONG\r\n");
                continue;
            }
            if (!line.starts_with("MSG ")) {
                continue;
            }
            // MSG <subject> <sid> [reply] <#bytes>
            const auto last_space = line.rfind(' ');
            const auto size = std::stoul(line.substr(last_space + 1));
            std::string payload = read_exact(size + 2, left).substr(0, size);
            const auto subject_end = line.find(' ', 4);
            if (line.substr(4, subject_end - 4) == inbox) {
                return payload;
            }
        }
    }

  private:
    void send(std::string_view s) {
        while (!s.empty()) {
            auto n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
            if (n <= 0) {
                throw std::runtime_error("raw_nats: send failed");
            }
            s.remove_prefix(static_cast<std::size_t>(n));
        }
    }
    bool fill(std::chrono::milliseconds timeout) {
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) {
            return false;
        }
        char buf[65536];
        auto n = ::recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) {
            return false;
        }
        buf_.append(buf, static_cast<std::size_t>(n));
        return true;
    }
    // A line without its CRLF; empty on timeout.
    std::string read_line(std::chrono::milliseconds timeout) {
        for (;;) {
            if (auto eol = buf_.find("\r\n"); eol != std::string::npos) {
                std::string line = buf_.substr(0, eol);
                buf_.erase(0, eol + 2);
                return line;
            }
            if (!fill(timeout)) {
                return {};
            }
        }
    }
    std::string read_exact(std::size_t n, std::chrono::milliseconds timeout) {
        while (buf_.size() < n) {
            if (!fill(timeout)) {
                throw std::runtime_error("raw_nats: short message");
            }
        }
        std::string out = buf_.substr(0, n);
        buf_.erase(0, n);
        return out;
    }
    void expect_pong() {
        for (;;) {
            std::string line = read_line(std::chrono::seconds(5));
            if (line == "PONG") {
                return;
            }
            if (line.empty() || line.starts_with("-ERR")) {
                throw std::runtime_error("raw_nats: no PONG: " + line);
            }
        }
    }

    int fd_ = -1;
    std::string buf_;
    int next_ = 0;
};

}  // namespace wuhu::testing
