// The `openai` and `anthropic` providers (providers/http_provider.hpp) against a local server
// that serves each provider's SSE as saved in tests/data/providers/, and its error answers.
#include "tests/providers/local_endpoint.hpp"
#include "tests/support/builders.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace wuhu::testing {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace std::chrono_literals;
using session::llm_role;
using providers::api_kind;
using providers::provider_error;
using providers::provider_error_kind;

namespace {

const provider_error& error_of(const providers::inference_outcome& o) {
    static const provider_error none{provider_error_kind::fatal, "no error: a message"};
    EXPECT_TRUE(std::holds_alternative<provider_error>(o));
    return std::holds_alternative<provider_error>(o) ? std::get<provider_error>(o) : none;
}

const session::assistant_message& message_of(const providers::inference_outcome& o) {
    static const session::assistant_message none;
    EXPECT_TRUE(std::holds_alternative<session::assistant_message>(o))
        << (std::holds_alternative<provider_error>(o) ? std::get<provider_error>(o).message : "");
    return std::holds_alternative<session::assistant_message>(o)
               ? std::get<session::assistant_message>(o)
               : none;
}

}  // namespace

TEST(OpenAiProvider, StreamsTextAndToolCallsFromTheLocalServer) {
    http_received seen;
    std::string stream = "openai_text.sse";
    endpoint e(api_kind::openai, [&](const http_received& r) {
        seen = r;
        http_plan p;
        p.pieces = streamed(stream);
        return p;
    });
    recording_sink sink;
    const auto m = message_of(e.infer(sink));
    EXPECT_EQ(m.text, "Hello, wörld!");
    EXPECT_EQ(sink.streamed, "Hello, wörld!");
    EXPECT_EQ(m.usage.cached_input, 1024u);
    EXPECT_EQ(seen.target, "/v1/chat/completions");
    EXPECT_EQ(seen.headers["authorization"], "Bearer sk-test-SECRET");
    auto body = json::parse(seen.body);
    EXPECT_EQ(body.at("model"), "gpt-4o") << "the endpoint's default model";
    EXPECT_EQ(body.at("stream"), true);
    stream = "openai_tools.sse";
    recording_sink tools_sink;
    const auto t = message_of(e.infer(tools_sink));
    ASSERT_EQ(t.tool_calls.size(), 2u);
    EXPECT_EQ(t.tool_calls[1].arguments, R"({"text": "hi"})");
    EXPECT_EQ(e.server.connections(), 1) << "the connection was reused";
}

// llama.cpp's server and Ollama may stream calls without ids: each gets one of Wuhu's, named
// by the step and its index, so that no two calls of a session share an id (a tool service
// takes it as its idempotency key).
TEST(OpenAiProvider, CallsWithoutIdsAreNamedByTheStepAndTheirIndex) {
    std::string stream = saved_stream("openai_tools.sse");
    for (const char* id : {R"("id":"call_Kp1Xw2",)", R"("id":"call_Zq8Rt5",)"}) {
        stream.replace(stream.find(id), std::string(id).size(), "");
    }
    endpoint e(api_kind::openai, [&](const http_received&) {
        http_plan p;
        p.pieces = {{0ms, stream}};
        return p;
    });
    for (std::uint64_t step : {3u, 4u}) {
        recording_sink sink;
        providers::inference_request req;
        req.step = step;
        const auto m = message_of(e.infer(sink, req));
        ASSERT_EQ(m.tool_calls.size(), 2u);
        EXPECT_EQ(m.tool_calls[0].id.str(), "call_" + std::to_string(step) + "_0");
        EXPECT_EQ(m.tool_calls[1].id.str(), "call_" + std::to_string(step) + "_1");
    }
}

TEST(AnthropicProvider, StreamsTextAndToolUseFromTheLocalServer) {
    http_received seen;
    std::string stream = "anthropic_text.sse";
    endpoint e(api_kind::anthropic, [&](const http_received& r) {
        seen = r;
        http_plan p;
        p.pieces = streamed(stream);
        return p;
    });
    recording_sink sink;
    const auto m = message_of(e.infer(sink));
    EXPECT_EQ(m.text, "Hello, wörld!");
    EXPECT_EQ(m.usage, (session::token_usage{25, 3000, 15, 1200}));
    EXPECT_EQ(seen.target, "/v1/messages");
    EXPECT_EQ(seen.headers["x-api-key"], "sk-test-SECRET");
    EXPECT_EQ(seen.headers["anthropic-version"], "2023-06-01");
    EXPECT_FALSE(seen.headers.contains("authorization"));
    auto body = json::parse(seen.body);
    EXPECT_EQ(body.at("system"), "Be brief.");
    EXPECT_EQ(body.at("max_tokens"), 4096);
    stream = "anthropic_tools.sse";
    recording_sink tools_sink;
    const auto t = message_of(e.infer(tools_sink));
    ASSERT_EQ(t.tool_calls.size(), 2u);
    EXPECT_EQ(t.tool_calls[0].name, "get_weather");
}

