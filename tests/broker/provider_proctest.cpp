// Issue 14 end to end: a wuhu-worker process with a providers file whose endpoint is a local
// server speaking the provider's SSE (tests/support/http_server.hpp) runs a session through
// NATS: two tool calls, their results in the next request, the answer, idle. And a bad
// providers file stops the worker at start with exit code 2 and a message.
#include "tests/support/http_server.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/worker/provider_streams.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <mutex>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// The requests the server received, and its answers: the tools stream first, then the text.
struct model_server {
    std::mutex mu;
    std::vector<http_received> seen;
    http_server server;

    explicit model_server(std::string tools_stream, std::string text_stream)
        : server([this, tools_stream, text_stream](const http_received& r) {
              std::lock_guard lock(mu);
              seen.push_back(r);
              http_plan p;
              const auto all = saved_stream(seen.size() == 1 ? tools_stream : text_stream);
              for (std::size_t at = 0; at < all.size(); at += 64) {
                  p.pieces.push_back({1ms, all.substr(at, 64)});
              }
              return p;
          }) {}
};

void run_a_session(const std::string& kind, const std::string& tools_stream,
                   const std::string& text_stream, const std::string& key_header,
                   const std::string& key_value) {
    model_server model(tools_stream, text_stream);
    temp_dir dir;
    const auto providers = dir.path() / "providers.json";
    std::ofstream(providers) << R"({"endpoints": {"local": {"kind": ")" << kind
                             << R"(", "base_url": ")" << model.server.url()
                             << R"(/v1", "api_key_env": "WUHU_TEST_MODEL_KEY",
                                      "default_model": "m-default"}}})";
    setenv("WUHU_TEST_MODEL_KEY", "sk-e2e-secret", 1);
    worker_process::config c;
    c.args = {"--providers", providers.string()};
    worker_process w("model" + kind, R"({"responses":[]})", c);
    w.start();
    unsetenv("WUHU_TEST_MODEL_KEY");
    nats::connection nc(nats_url(), "model-client");
    const std::string s = w.prefix() + ".session.real.";
    // A model that names no endpoint is refused at configure, and changes nothing.
    auto unknown = answer_when_up(nc, s + "configure", R"({"model":"gpt-4o"})");
    EXPECT_EQ(unknown.at("ok"), false) << json::serialize(unknown);
    EXPECT_EQ(unknown.at("error").at("code"), "invalid_settings");
    EXPECT_NE(json::serialize(unknown).find("names no configured endpoint (local"),
              std::string::npos)
        << json::serialize(unknown);
    auto configured = answer_when_up(nc, s + "configure", R"({"model":"local/m-1"})");
    ASSERT_EQ(configured.at("ok"), true) << json::serialize(configured);
    auto queued = answer_when_up(
        nc, s + "enqueue",
        R"({"lane":"followUp","author":{"id":"u","name":"Ann","kind":"human"},"content":"go"})");
    ASSERT_EQ(queued.at("ok"), true) << json::serialize(queued);
    ASSERT_TRUE(wait_idle(nc, s + "subscribe"));
    auto now = answer_when_up(nc, s + "subscribe");
    std::vector<std::string> kinds;
    std::string answer;
    int tool_results = 0;
    for (const auto& e : now.at("patch").at("transcript").as_array()) {
        kinds.emplace_back(e.at("type").as_string());
        tool_results += e.at("type") == "tool_result";
        if (e.at("type") == "assistant_message" && !e.at("text").as_string().empty()) {
            answer = e.at("text").as_string();
        }
    }
    EXPECT_EQ(tool_results, 2) << json::serialize(now);
    EXPECT_EQ(answer, "Hello, wörld!") << json::serialize(now);
    std::lock_guard lock(model.mu);
    ASSERT_EQ(model.seen.size(), 2u);
    EXPECT_EQ(model.seen[0].headers[key_header], key_value);
    auto first = json::parse(model.seen[0].body);
    EXPECT_EQ(first.at("model"), "m-1") << "the model after the endpoint's name";
    EXPECT_EQ(first.at("stream"), true);
    const auto second = model.seen[1].body;
    EXPECT_NE(second.find("\"hi\""), std::string::npos) << "the echo result went back: " << second;
    EXPECT_TRUE(w.has_logged("model endpoint local")) << "the endpoint is logged at start";
    std::ifstream log(w.log());
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("sk-e2e-secret"), std::string::npos) << "the key is never logged";
    EXPECT_EQ(w.stop(), 0);
}

}  // namespace

TEST(ProviderProcess, AWorkerRunsASessionOnAnOpenAiEndpointToIdle) {
    run_a_session("openai", "openai_tools.sse", "openai_text.sse", "authorization",
                  "Bearer sk-e2e-secret");
}

TEST(ProviderProcess, AWorkerRunsASessionOnAnAnthropicEndpointToIdle) {
    run_a_session("anthropic", "anthropic_tools.sse", "anthropic_text.sse", "x-api-key",
                  "sk-e2e-secret");
}

TEST(ProviderProcess, ABadProvidersFileStopsTheWorkerWithExitCode2AndAMessage) {
    temp_dir dir;
    const auto data = "sqlite://" + (dir.path() / "data").string();
    const std::pair<const char*, const char*> cases[] = {
        {R"({"endpoints": {"x": {"kind": "gemini", "base_url": "http://h"}}})",
         "must be \\\"openai\\\","},  // as the JSON log line escapes it
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "http://h",
                                "api_key_env": "WUHU_TEST_NO_SUCH_KEY"}}})",
         "WUHU_TEST_NO_SUCH_KEY"},
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "https://h",
                                "ca_file": "/no/such/ca.pem"}}})",
         "/no/such/ca.pem"},
    };
    int n = 0;
    for (const auto& [file, says] : cases) {
        const auto path = dir.path() / ("providers" + std::to_string(n) + ".json");
        const auto log = dir.path() / ("worker" + std::to_string(n++) + ".log");
        std::ofstream(path) << file;
        pid_t p = spawn(WUHU_WORKER_BIN, {"--store", data, "--providers", path.string()},
                        log.string());
        EXPECT_EQ(wait_exit(p, 15s), 2) << file;
        std::ifstream in(log);
        const std::string text((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
        EXPECT_NE(text.find(says), std::string::npos) << text;
    }
}

}  // namespace wuhu::testing
