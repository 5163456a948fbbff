// Issue 14 end to end: a wuhu-worker process with a providers file whose endpoint is a local
// server speaking the provider's SSE (tests/support/http_server.hpp), and a tools file whose
// tools a separate process serves over NATS (tests/external/tool_service.mjs, written with the
// npm `nats` package), runs a session through NATS: two tool calls (one of them the NATS tool),
// their results in the next request, the answer, idle. An asynchronous NATS tool's outcome
// arrives on the system lane and reaches the next inference. And a bad providers or tools
// file stops the worker at start with exit code 2 and a message.
#include "tests/providers/provider_streams.hpp"
#include "tests/support/http_server.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// The requests the server received, and its answers: the i-th request gets the i-th stream
// (the last one again after that).
struct model_server {
    std::mutex mu;
    std::vector<http_received> seen;
    http_server server;

    explicit model_server(std::vector<std::string> streams)
        : server([this, streams](const http_received& r) {
              std::lock_guard lock(mu);
              seen.push_back(r);
              http_plan p;
              const auto& all = streams[std::min(seen.size(), streams.size()) - 1];
              for (std::size_t at = 0; at < all.size(); at += 64) {
                  p.pieces.push_back({1ms, all.substr(at, 64)});
              }
              return p;
          }) {}
    model_server(const std::string& tools_stream, const std::string& text_stream)
        : model_server(std::vector<std::string>{saved_stream(tools_stream),
                                                saved_stream(text_stream)}) {}
    std::size_t requests() {
        std::lock_guard lock(mu);
        return seen.size();
    }
};

std::string read_all(const std::filesystem::path& p) {
    std::ifstream f(p);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// tests/external/tool_service.mjs, serving the tools of `prefix` until the test ends.
class tool_service_process {
  public:
    explicit tool_service_process(const std::string& prefix) {
        const auto external = std::filesystem::path(WUHU_TEST_DATA) / ".." / "external";
        EXPECT_TRUE(std::filesystem::exists(external / "node_modules" / "nats"))
            << "the npm package nats is not installed in tests/external: scripts/test "
               "installs it (npm install)";
        pid_ = spawn("node", {(external / "tool_service.mjs").string(), prefix},
                     spawn_options{(dir_.path() / "service.log").string(), std::nullopt,
                                   (dir_.path() / "service.out").string()});
        for (int i = 0; i < 300 && !said("\"ready\""); ++i) {
            std::this_thread::sleep_for(100ms);
        }
        EXPECT_TRUE(said("\"ready\"")) << read_all(dir_.path() / "service.log");
    }
    ~tool_service_process() {
        kill(pid_, SIGTERM);
        EXPECT_EQ(wait_exit(pid_, 20s), 0) << read_all(dir_.path() / "service.log");
    }
    tool_service_process(const tool_service_process&) = delete;
    tool_service_process& operator=(const tool_service_process&) = delete;

    bool said(std::string_view text) const {
        return read_all(dir_.path() / "service.out").find(text) != std::string::npos;
    }
    // The JSON lines the service printed (after "ready").
    std::vector<json::value> lines() const {
        std::vector<json::value> out;
        std::istringstream in(read_all(dir_.path() / "service.out"));
        for (std::string line; std::getline(in, line);) {
            if (!line.empty() && line.front() == '{') {
                out.push_back(json::parse(line));
            }
        }
        return out;
    }

  private:
    temp_dir dir_;
    pid_t pid_ = -1;
};

// The tools file of these tests: the service's two tools.
std::filesystem::path write_tools_file(const std::filesystem::path& dir) {
    const auto path = dir / "tools.json";
    std::ofstream(path) << R"({"tools": {
        "get_weather": {"description": "The weather in a city now",
                        "schema": {"type": "object", "required": ["city"],
                                   "properties": {"city": {"type": "string"}}},
                        "idempotent": true, "timeout_ms": 20000},
        "start_build": {"description": "Starts a build; its outcome arrives later",
                        "schema": {"type": "object"}, "timeout_ms": 20000}}})";
    return path;
}

std::filesystem::path write_providers_file(const std::filesystem::path& dir,
                                           const std::string& kind, const std::string& url) {
    const auto path = dir / "providers.json";
    std::ofstream(path) << R"({"endpoints": {"local": {"kind": ")" << kind
                        << R"(", "base_url": ")" << url
                        << R"(/v1", "api_key_env": "WUHU_TEST_MODEL_KEY",
                                      "default_model": "m-default"},
                                  "bare": {"kind": "openai", "base_url": ")"
                        << url << R"(/v1", "api_key_env": "WUHU_TEST_MODEL_KEY"}}})";
    return path;
}