TEST(OpenAiProvider, ErrorAnswersAreSortedAndNeverCarryTheKey) {
    http_plan next;
    endpoint e(api_kind::openai, [&](const http_received&) { return next; });
    recording_sink sink;
    next = answer(429, R"({"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}})");
    next.headers.emplace_back("Retry-After", "7");
    auto limited = error_of(e.infer(sink));
    EXPECT_EQ(limited.kind, provider_error_kind::transient);
    EXPECT_EQ(limited.retry_after, std::chrono::milliseconds(7000));
    next = answer(500, R"({"error":{"message":"The server had an error","type":"server_error"}})");
    EXPECT_EQ(error_of(e.infer(sink)).kind, provider_error_kind::transient);
    next = answer(400, R"({"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}})");
    EXPECT_EQ(error_of(e.infer(sink)).kind, provider_error_kind::context_overflow);
    next = answer(401, R"({"error":{"message":"Incorrect API key provided: sk-test-SECRET.","type":"invalid_request_error","code":"invalid_api_key"}})");
    auto denied = error_of(e.infer(sink));
    EXPECT_EQ(denied.kind, provider_error_kind::fatal);
    EXPECT_EQ(denied.message.find("SECRET"), std::string::npos) << denied.message;
    EXPECT_NE(denied.message.find("Incorrect API key provided"), std::string::npos);
    next = answer(200, "<html>a proxy's page</html>", "text/html");
    auto html = error_of(e.infer(sink));
    EXPECT_EQ(html.kind, provider_error_kind::fatal);
    EXPECT_NE(html.message.find("not an event stream"), std::string::npos) << html.message;
}

TEST(AnthropicProvider, OverloadedBeforeOrDuringTheStreamIsTransient) {
    bool before = true;
    endpoint e(api_kind::anthropic, [&](const http_received&) {
        if (before) {
            return answer(529, R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})");
        }
        http_plan p;
        p.pieces = streamed("anthropic_overloaded.sse");
        return p;
    });
    recording_sink sink;
    EXPECT_EQ(error_of(e.infer(sink)).kind, provider_error_kind::transient);
    before = false;
    auto during = error_of(e.infer(sink));
    EXPECT_EQ(during.kind, provider_error_kind::transient);
    EXPECT_NE(during.message.find("Overloaded"), std::string::npos) << during.message;
}

TEST(AnthropicProvider, ContextOverflowIsAnOverflow) {
    endpoint e(api_kind::anthropic, [&](const http_received&) {
        return answer(400, R"({"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}})");
    });
    recording_sink sink;
    EXPECT_EQ(error_of(e.infer(sink)).kind, provider_error_kind::context_overflow);
}

