// The provider path's own cost (issue 14): a local server streams an OpenAI answer of N text
// deltas; a raw client (a blocking socket that sends the request and reads to the body's end,
// parsing nothing) measures the server's own time, and the `openai` provider (HTTP client, SSE
// parser, decoder, sink) the same exchange. What the provider adds, per inference (a one-delta
// answer) and per streamed delta (the slope over N), is printed against the goals: under 1 ms
// per inference and 50 us per delta.
#include "providers/http_provider.hpp"
#include "providers/openai.hpp"
#include "providers/sse.hpp"
#include "tests/support/http_server.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

std::string answer_of(int deltas) {
    std::string s;
    for (int i = 0; i < deltas; ++i) {
        s += "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":"
             "[{\"index\":0,\"delta\":{\"content\":\"word \"},\"finish_reason\":null}]}\n\n";
    }
    s += "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,"
         "\"completion_tokens\":" +
         std::to_string(deltas) + "}}\n\ndata: [DONE]\n\n";
    return s;
}

// Each delta a chunk of its own, as a model server writes them.
wuhu::testing::http_plan plan_of(int deltas) {
    wuhu::testing::http_plan p;
    const auto all = answer_of(deltas);
    std::size_t at = 0;
    while (at < all.size()) {
        const auto end = all.find("\n\n", at) + 2;
        p.pieces.push_back({0ms, all.substr(at, end - at)});
        at = end;
    }
    return p;
}

// The raw client: one kept-open connection, the request written, the response read to its
// last chunk. Microseconds per exchange (median of `n`).
double raw_exchange_us(int port, const std::string& body, int n) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        std::fprintf(stderr, "provider_bench: cannot connect to the local server\n");
        std::exit(1);
    }
    const std::string request =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    std::vector<double> us;
    std::string got;
    char buf[16384];
    for (int i = 0; i < n; ++i) {
        const auto t0 = clock_type::now();
        ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
        got.clear();
        while (!got.ends_with("\r\n0\r\n\r\n")) {
            auto r = ::recv(fd, buf, sizeof buf, 0);
            if (r <= 0) {
                std::fprintf(stderr, "provider_bench: the server closed the raw connection\n");
                std::exit(1);
            }
            got.append(buf, static_cast<std::size_t>(r));
        }
        us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    }
    ::close(fd);
    std::nth_element(us.begin(), us.begin() + n / 2, us.end());
    return us[static_cast<std::size_t>(n / 2)];
}

struct quiet_sink final : wuhu::providers::stream_sink {
    std::size_t deltas = 0;
    void text(std::string_view) override { ++deltas; }
    void tool_call(const wuhu::providers::tool_call_delta&) override {}
};

// The provider: microseconds per inference (median of `n`), the same server and request.
double provider_exchange_us(const std::string& url, int n, std::size_t expect_deltas) {
    asio::io_context io;
    wuhu::runtime::system_clock clk;
    wuhu::providers::endpoint_config c;
    c.name = "bench";
    c.base = *wuhu::providers::http::parse_base_url(url + "/v1");
    c.default_model = "m";
    wuhu::providers::http_provider provider(io.get_executor(), c, clk);
    std::vector<double> us;
    for (int i = 0; i < n; ++i) {
        quiet_sink sink;
        wuhu::providers::inference_request req;
        wuhu::session::llm_message m;
        m.content = "hi";
        req.context.push_back(m);
        bool ok = false;
        const auto t0 = clock_type::now();
        asio::co_spawn(io, provider.infer(std::move(req), sink),
                       [&](std::exception_ptr, wuhu::providers::inference_outcome o) {
                           ok = std::holds_alternative<wuhu::session::assistant_message>(o);
                       });
        io.restart();
        io.run();
        us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
        if (!ok || sink.deltas != expect_deltas) {
            std::fprintf(stderr, "provider_bench: the inference failed\n");
            std::exit(1);
        }
    }
    std::nth_element(us.begin(), us.begin() + n / 2, us.end());
    return us[static_cast<std::size_t>(n / 2)];
}

// The parsing alone (SSE parser, JSON, decoder, sink) of an answer of `deltas`, in memory:
// microseconds per delta (median of `n`).
double decode_us_per_delta(int deltas, int n) {
    const auto all = answer_of(deltas);
    std::vector<double> us;
    for (int i = 0; i < n; ++i) {
        quiet_sink sink;
        wuhu::providers::openai_stream s(sink, "m");
        wuhu::providers::sse_parser p;
        const auto t0 = clock_type::now();
        p.feed(all, [&](const wuhu::providers::sse_event& e) { s.on_event(e); });
        us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() /
                     deltas);
        if (!s.done() || sink.deltas != static_cast<std::size_t>(deltas)) {
            std::fprintf(stderr, "provider_bench: the in-memory decoding failed\n");
            std::exit(1);
        }
    }
    std::nth_element(us.begin(), us.begin() + n / 2, us.end());
    return us[static_cast<std::size_t>(n / 2)];
}

}  // namespace

int main() {
    constexpr int many = 500;
    constexpr int rounds = 300;
    int deltas = 1;
    wuhu::testing::http_server server(
        [&](const wuhu::testing::http_received&) { return plan_of(deltas); });
    const std::string body =
        R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true})";
    deltas = 1;
    const double raw_one = raw_exchange_us(server.port(), body, rounds);
    const double ours_one = provider_exchange_us(server.url(), rounds, 1);
    deltas = many;
    const double raw_many = raw_exchange_us(server.port(), body, rounds / 10);
    const double ours_many = provider_exchange_us(server.url(), rounds / 10, many);
    const double per_inference = ours_one - raw_one;
    const double per_delta = ((ours_many - raw_many) - per_inference) / many;
    std::printf("provider_bench (openai SSE from a local server, medians)\n");
    std::printf("  one delta:   raw client %8.1f us   provider %8.1f us\n", raw_one, ours_one);
    std::printf("  %d deltas: raw client %8.1f us   provider %8.1f us\n", many, raw_many,
                ours_many);
    std::printf("  added per inference %8.1f us   goal < 1000 us   ratio %.3f\n", per_inference,
                per_inference / 1000.0);
    std::printf(
        "  added per delta     %8.2f us   goal <   50 us   ratio %.3f   (the parsing "
        "overlaps the server's sending)\n",
        per_delta, per_delta / 50.0);
    const double decode = decode_us_per_delta(many, 50);
    std::printf(
        "  parsing alone       %8.2f us a delta (SSE, JSON, decoder; in memory)   ratio "
        "to the goal %.3f\n",
        decode, decode / 50.0);
    return 0;
}
