// A blocking HTTP GET on 127.0.0.1 for the tests that read a worker's /metrics, /healthz and
// /readyz, and the value of one series in a Prometheus scrape.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>

namespace wuhu::testing {

struct http_answer {
    int status = 0;  // 0: no answer
    std::string headers;  // the header lines, as sent
    std::string body;
};

// A TCP connection to "127.0.0.1:port" whose reads wait 5 s at most; -1 if it cannot connect.
inline int connect_local(const std::string& address) {
    const int port = std::stoi(address.substr(address.rfind(':') + 1));
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// GET `path` at "127.0.0.1:port" (HTTP/1.1, Connection: close); every read bounded by 5 s.
inline http_answer http_get(const std::string& address, const std::string& path) {
    http_answer out;
    const int fd = connect_local(address);
    if (fd < 0) {
        return out;
    }
    const std::string req =
        "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    std::string all;
    char buf[8192];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
        all.append(buf, static_cast<std::size_t>(n));
    }
    close(fd);
    if (all.starts_with("HTTP/1.1 ")) {
        out.status = std::stoi(all.substr(9, 3));
        const auto body = all.find("\r\n\r\n");
        out.body = body == std::string::npos ? "" : all.substr(body + 4);
        out.headers = all.substr(0, body);
    }
    return out;
}

// The value of the series `name{labels}` in a scrape (-1: absent).
inline double metric_value(const std::string& scrape, const std::string& series) {
    std::istringstream in(scrape);
    for (std::string line; std::getline(in, line);) {
        if (line.starts_with(series + " ")) {
            return std::stod(line.substr(series.size() + 1));
        }
    }
    return -1;
}

// A worker's /metrics, /healthz or /readyz (`path`), at the address it logged ("metrics on
// http://HOST:PORT/metrics"); status 0 when it logged none.
inline http_answer worker_http(const std::string& log_file, const std::string& path) {
    const std::regex at(R"(metrics on http://([0-9.]+:[0-9]+)/metrics)");
    std::ifstream f(log_file);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::smatch m;
    if (!std::regex_search(text, m, at)) {
        return {};
    }
    return http_get(m[1], path);
}

}  // namespace wuhu::testing