void run_a_session(const std::string& kind, const std::string& tools_stream,
                   const std::string& text_stream, const std::string& key_header,
                   const std::string& key_value, const std::string& call_id) {
    model_server model(tools_stream, text_stream);
    temp_dir dir;
    const auto providers = write_providers_file(dir.path(), kind, model.server.url());
    setenv("WUHU_TEST_MODEL_KEY", "sk-e2e-secret", 1);
    worker_process::config c;
    c.args = {"--providers", providers.string(), "--tools", write_tools_file(dir.path()).string()};
    worker_process w("model" + kind, R"({"responses":[]})", c);
    tool_service_process service(w.prefix());
    w.start();
    unsetenv("WUHU_TEST_MODEL_KEY");
    nats::connection nc(nats_url(), "model-client");
    const std::string s = w.prefix() + ".session.real.";
    // A model that names no endpoint is refused at configure, and changes nothing.
    auto unknown = answer_when_up(nc, s + "configure", R"({"model":"gpt-4o"})");
    EXPECT_EQ(unknown.at("ok"), false) << json::serialize(unknown);
    EXPECT_EQ(unknown.at("error").at("code"), "invalid_settings");
    EXPECT_NE(json::serialize(unknown).find("names no configured endpoint (bare, local"),
              std::string::npos)
        << json::serialize(unknown);
    // Issue 31, defect 11: an endpoint without a model after it, or alone without a default
    // model, was accepted and sent "model": "" to the server.
    for (const auto& [model, why] : std::vector<std::pair<std::string, std::string>>{
             {"local/", "names no model after its endpoint"},
             {"bare", "names an endpoint without a default_model"}}) {
        auto refused = answer_when_up(nc, s + "configure", R"({"model":")" + model + R"("})");
        EXPECT_EQ(refused.at("ok"), false) << model;
        EXPECT_NE(json::serialize(refused).find(why), std::string::npos)
            << json::serialize(refused);
    }
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
    EXPECT_NE(model.seen[0].body.find("The weather in a city now"), std::string::npos)
        << "the NATS tool is offered to the model: " << model.seen[0].body;
    const auto second = model.seen[1].body;
    EXPECT_NE(second.find("\"hi\""), std::string::npos) << "the echo result went back: " << second;
    EXPECT_NE(second.find("Sunny, 21"), std::string::npos)
        << "the NATS tool's answer went back: " << second;
    // The service got the call with the session, the call id and a deadline in its headers.
    std::vector<json::value> calls;
    for (auto& l : service.lines()) {
        if (l.as_object().contains("tool")) {
            calls.push_back(l);
        }
    }
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].at("tool"), "get_weather");
    EXPECT_EQ(calls[0].at("session"), "real");
    EXPECT_EQ(calls[0].at("call").as_string(), call_id);
    EXPECT_EQ(calls[0].at("attempt"), "1");
    EXPECT_EQ(calls[0].at("arguments").at("city"), "Paris");
    EXPECT_GT(std::stoll(std::string(calls[0].at("deadline").as_string())), 1'700'000'000'000LL);
    EXPECT_TRUE(w.has_logged("model endpoint local")) << "the endpoint is logged at start";
    std::ifstream log(w.log());
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("sk-e2e-secret"), std::string::npos) << "the key is never logged";
    EXPECT_EQ(w.stop(), 0);
}

}  // namespace

TEST(ProviderProcess, AWorkerRunsASessionOnAnOpenAiEndpointWithANatsToolToIdle) {
    run_a_session("openai", "openai_tools.sse", "openai_text.sse", "authorization",
                  "Bearer sk-e2e-secret", "call_Kp1Xw2");
}

TEST(ProviderProcess, AWorkerRunsASessionOnAnAnthropicEndpointWithANatsToolToIdle) {
    run_a_session("anthropic", "anthropic_tools.sse", "anthropic_text.sse", "x-api-key",
                  "sk-e2e-secret", "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
}

namespace {

// An OpenAI stream of one tool call, and one of a text.
std::string openai_call_stream(const std::string& id, const std::string& name) {
    const std::string head = R"(data: {"id":"c1","object":"chat.completion.chunk","created":1,)"
                             R"("model":"m","choices":[{"index":0,"delta":)";
    return head + R"({"role":"assistant","content":null,"tool_calls":[{"index":0,"id":")" + id +
           R"(","type":"function","function":{"name":")" + name +
           R"(","arguments":"{}"}}]},"finish_reason":null}]})" + "\n\n" + head +
           R"({},"finish_reason":"tool_calls"}]})" + "\n\ndata: [DONE]\n\n";
}

