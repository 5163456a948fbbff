// The OpenAI Chat Completions codec (providers/openai.hpp) against streams saved as OpenAI
// documents them (tests/data/providers/openai_*.sse).
#include "providers/openai.hpp"
#include "session/rules.hpp"
#include "tests/providers/provider_streams.hpp"

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace wuhu::testing {

namespace json = boost::json;
using session::llm_role;
using providers::openai_stream;

TEST(OpenAi, TextStreamsAsDeltasAndUsageSeparatesCachedTokens) {
    recording_sink sink;
    openai_stream s(sink, "gpt-4o-mini");
    feed_stream(s, saved_stream("openai_text.sse"));
    ASSERT_TRUE(s.done());
    ASSERT_FALSE(s.error()) << s.error()->message;
    EXPECT_EQ(sink.streamed, "Hello, wörld!");
    EXPECT_EQ(sink.text_deltas, 3);
    const auto m = s.message();
    EXPECT_EQ(m.text, "Hello, wörld!");
    EXPECT_TRUE(m.tool_calls.empty());
    EXPECT_EQ(m.usage, (session::token_usage{176, 1024, 5, 0}));
    EXPECT_EQ(m.model, "gpt-4o-mini-2024-07-18") << "the model that answered";
    ASSERT_EQ(sink.usage_reports.size(), 1u) << "reported once, at the end";
    EXPECT_EQ(sink.usage_reports[0].usage, m.usage);
    EXPECT_EQ(sink.usage_reports[0].model, m.model);
}

// Issue 33: a reasoning model reports the part of its output it spent reasoning; the ledger
// keeps it (priced as output).
TEST(OpenAi, ReasoningTokensAreKeptAsAPartOfTheOutput) {
    recording_sink sink;
    openai_stream s(sink, "o4-mini");
    feed_stream(
        s, R"(data: {"model":"o4-mini-2025-04-16","choices":[{"index":0,"delta":{"content":"42"}}]}

data: {"model":"o4-mini-2025-04-16","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}

data: {"model":"o4-mini-2025-04-16","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":300,"completion_tokens_details":{"reasoning_tokens":256}}}

data: [DONE]

)");
    ASSERT_TRUE(s.done());
    ASSERT_FALSE(s.error());
    EXPECT_EQ(s.message().usage, (session::token_usage{50, 0, 300, 0, 256}));
    EXPECT_EQ(s.message().model, "o4-mini-2025-04-16");
}

TEST(OpenAi, SeveralToolCallsStreamedInPiecesAreAssembledInOrder) {
    recording_sink sink;
    openai_stream s(sink, "gpt-4o");
    feed_stream(s, saved_stream("openai_tools.sse"), 3);
    ASSERT_TRUE(s.done());
    ASSERT_FALSE(s.error());
    const auto m = s.message();
    EXPECT_EQ(m.text, "");
    EXPECT_EQ(m.tool_calls, (std::vector{call("call_Kp1Xw2", "get_weather", R"({"city": "Paris"})"),
                                         call("call_Zq8Rt5", "echo", R"({"text": "hi"})")}));
    EXPECT_EQ(m.usage, (session::token_usage{310, 0, 41, 0}));
    // Every piece reached the sink with its call's id and name.
    std::string args0;
    for (const auto& d : sink.calls) {
        if (d.id == "call_Kp1Xw2") {
            EXPECT_EQ(d.name, "get_weather");
            args0 += d.arguments;
        }
    }
    EXPECT_EQ(args0, R"({"city": "Paris"})");
}

// Issue 31, defect 12: two tool calls of one message with the same id made the session refuse
// the message (invalid_entry) on every retry. The repeat gets an id of the worker's own.
TEST(OpenAi, ToolCallsWithTheSameIdGetIdsOfTheirOwn) {
    recording_sink sink;
    openai_stream s(sink, "gpt-4o");
    feed_stream(s, R"(data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_same","type":"function","function":{"name":"echo","arguments":"{}"}}]}}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_same","type":"function","function":{"name":"echo","arguments":"{}"}}]}}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]

)");
    ASSERT_TRUE(s.done());
    ASSERT_FALSE(s.error()) << s.error()->message;
    const auto m = s.message();
    ASSERT_EQ(m.tool_calls.size(), 2u);
    EXPECT_EQ(m.tool_calls[0].id.str(), "call_same");
    EXPECT_NE(m.tool_calls[1].id, m.tool_calls[0].id);
    EXPECT_TRUE(session::plan_append_assistant(session::session_state{}, m, session::unix_ms{0}))
        << "the session takes the message";
}

TEST(OpenAi, AStreamWithoutDoneIsNotDone) {
    recording_sink sink;
    openai_stream s(sink, "m");
    auto cut = saved_stream("openai_text.sse");
    cut.resize(cut.find("data: [DONE]"));
    feed_stream(s, cut);
    EXPECT_FALSE(s.done()) << "the caller sees the stream was cut before its end";
    EXPECT_EQ(sink.streamed, "Hello, wörld!");
}

