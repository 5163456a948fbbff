// A provider (providers/http_provider.hpp) in front of a local server (tests/support/
// http_server.hpp) that serves each provider's SSE as saved in tests/data/providers/, and its
// error answers: what the providers' tests and the loop's retry test drive.
#pragma once

#include "providers/http_provider.hpp"
#include "runtime/clock.hpp"
#include "tests/providers/provider_streams.hpp"
#include "tests/support/http_server.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace wuhu::testing {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// The saved stream in pieces of 40 bytes, 2 ms apart: as a server streams it.
inline std::vector<http_piece> streamed(const std::string& name) {
    const auto all = saved_stream(name);
    std::vector<http_piece> out;
    for (std::size_t at = 0; at < all.size(); at += 40) {
        out.push_back({2ms, all.substr(at, 40)});
    }
    return out;
}

inline http_plan answer(int status, std::string body, std::string type = "application/json") {
    http_plan p;
    p.status = status;
    p.headers = {{"Content-Type", std::move(type)}};
    p.pieces = {{0ms, std::move(body)}};
    return p;
}

struct endpoint {
    http_server server;
    asio::io_context io;
    runtime::system_clock clock;
    std::unique_ptr<providers::http_provider> provider;

    endpoint(providers::api_kind api, http_server::handler h,
             providers::http::header_list headers = {})
        : server(std::move(h)) {
        providers::endpoint_config c;
        c.name = api == providers::api_kind::openai ? "oai" : "claude";
        c.api = api;
        c.base = *providers::http::parse_base_url(server.url() + "/v1");
        c.api_key = "sk-test-SECRET";
        c.default_model =
            api == providers::api_kind::openai ? "gpt-4o" : "claude-sonnet-4-20250514";
        c.headers = std::move(headers);
        provider = std::make_unique<providers::http_provider>(io.get_executor(), c, clock);
    }

    providers::inference_outcome infer(recording_sink& sink,
                                       providers::inference_request req = {}) {
        if (req.context.empty()) {
            req.context = {msg(session::llm_role::system, "Be brief."),
                           msg(session::llm_role::user, "hi")};
        }
        std::optional<providers::inference_outcome> out;
        asio::co_spawn(io, provider->infer(std::move(req), sink),
                       [&](std::exception_ptr e, providers::inference_outcome o) {
                           if (e) {
                               std::rethrow_exception(e);
                           }
                           out = std::move(o);
                       });
        io.restart();
        io.run();
        return std::move(*out);
    }
};

}  // namespace wuhu::testing