std::string openai_text_stream(const std::string& text) {
    const std::string head = R"(data: {"id":"c2","object":"chat.completion.chunk","created":1,)"
                             R"("model":"m","choices":[{"index":0,"delta":)";
    return head + R"({"role":"assistant","content":")" + text +
           R"("},"finish_reason":null}]})" + "\n\n" + head +
           R"({},"finish_reason":"stop"}]})" + "\n\ndata: [DONE]\n\n";
}

}  // namespace

// An asynchronous tool: its service answers at once, and later sends the outcome to the
// session's system lane, where it wakes the session and reaches the next inference.
TEST(ProviderProcess, AnAsynchronousNatsToolsOutcomeArrivesOnTheSystemLaneAndReachesTheModel) {
    model_server model({openai_call_stream("call_b1", "start_build"),
                        openai_text_stream("Started; I will report back."),
                        openai_text_stream("The build passed.")});
    temp_dir dir;
    const auto providers = write_providers_file(dir.path(), "openai", model.server.url());
    setenv("WUHU_TEST_MODEL_KEY", "sk-e2e-secret", 1);
    worker_process::config c;
    c.args = {"--providers", providers.string(), "--tools", write_tools_file(dir.path()).string()};
    worker_process w("asynctool", R"({"responses":[]})", c);
    tool_service_process service(w.prefix());
    w.start();
    unsetenv("WUHU_TEST_MODEL_KEY");
    nats::connection nc(nats_url(), "asynctool-client");
    const std::string s = w.prefix() + ".session.build.";
    // configure chooses the session's tools: a name no tool has is refused.
    auto unknown = answer_when_up(nc, s + "configure", R"({"tools":["start_build","deploy"]})");
    EXPECT_EQ(unknown.at("error").at("code"), "invalid_settings") << json::serialize(unknown);
    EXPECT_NE(json::serialize(unknown).find("no tool is named deploy"), std::string::npos);
    auto chosen = answer_when_up(nc, s + "configure",
                                 R"({"model":"local/m-1","tools":["start_build"]})");
    ASSERT_EQ(chosen.at("ok"), true) << json::serialize(chosen);
    auto queued = answer_when_up(nc, s + "enqueue",
                                 R"({"lane":"followUp","author":{"id":"u","name":"Ann",)"
                                 R"("kind":"human"},"content":"build it"})");
    ASSERT_EQ(queued.at("ok"), true) << json::serialize(queued);
    // The callback is durable once the service has its reply; then the session settles.
    for (int i = 0; i < 200 && !service.said("\"callback\""); ++i) {
        std::this_thread::sleep_for(100ms);
    }
    ASSERT_TRUE(service.said(R"("callback":{"ok":true)"))
        << read_all(std::filesystem::path(w.log()));
    ASSERT_TRUE(wait_idle(nc, s + "subscribe"));
    auto now = answer_when_up(nc, s + "subscribe");
    const auto& transcript = now.at("patch").at("transcript").as_array();
    std::string started, outcome_then;
    bool outcome_seen = false;
    for (const auto& e : transcript) {
        const std::string text = json::serialize(e);
        if (e.at("type") == "tool_result") {
            started = text;
        }
        if (text.find("build-7 finished: all 42 tests passed") != std::string::npos) {
            outcome_seen = true;
        } else if (outcome_seen && e.at("type") == "assistant_message") {
            outcome_then = e.at("text").as_string();
        }
    }
    EXPECT_NE(started.find("started build-7"), std::string::npos) << json::serialize(now);
    EXPECT_TRUE(outcome_seen) << "the outcome is in the transcript: " << json::serialize(now);
    EXPECT_FALSE(outcome_then.empty()) << "an answer follows the outcome: " << json::serialize(now);
    // The model saw the outcome in a later request.
    std::lock_guard lock(model.mu);
    ASSERT_GE(model.seen.size(), 2u);
    // Only the chosen tool was offered.
    const auto offered = json::parse(model.seen[0].body).at("tools");
    ASSERT_EQ(offered.as_array().size(), 1u) << offered;
    EXPECT_EQ(offered.at(0).at("function").at("name"), "start_build");
    bool reached = false;
    for (std::size_t i = 1; i < model.seen.size(); ++i) {
        const auto& body = model.seen[i].body;
        reached = reached || body.find("build-7 finished: all 42 tests passed") != std::string::npos;
    }
    EXPECT_TRUE(reached) << "the outcome reached an inference";
    EXPECT_TRUE(w.has_logged("tool start_build: served on " + w.prefix() +
                             ".tools.start_build"));
    EXPECT_EQ(w.stop(), 0);
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

TEST(ProviderProcess, ABadToolsFileStopsTheWorkerWithExitCode2AndAMessage) {
    temp_dir dir;
    const auto data = "sqlite://" + (dir.path() / "data").string();
    const std::pair<const char*, const char*> cases[] = {
        {R"({"tools": {"t": {"description": "d"}}})", "\\\"schema\\\" must be"},
        {R"({"tools": {"echo": {"description": "d", "schema": {"type": "object"}}}})",
         "a built-in tool's entry sets only approval"},
        {R"({"tools": {"echo": {"approval": "maybe"}}})", "\\\"approval\\\" must be"},
        {"[1, 2", "not JSON"},
    };
    int n = 0;
    for (const auto& [file, says] : cases) {
        const auto path = dir.path() / ("tools" + std::to_string(n) + ".json");
        const auto log = dir.path() / ("worker" + std::to_string(n++) + ".log");
        std::ofstream(path) << file;
        pid_t p = spawn(WUHU_WORKER_BIN,
                        {"--store", data, "--nats", nats_url(), "--tools", path.string()},
                        log.string());
        EXPECT_EQ(wait_exit(p, 15s), 2) << file;
        const std::string text = read_all(log);
        EXPECT_NE(text.find(says), std::string::npos) << text;
    }
}

}  // namespace wuhu::testing