TEST(OpenAi, AnErrorChunkIsClassifiedAndEndsTheStream) {
    recording_sink sink;
    openai_stream s(sink, "m", "sk-secret");
    feed_stream(s, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n"
                   "data: {\"error\":{\"message\":\"The server had an error (key sk-secret)\","
                   "\"type\":\"server_error\",\"code\":null}}\n\n"
                   "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"more\"}}]}\n\n");
    ASSERT_TRUE(s.done());
    ASSERT_TRUE(s.error());
    EXPECT_EQ(s.error()->kind, providers::provider_error_kind::transient);
    EXPECT_EQ(s.error()->message.find("sk-secret"), std::string::npos) << s.error()->message;
    EXPECT_NE(s.error()->message.find("The server had an error"), std::string::npos);
    EXPECT_EQ(sink.streamed, "par") << "nothing after the error";
}

TEST(OpenAi, AChunkThatIsNotJsonIsAMalformedStream) {
    recording_sink sink;
    openai_stream s(sink, "m");
    feed_stream(s, "data: {\"choices\":[]}\n\ndata: <html>oops\n\n");
    ASSERT_TRUE(s.error());
    EXPECT_EQ(s.error()->kind, providers::provider_error_kind::transient);
    EXPECT_NE(s.error()->message.find("malformed stream"), std::string::npos);
}

TEST(OpenAi, TheRequestCarriesMessagesToolsAndStreamOptions) {
    providers::inference_request req;
    req.context = {
        msg(llm_role::system, "You are terse."),
        msg(llm_role::user, "Ann <ann@x.io> 26/11/24 10:00\n\nweather?"),
        msg(llm_role::developer, "asyncTaskNotification\n\ntask 7 done"),
        msg(llm_role::assistant, "", {call("c1", "get_weather", R"({"city":"Paris"})")}),
        tool_result_msg("c1", "get_weather", "sunny", false),
        msg(llm_role::assistant, "It is sunny."),
    };
    req.tools = {{"get_weather", "The weather in a city",
                  R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"}};
    providers::openai_request_options o;
    o.model = "gpt-4o";
    auto body = json::parse(providers::openai_request_body(req, o)).as_object();
    EXPECT_EQ(body.at("model"), "gpt-4o");
    EXPECT_EQ(body.at("stream"), true);
    EXPECT_EQ(body.at("stream_options").at("include_usage"), true);
    const auto& ms = body.at("messages").as_array();
    ASSERT_EQ(ms.size(), 6u);
    EXPECT_EQ(ms[0], (json::object{{"role", "system"}, {"content", "You are terse."}}));
    EXPECT_EQ(ms[1].at("role"), "user");
    EXPECT_EQ(ms[2].at("role"), "developer") << "the system lane";
    EXPECT_EQ(ms[3].at("content"), nullptr);
    EXPECT_EQ(ms[3].at("tool_calls").at(0),
              (json::object{{"id", "c1"},
                            {"type", "function"},
                            {"function", json::object{{"name", "get_weather"},
                                                      {"arguments", R"({"city":"Paris"})"}}}}));
    EXPECT_EQ(ms[4], (json::object{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}));
    EXPECT_EQ(ms[5].at("content"), "It is sunny.");
    const auto& tool = body.at("tools").at(0);
    EXPECT_EQ(tool.at("type"), "function");
    EXPECT_EQ(tool.at("function").at("name"), "get_weather");
    EXPECT_EQ(tool.at("function").at("parameters").at("required").at(0), "city");
    // Servers without the developer role take the system lane as user (or system).
    o.system_lane_role = llm_role::user;
    body = json::parse(providers::openai_request_body(req, o)).as_object();
    EXPECT_EQ(body.at("messages").at(2).at("role"), "user");
    EXPECT_FALSE(body.contains("max_completion_tokens"));
}

// Some OpenAI-compatible servers send each tool call whole, in a chunk of its own, without
// `index`: each is a call of its own, not the arguments of the first run together.
TEST(OpenAi, ToolCallsWithoutAnIndexAreKeptApartByTheirIds) {
    recording_sink sink;
    openai_stream s(sink, "m");
    feed_stream(s,
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"a\",\"type\":"
                "\"function\",\"function\":{\"name\":\"echo\",\"arguments\":\"{\\\"text\\\":\\\"1\\\"}\"}}]}}]}\n\n"
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"b\",\"type\":"
                "\"function\",\"function\":{\"name\":\"clock\",\"arguments\":\"{}\"}}]}}]}\n\n"
                "data: [DONE]\n\n");
    ASSERT_TRUE(s.done());
    ASSERT_FALSE(s.error());
    EXPECT_EQ(s.message().tool_calls,
              (std::vector{call("a", "echo", R"({"text":"1"})"), call("b", "clock", "{}")}));
}

}  // namespace wuhu::testing