TEST(OpenAiProvider, AMalformedOrCutStreamIsTransientAndNeverAMessage) {
    http_plan next;
    endpoint e(api_kind::openai, [&](const http_received&) { return next; });
    next.pieces = {{0ms, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n"},
                   {0ms, "data: this is not json\n\n"}};
    recording_sink sink;
    auto malformed = error_of(e.infer(sink));
    EXPECT_EQ(malformed.kind, provider_error_kind::transient);
    EXPECT_NE(malformed.message.find("malformed"), std::string::npos) << malformed.message;
    // Cut in the middle: the partial text streamed, but the inference failed.
    next = {};
    auto whole = saved_stream("openai_text.sse");
    next.pieces = {{0ms, whole.substr(0, whole.find("data: {", 600))}};
    next.cut = true;
    recording_sink cut_sink;
    auto cut = error_of(e.infer(cut_sink));
    EXPECT_EQ(cut.kind, provider_error_kind::transient) << cut.message;
    EXPECT_FALSE(cut_sink.streamed.empty());
    // Ended cleanly, but before [DONE].
    next = {};
    next.pieces = {{0ms, whole.substr(0, whole.find("data: [DONE]"))}};
    auto early = error_of(e.infer(sink));
    EXPECT_EQ(early.kind, provider_error_kind::transient);
    EXPECT_NE(early.message.find("before its end"), std::string::npos) << early.message;
}

// An abort mid-stream: the connection is closed at once (the server sees it within 50 ms).
TEST(AnthropicProvider, AnAbortMidStreamClosesTheConnectionWithin50Milliseconds) {
    endpoint e(api_kind::anthropic, [&](const http_received&) {
        http_plan p;
        auto all = saved_stream("anthropic_text.sse");
        const auto half = all.find("event: content_block_delta");
        p.pieces = {{0ms, all.substr(0, half)}, {5000ms, all.substr(half)}};
        return p;
    });
    recording_sink sink;
    providers::inference_request req;
    req.context = {msg(llm_role::user, "hi")};
    asio::cancellation_signal abort;
    bool done = false;
    asio::co_spawn(
        e.io, e.provider->infer(std::move(req), sink),
        asio::bind_cancellation_slot(
            abort.slot(), [&](std::exception_ptr, providers::inference_outcome) { done = true; }));
    std::chrono::steady_clock::time_point aborted_at;
    asio::steady_timer t(e.io);
    t.expires_after(300ms);
    t.async_wait([&](boost::system::error_code) {
        aborted_at = std::chrono::steady_clock::now();
        abort.emit(asio::cancellation_type::terminal);
    });
    e.io.run();
    ASSERT_TRUE(done);
    for (int i = 0; i < 100 && e.server.closed_mid_response().empty(); ++i) {
        std::this_thread::sleep_for(5ms);
    }
    const auto closed = e.server.closed_mid_response();
    ASSERT_EQ(closed.size(), 1u);
    EXPECT_LT(closed[0] - aborted_at, 50ms);
}

// Found in review: a summary's segment went with its tool blocks but no tools defined (some
// APIs refuse that); it goes as text. And a secret in the endpoint's own headers (a gateway's
// token) is kept out of error messages like the key.
TEST(AnthropicProvider, SummariesSendTheSegmentAsTextAndErrorsHideTheEndpointsHeaderValues) {
    http_received seen;
    bool fail = false;
    endpoint e(
        api_kind::anthropic,
        [&](const http_received& r) {
            seen = r;
            if (fail) {
                return answer(403, R"({"type":"error","error":{"type":"permission_error","message":"token gw-secret-77 is not allowed"}})");
            }
            http_plan p;
            p.pieces = streamed("anthropic_text.sse");
            return p;
        },
        {{"X-Gateway-Token", "gw-secret-77"}});
    std::vector<session::llm_message> segment = {
        msg(llm_role::user, "weather?"),
        msg(llm_role::assistant, "", {call("c1", "get_weather", R"({"city":"Paris"})")}),
        tool_result_msg("c1", "get_weather", "sunny"),
    };
    std::optional<providers::summary_outcome> out;
    providers::summary_request sreq;
    sreq.segment = segment;
    sreq.step = 3;
    asio::co_spawn(e.io, e.provider->summarize(std::move(sreq)),
                   [&](std::exception_ptr, providers::summary_outcome o) { out = std::move(o); });
    e.io.run();
    ASSERT_TRUE(out && std::holds_alternative<providers::summary_answer>(*out));
    const auto& summary = std::get<providers::summary_answer>(*out);
    EXPECT_EQ(summary.text, "Hello, wörld!");
    EXPECT_EQ(summary.usage, (session::token_usage{25, 3000, 15, 1200}));  // the ledger's
    EXPECT_EQ(summary.model, "claude-sonnet-4-20250514");
    EXPECT_EQ(seen.body.find("tool_use"), std::string::npos) << seen.body;
    EXPECT_EQ(seen.body.find("tool_result"), std::string::npos) << seen.body;
    EXPECT_NE(seen.body.find("[called get_weather with {\\\"city\\\":\\\"Paris\\\"}]"),
              std::string::npos)
        << seen.body;
    EXPECT_NE(seen.body.find("[result of get_weather]"), std::string::npos) << seen.body;
    EXPECT_EQ(seen.headers["x-gateway-token"], "gw-secret-77");
    fail = true;
    recording_sink sink;
    auto denied = error_of(e.infer(sink));
    EXPECT_EQ(denied.kind, provider_error_kind::fatal);
    EXPECT_EQ(denied.message.find("gw-secret-77"), std::string::npos) << denied.message;
}

}  // namespace wuhu::testing