namespace wuhu::testing {

// Issue 30: a provider that streams without end (here: 8 MB of text, a piece a millisecond) is
// cut at the entry limit: the stream is stopped, the answer stored cut with its note, the turn
// ends (no retry, one request), and the session loads again after the worker restarts.
TEST(ProviderProcess, AnAnswerStreamedWithoutEndIsCutAtTheLimitAndTheSessionLoadsAgain) {
    const std::string head = R"(data: {"id":"c3","object":"chat.completion.chunk","created":1,)"
                             R"("model":"m","choices":[{"index":0,"delta":)";
    http_server server([&](const http_received&) {
        http_plan p;
        p.pieces.push_back({0ms, head + R"({"role":"assistant","content":""},"finish_reason":null}]})" + "\n\n"});
        const std::string piece =
            head + R"({"content":")" + std::string(1000, 'w') + R"("},"finish_reason":null}]})" + "\n\n";
        for (int i = 0; i < 8000; ++i) {
            p.pieces.push_back({1ms, piece});
        }
        return p;
    });
    temp_dir dir;
    const auto providers = write_providers_file(dir.path(), "openai", server.url());
    setenv("WUHU_TEST_MODEL_KEY", "sk-endless", 1);
    worker_process::config c;
    c.args = {"--providers", providers.string(), "--max-entry-bytes", "64KiB"};
    worker_process w("endless", R"({"responses":[]})", c);
    w.start();
    nats::connection nc(nats_url(), "endless-client");
    const std::string s = w.prefix() + ".session.endless.";
    ASSERT_EQ(answer_when_up(nc, s + "configure", R"({"model":"local/m-1"})").at("ok"), true);
    ASSERT_EQ(answer_when_up(nc, s + "enqueue",
                             R"({"lane":"followUp","content":"talk for ever"})")
                  .at("ok"),
              true);
    ASSERT_TRUE(wait_idle(nc, s + "subscribe"));
    auto answer_of = [&](const json::value& reply) {
        std::string text;
        for (const auto& e : reply.at("patch").at("transcript").as_array()) {
            if (e.at("type") == "assistant_message") {
                text = e.at("text").as_string();
            }
        }
        return text;
    };
    const auto before = answer_when_up(nc, s + "subscribe");
    const auto text = answer_of(before);
    EXPECT_LE(text.size(), 64u * 1024);
    EXPECT_GT(text.size(), 60u * 1024);
    EXPECT_TRUE(text.ends_with("[cut by the runtime: this answer passed the limit of 65536 bytes]"))
        << text.substr(text.size() > 200 ? text.size() - 200 : 0);
    EXPECT_EQ(server.requests(), 1) << "a cut answer is the turn's last: no retry";
    EXPECT_EQ(w.stop(), 0);
    w.start();
    const auto after = answer_when_up(nc, s + "subscribe");
    ASSERT_EQ(after.at("ok"), true) << "the session loads again";
    EXPECT_EQ(answer_of(after), text);
    EXPECT_EQ(after.at("patch").at("transcript").as_array().size(),
              before.at("patch").at("transcript").as_array().size());
    unsetenv("WUHU_TEST_MODEL_KEY");
    EXPECT_EQ(w.stop(), 0);
}

}  // namespace wuhu::testing
