// The providers' HTTP client (providers/http_client.hpp) against a local server
// (tests/support/http_server.hpp): streamed bodies, connection reuse, timeouts, a cut stream,
// and cancellation that closes the connection at once.
#include "providers/http_client.hpp"
#include "tests/support/http_server.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <gtest/gtest.h>

namespace wuhu::testing {

namespace asio = boost::asio;
namespace http = providers::http;
using namespace std::chrono_literals;
using boost::system::error_code;

namespace {

struct exchange {
    error_code ec;
    http::response_head head;
    std::vector<std::string> pieces;
    std::string detail;
    std::string body() const {
        std::string out;
        for (const auto& p : pieces) {
            out += p;
        }
        return out;
    }
};

asio::awaitable<void> send_into(http::client& c, http::request req, exchange& out) {
    auto sending = c.send(
        std::move(req), [&out](const http::response_head& h) { out.head = h; },
        [&out](std::string_view piece) {
            out.pieces.emplace_back(piece);
            return true;
        },
        &out.detail);
    out.ec = co_await std::move(sending);
}

exchange send(asio::io_context& io, http::client& c, http::request req) {
    exchange out;
    asio::co_spawn(io, send_into(c, std::move(req), out), [](std::exception_ptr e) {
        if (e) {
            std::rethrow_exception(e);
        }
    });
    io.restart();
    io.run();
    return out;
}

http::base_url parsed(const std::string& url) {
    auto r = http::parse_base_url(url);
    EXPECT_TRUE(r.has_value()) << url << ": " << (r ? "" : r.error());
    return r ? *r : http::base_url{};
}

http::base_url url_of(const http_server& s, const std::string& path = "") {
    return parsed(s.url() + path);
}

http::request post(std::string target, std::string body = "{}") {
    http::request r;
    r.target = std::move(target);
    r.headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer k"}};
    r.body = std::move(body);
    return r;
}

}  // namespace

TEST(HttpClient, BaseUrlsAreParsedAndBadOnesRefusedWithAReason) {
    auto u = parsed("https://api.openai.com/v1/");
    EXPECT_EQ(u, (http::base_url{true, "api.openai.com", "443", "/v1"}));
    EXPECT_EQ(parsed("http://127.0.0.1:8080"),
              (http::base_url{false, "127.0.0.1", "8080", ""}));
    EXPECT_EQ(parsed("http://[::1]:11434/api"),
              (http::base_url{false, "::1", "11434", "/api"}));
    for (const char* bad : {"ftp://x", "api.openai.com", "http://", "http://h:0", "http://h:99999",
                            "http://u:p@h/", "http://h/v1?x=1", "http://[::1", "http://h x/"}) {
        auto r = http::parse_base_url(bad);
        EXPECT_FALSE(r.has_value()) << bad;
        if (!r) {
            EXPECT_FALSE(r.error().empty()) << bad;
        }
    }
}

TEST(HttpClient, TheBodyIsHandedOverPieceByPieceAsTheServerSendsIt) {
    http_received seen;
    http_server server([&](const http_received& r) {
        seen = r;
        http_plan p;
        p.pieces = {{0ms, "data: a\n\n"}, {50ms, "data: b\n\n"}, {50ms, "data: c\n\n"}};
        return p;
    });
    asio::io_context io;
    http::client c(io.get_executor(), url_of(server, "/v1"));
    auto out = send(io, c, post("/chat/completions", R"({"q":1})"));
    ASSERT_FALSE(out.ec) << out.ec.message() << " " << out.detail;
    EXPECT_EQ(out.head.status, 200);
    EXPECT_EQ(out.head.header("content-type"), "text/event-stream");
    EXPECT_EQ(out.body(), "data: a\n\ndata: b\n\ndata: c\n\n");
    EXPECT_GE(out.pieces.size(), 3u) << "each piece when it came, not the body at the end";
    EXPECT_EQ(seen.method, "POST");
    EXPECT_EQ(seen.target, "/v1/chat/completions");
    EXPECT_EQ(seen.body, R"({"q":1})");
    EXPECT_EQ(seen.headers["authorization"], "Bearer k");
    EXPECT_EQ(seen.headers["host"], "127.0.0.1:" + std::to_string(server.port()));
}

TEST(HttpClient, TheNextRequestReusesTheConnectionUnlessTheServerClosedIt) {
    bool close = false;
    http_server server([&](const http_received&) {
        http_plan p;
        p.pieces = {{0ms, "ok"}};
        p.close = close;
        return p;
    });
    asio::io_context io;
    http::client c(io.get_executor(), url_of(server));
    for (int i = 0; i < 3; ++i) {
        auto out = send(io, c, post("/x"));
        ASSERT_FALSE(out.ec) << out.ec.message();
        EXPECT_EQ(out.body(), "ok");
    }
    EXPECT_EQ(server.connections(), 1);
    EXPECT_EQ(c.opened(), 1u);
    EXPECT_EQ(c.idle(), 1u);
    close = true;  // "Connection: close": not kept
    ASSERT_FALSE(send(io, c, post("/x")).ec);
    EXPECT_EQ(c.idle(), 0u);
    ASSERT_FALSE(send(io, c, post("/x")).ec);
    EXPECT_EQ(server.connections(), 2);
}

TEST(HttpClient, AServerSilentPastTheFirstByteOrIdleTimeoutTimesOut) {
    bool hang = true;
    http_server server([&](const http_received&) {
        http_plan p;
        if (hang) {
            p.hang = 3000ms;
        } else {
            p.pieces = {{0ms, "first"}, {3000ms, "late"}};
        }
        return p;
    });
    asio::io_context io;
    http::client_options o;
    o.first_byte_timeout = 200ms;
    o.idle_timeout = 200ms;
    http::client c(io.get_executor(), url_of(server), o);
    const auto t0 = std::chrono::steady_clock::now();
    auto first = send(io, c, post("/x"));
    EXPECT_EQ(first.ec, http::errc::timeout) << first.ec.message();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    hang = false;
    auto idle = send(io, c, post("/x"));
    EXPECT_EQ(idle.ec, http::errc::timeout) << idle.ec.message();
    EXPECT_EQ(idle.body(), "first");
}

TEST(HttpClient, AStreamCutBeforeItsEndIsAConnectionLost) {
    http_server server([&](const http_received&) {
        http_plan p;
        p.pieces = {{0ms, "data: a\n\n"}};
        p.cut = true;
        return p;
    });
    asio::io_context io;
    http::client c(io.get_executor(), url_of(server));
    auto out = send(io, c, post("/x"));
    EXPECT_EQ(out.ec, http::errc::connection_lost) << out.ec.message();
    EXPECT_EQ(out.body(), "data: a\n\n");
    EXPECT_EQ(c.idle(), 0u);
}

TEST(HttpClient, NobodyListeningIsAConnectFailure) {
    int port = 0;
    {
        http_server gone([](const http_received&) { return http_plan{}; });
        port = gone.port();
    }
    asio::io_context io;
    http::client c(io.get_executor(),
                   parsed("http://127.0.0.1:" + std::to_string(port)));
    auto out = send(io, c, post("/x"));
    EXPECT_EQ(out.ec, http::errc::connect_failed) << out.ec.message();
    EXPECT_NE(out.detail.find("127.0.0.1"), std::string::npos) << out.detail;
}

// Issue 31, defect 12: the connect timeout's handler referred to the resolver and a flag in the
// connecting coroutine's frame; a timeout that expired as the resolve completed ran its handler
// after the frame was gone (a use after free, seen by AddressSanitizer). Connects whose timeout
// races their resolve, many times: each ends connected or timed out, and nothing else.
TEST(HttpClient, AConnectTimeoutRacingTheResolveNeverOutlivesTheConnect) {
    http_server server([](const http_received&) {
        http_plan p;
        p.pieces = {{0ms, "ok"}};
        return p;
    });
    int timed_out = 0;
    int answered = 0;
    for (int i = 0; i < 300; ++i) {
        asio::io_context io;
        http::client_options o;
        o.connect_timeout = std::chrono::milliseconds(i % 3);  // 0, 1 and 2 ms
        http::client c(io.get_executor(), url_of(server), o);
        auto out = send(io, c, post("/x"));
        if (out.ec == http::errc::timeout) {
            ++timed_out;
        } else {
            EXPECT_FALSE(out.ec) << out.ec.message();
            ++answered;
        }
    }
    EXPECT_EQ(timed_out + answered, 300);
}

// An abort cancels the inference: the connection is closed at once (the server sees it within
// 50 ms), and the request completes with operation_aborted.
TEST(HttpClient, CancellationClosesTheConnectionWithin50Milliseconds) {
    http_server server([&](const http_received&) {
        http_plan p;
        p.pieces = {{0ms, "data: a\n\n"}, {5000ms, "data: never\n\n"}};
        return p;
    });
    asio::io_context io;
    http::client c(io.get_executor(), url_of(server));
    exchange out;
    asio::cancellation_signal abort;
    bool done = false;
    asio::co_spawn(io, send_into(c, post("/x"), out),
                   asio::bind_cancellation_slot(abort.slot(), [&](std::exception_ptr) {
                       done = true;
                   }));
    std::chrono::steady_clock::time_point aborted_at;
    asio::steady_timer t(io);
    t.expires_after(300ms);
    t.async_wait([&](error_code) {
        aborted_at = std::chrono::steady_clock::now();
        abort.emit(asio::cancellation_type::terminal);
    });
    io.run();
    ASSERT_TRUE(done);
    EXPECT_EQ(out.ec, asio::error::operation_aborted) << out.ec.message();
    EXPECT_EQ(out.body(), "data: a\n\n");
    for (int i = 0; i < 100 && server.closed_mid_response().empty(); ++i) {
        std::this_thread::sleep_for(5ms);
    }
    const auto closed = server.closed_mid_response();
    ASSERT_EQ(closed.size(), 1u) << "the server never saw the connection close";
    const auto took =
        std::chrono::duration_cast<std::chrono::milliseconds>(closed[0] - aborted_at);
    std::cout << "[ abort   ] the server saw the connection closed " << took.count()
              << " ms after the cancellation" << std::endl;
    EXPECT_LT(took, 50ms);
}

// A pooled connection the server closed meanwhile (without saying so) fails at once with
// nothing read: the request is sent again on a new connection. But once any of a response
// came, the server took the request: it is never sent twice (a model's answer is billed).
TEST(HttpClient, AStalePooledConnectionIsReplacedButARequestTheServerTookIsNeverSentTwice) {
    int n = 0;
    http_server server([&](const http_received&) {
        ++n;
        http_plan p;
        p.pieces = {{0ms, "ok"}};
        if (n == 1) {
            p.drop_after = true;  // keep-alive said, then closed
        } else if (n == 3) {
            p.raw = "HTTP/1.1 200 OK\r\nContent-Ty";  // a response begun, then cut
        }
        return p;
    });
    asio::io_context io;
    http::client c(io.get_executor(), url_of(server));
    ASSERT_FALSE(send(io, c, post("/x")).ec);
    std::this_thread::sleep_for(50ms);  // the server has closed it by now
    auto again = send(io, c, post("/x"));
    ASSERT_FALSE(again.ec) << again.ec.message() << " " << again.detail;
    EXPECT_EQ(again.body(), "ok");
    EXPECT_EQ(n, 2) << "the stale connection took nothing; the request went once more";
    EXPECT_EQ(server.connections(), 2);
    auto cut = send(io, c, post("/x"));
    EXPECT_EQ(cut.ec, http::errc::connection_lost) << cut.ec.message();
    EXPECT_EQ(n, 3) << "a request the server began to answer is not sent again";
}

}  // namespace wuhu::testing
