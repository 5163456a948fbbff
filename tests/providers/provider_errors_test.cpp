// How provider failures are sorted for the loop's policy (providers/provider_errors.hpp), from
// the error bodies OpenAI, Anthropic, vLLM and llama.cpp's server document.
#include "providers/provider_errors.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

using namespace std::chrono_literals;
using providers::classify_http;
using providers::provider_error_kind;

TEST(ProviderErrors, RateLimitsOverloadAndServerErrorsAreTransientWithTheServersWait) {
    auto e = classify_http("openai", 429,
                           R"({"error":{"message":"Rate limit reached for gpt-4o","type":"requests","code":"rate_limit_exceeded"}})",
                           20s, "");
    EXPECT_EQ(e.kind, provider_error_kind::transient);
    EXPECT_EQ(e.retry_after, std::chrono::milliseconds(20s));
    EXPECT_EQ(e.message, "openai answered HTTP 429: Rate limit reached for gpt-4o");
    for (int status : {408, 409, 500, 502, 503, 504, 529}) {
        EXPECT_EQ(classify_http("anthropic", status,
                                R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})",
                                std::nullopt, "")
                      .kind,
                  provider_error_kind::transient)
            << status;
    }
}

TEST(ProviderErrors, EachProvidersContextOverflowShapeIsAnOverflow) {
    const char* bodies[] = {
        // OpenAI
        R"({"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}})",
        // Anthropic
        R"({"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}})",
        // vLLM
        R"({"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).","type":"BadRequestError","param":null,"code":400})",
        // llama.cpp's server
        R"({"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}})",
    };
    for (const char* body : bodies) {
        EXPECT_EQ(classify_http("p", 400, body, std::nullopt, "").kind,
                  provider_error_kind::context_overflow)
            << body;
    }
    EXPECT_EQ(classify_http("anthropic", 413,
                            R"({"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}})",
                            std::nullopt, "")
                  .kind,
              provider_error_kind::context_overflow);
}

TEST(ProviderErrors, ClientErrorsAreFatalWithTheProvidersMessageAndNeverTheKey) {
    const auto e = classify_http(
        "openai", 401,
        R"({"error":{"message":"Incorrect API key provided: sk-live-123456. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}})",
        std::nullopt, "sk-live-123456");
    EXPECT_EQ(e.kind, provider_error_kind::fatal);
    EXPECT_EQ(e.message.find("sk-live-123456"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("Incorrect API key provided: ***"), std::string::npos) << e.message;
    for (int status : {400, 403, 404, 422}) {
        EXPECT_EQ(classify_http("p", status, "not json at all", std::nullopt, "").kind,
                  provider_error_kind::fatal)
            << status;
    }
    EXPECT_EQ(classify_http("p", 404, "<html>no such page</html>", std::nullopt, "").message,
              "p answered HTTP 404: <html>no such page</html>");
}

TEST(ProviderErrors, StreamErrorsAreSortedByType) {
    using providers::classify_stream_error;
    EXPECT_EQ(classify_stream_error("anthropic", "overloaded_error", "Overloaded", "").kind,
              provider_error_kind::transient);
    EXPECT_EQ(classify_stream_error("anthropic", "api_error", "Internal", "").kind,
              provider_error_kind::transient);
    EXPECT_EQ(classify_stream_error("anthropic", "invalid_request_error", "bad", "").kind,
              provider_error_kind::fatal);
    EXPECT_EQ(classify_stream_error("openai", "context_length_exceeded", "too long", "").kind,
              provider_error_kind::context_overflow);
}

TEST(ProviderErrors, RetryAfterIsSecondsOrAnHttpDate) {
    using providers::parse_retry_after;
    EXPECT_EQ(parse_retry_after("20", 0), std::chrono::milliseconds(20s));
    EXPECT_EQ(parse_retry_after(" 1.5 ", 0), std::chrono::milliseconds(1500));
    // 1994-11-06T08:49:37Z is 784111777 s after the epoch.
    EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111777000 - 3000),
              std::chrono::milliseconds(3000));
    EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111777000 + 5000),
              std::chrono::milliseconds(0))
        << "a date in the past: no wait";
    for (const char* bad : {"", "soon", "-1", "1e999", "Sun, 06 Foo 1994 08:49:37 GMT", "12abc"}) {
        EXPECT_FALSE(parse_retry_after(bad, 0).has_value()) << bad;
    }
}

TEST(ProviderErrors, LongMessagesAreCutOnACharacterBoundary) {
    const std::string text = std::string(9, 'a') + "é" + "zz";
    EXPECT_EQ(runtime::redacted(text, "", 10), std::string(9, 'a') + "…");
    EXPECT_EQ(runtime::redacted("key=K and K", "K"), "key=*** and ***");
}

// Found in review: Anthropic's "input plus max_tokens past the window" is an overflow (it was
// fatal); OpenAI's 429 insufficient_quota is fatal (retrying spent six attempts); a body cut
// in the middle of the key does not show its first part.
TEST(ProviderErrors, ReviewedShapesOverflowQuotaAndACutKey) {
    EXPECT_EQ(classify_http("anthropic", 400,
                            R"({"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length or `max_tokens` and try again"}})",
                            std::nullopt, "")
                  .kind,
              provider_error_kind::context_overflow);
    EXPECT_EQ(classify_http("openai", 429,
                            R"({"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","code":"insufficient_quota"}})",
                            std::nullopt, "")
                  .kind,
              provider_error_kind::fatal);
    EXPECT_EQ(runtime::redacted("the key is sk-live-12", "sk-live-123456"), "the key is ***");
}

}  // namespace wuhu::testing
