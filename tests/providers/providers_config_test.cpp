// The providers file (providers/providers_config.hpp): what it accepts, what it refuses (with a
// message that names the field), and where a session's model goes.
#include "providers/providers_config.hpp"
#include "providers/scripted_provider.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <gtest/gtest.h>

namespace wuhu::testing {

using providers::parse_providers;

namespace {

std::optional<std::string> env(std::string_view name) {
    if (name == "OPENAI_API_KEY") {
        return "sk-from-env\n";  // as a mounted secret often ends
    }
    if (name == "BROKEN_KEY") {
        return "sk-a\rX-Other: b";
    }
    return std::nullopt;
}

std::optional<std::string> file(std::string_view path) {
    if (path == "/secrets/anthropic") {
        return "sk-ant-from-file\n";
    }
    if (path == "/recordings/demo.jsonl") {
        return "";
    }
    return std::nullopt;
}

std::string refusal(const std::string& json) {
    auto r = parse_providers(json, env, file);
    EXPECT_FALSE(r.has_value()) << json;
    return r ? "" : r.error();
}

}  // namespace

TEST(ProvidersConfig, EndpointsTakeTheirKeysFromTheEnvironmentOrAFile) {
    auto r = parse_providers(R"({"endpoints": {
        "openai": {"kind": "openai", "base_url": "https://api.openai.com/v1",
                   "api_key_env": "OPENAI_API_KEY", "default_model": "gpt-4o-mini"},
        "claude": {"kind": "anthropic", "base_url": "https://api.anthropic.com/v1",
                   "api_key_file": "/secrets/anthropic", "max_tokens": 8192},
        "local": {"kind": "openai", "base_url": "http://127.0.0.1:8080/v1", "system_role": "user",
                  "headers": {"X-Team": "agents"},
                  "timeouts_ms": {"connect": 500, "first_byte": 9000, "idle": 7000}}}})",
                             env, file);
    ASSERT_TRUE(r.has_value()) << r.error();
    ASSERT_EQ(r->size(), 3u);
    const auto& openai = (*r)[0];  // in the file's order
    EXPECT_EQ(openai.name, "openai");
    EXPECT_EQ(openai.api_key, "sk-from-env");
    EXPECT_EQ(openai.default_model, "gpt-4o-mini");
    EXPECT_EQ((*r)[1].api, providers::api_kind::anthropic);
    EXPECT_EQ((*r)[1].api_key, "sk-ant-from-file") << "the first line of the file";
    EXPECT_EQ((*r)[1].max_tokens, 8192u);
    const auto& local = (*r)[2];
    EXPECT_EQ(local.api_key, "");
    EXPECT_EQ(local.system_lane_role, session::llm_role::user);
    EXPECT_EQ(local.base.port, "8080");
    EXPECT_EQ(local.headers, (providers::http::header_list{{"X-Team", "agents"}}));
    EXPECT_EQ(local.http.connect_timeout, std::chrono::milliseconds(500));
    EXPECT_EQ(local.http.idle_timeout, std::chrono::milliseconds(7000));
}

TEST(ProvidersConfig, AReplayEndpointPlaysARecordingAndAnyEndpointMayRecord) {
    auto r = parse_providers(R"({"endpoints": {
        "demo": {"kind": "replay", "file": "/recordings/demo.jsonl"},
        "live": {"kind": "openai", "base_url": "http://127.0.0.1:8080/v1",
                 "record": "/recordings/new.jsonl"}}})",
                             env, file);
    ASSERT_TRUE(r.has_value()) << r.error();
    EXPECT_EQ((*r)[0].api, providers::api_kind::replay);
    EXPECT_EQ((*r)[0].replay_file, "/recordings/demo.jsonl");
    EXPECT_EQ((*r)[1].record_to, "/recordings/new.jsonl");
    EXPECT_NE(refusal(R"({"endpoints": {"x": {"kind": "replay", "file": "/nope.jsonl"}}})")
                  .find("\"file\""),
              std::string::npos);
    EXPECT_NE(refusal(R"({"endpoints": {"x": {"kind": "replay", "file": "/recordings/demo.jsonl",
                                              "base_url": "http://h"}}})")
                  .find("only \"file\""),
              std::string::npos);
}

TEST(ProvidersConfig, BadFilesAreRefusedWithAMessageNamingWhatIsWrong) {
    const std::pair<const char*, const char*> cases[] = {
        {"{", "not valid JSON"},
        {R"({"endpoint": {}})", "\"endpoints\""},
        {R"({"endpoints": {"a.b": {}}})", "endpoint name \"a.b\""},
        {R"({"endpoints": {"scripted": {}}})", "not \"scripted\""},
        {R"({"endpoints": {"x": {"kind": "gemini", "base_url": "http://h"}}})", "\"kind\""},
        {R"({"endpoints": {"x": {"kind": "openai"}}})", "\"base_url\" is missing"},
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "ftp://h"}}})", "\"base_url\" is bad"},
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "http://h", "api_key_env": "NOPE"}}})",
         "NOPE"},
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "http://h", "api_key_file": "/nope"}}})",
         "/nope"},
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "http://h", "api_key_env": "BROKEN_KEY"}}})",
         "control character"},
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "http://h", "api_key": "sk-inline"}}})",
         "unknown field \"api_key\""},
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "http://h", "system_role": "bot"}}})",
         "\"system_role\""},
        // Issue 31, defect 11: lane content never takes the system role (the spec's mapping).
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "http://h", "system_role": "system"}}})",
         "the system role is the system prompt's alone"},
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "http://h", "max_tokens": 0}}})",
         "\"max_tokens\""},
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "http://h", "headers": {"A\r\nB": "v"}}}})",
         "header"},
        {R"({"endpoints": {"x": {"kind": "openai", "base_url": "http://h", "timeouts_ms": {"total": 5}}}})",
         "unknown timeout"},
    };
    for (const auto& [json, says] : cases) {
        const auto why = refusal(json);
        EXPECT_NE(why.find(says), std::string::npos) << json << " -> " << why;
    }
}

TEST(ProvidersConfig, AModelGoesToTheEndpointItNamesOrToTheScriptedModel) {
    std::map<std::string, providers::provider*> endpoints{{"openai", nullptr},
                                                            {"local", nullptr}};
    auto r = providers::route_model("openai/gpt-4o", endpoints);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->endpoint, "openai");
    EXPECT_EQ(r->model, "gpt-4o");
    r = providers::route_model("local", endpoints);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->endpoint, "local");
    EXPECT_EQ(r->model, "") << "the endpoint's default model";
    EXPECT_EQ(providers::route_model("local/org/model:7b", endpoints)->model, "org/model:7b");
    EXPECT_EQ(providers::route_model("scripted", endpoints)->endpoint, "");
    EXPECT_FALSE(providers::route_model("gpt-4o", endpoints)) << "names no endpoint";
    EXPECT_EQ(providers::route_model("gpt-4o", {})->endpoint, "") << "no providers file: scripted";
}

// With a providers file, a model that names no endpoint fails the turn (fatal: a diagnostic
// that lists the endpoints), and `scripted` still reaches the scripted model.
TEST(ProvidersConfig, AModelNamingNoEndpointIsAFatalErrorListingTheEndpoints) {
    boost::asio::io_context io;
    runtime::manual_clock clk(session::unix_ms{0});
    providers::endpoint_config c;
    c.name = "local";
    c.base = *providers::http::parse_base_url("http://127.0.0.1:9");
    providers::http_provider local(io.get_executor(), c, clk);
    std::map<std::string, providers::provider*> endpoints{{"local", &local}};
    providers::routing_provider router(
        std::make_unique<providers::scripted_provider>(
            providers::parse_script(R"({"responses":[{"text":"scripted here"}]})").value(), clk),
        endpoints);
    struct : providers::stream_sink {
        void text(std::string_view) override {}
        void tool_call(const providers::tool_call_delta&) override {}
    } sink;
    auto ask = [&](std::string model) {
        providers::inference_request req;
        req.model = std::move(model);
        std::optional<providers::inference_outcome> out;
        boost::asio::co_spawn(io, router.infer(std::move(req), sink),
                              [&](std::exception_ptr, providers::inference_outcome o) {
                                  out = std::move(o);
                              });
        io.restart();
        io.run();
        return std::move(*out);
    };
    auto unknown = ask("gpt-4o");
    ASSERT_TRUE(std::holds_alternative<providers::provider_error>(unknown));
    const auto& e = std::get<providers::provider_error>(unknown);
    EXPECT_EQ(e.kind, providers::provider_error_kind::fatal);
    EXPECT_NE(e.message.find("\"gpt-4o\" names no configured endpoint (local"), std::string::npos)
        << e.message;
    auto scripted = ask("scripted");
    ASSERT_TRUE(std::holds_alternative<session::assistant_message>(scripted));
    EXPECT_EQ(std::get<session::assistant_message>(scripted).text, "scripted here");
}

// Issue 33's ledger: what a stream reports it used, though no answer comes, is priced like an
// answer (by the reported model, else the one asked for), and so is a summary.
TEST(ProvidersConfig, UsageReportsAndSummariesArePricedLikeAnswers) {
    boost::asio::io_context io;
    runtime::manual_clock clk(session::unix_ms{0});
    std::map<std::string, providers::provider*> endpoints;
    const auto parsed = providers::parse_prices(
        R"({"endpoints":{},"prices":{"scripted":{"input":2,"output":10}}})");
    ASSERT_TRUE(parsed.has_value());
    const auto& prices = *parsed;
    providers::routing_provider router(
        std::make_unique<providers::scripted_provider>(
            providers::parse_script(R"({"responses":[{"text":"x","fail_first":[
                {"kind":"transient","usage":{"input":1000000,"output":0}}]}]})")
                .value(),
            clk),
        endpoints, &prices);
    struct : providers::stream_sink {
        void text(std::string_view) override {}
        void tool_call(const providers::tool_call_delta&) override {}
        void usage(const providers::reported_usage& u) override { reports.push_back(u); }
        std::vector<providers::reported_usage> reports;
    } sink;
    providers::inference_request req;
    req.model = "scripted";
    std::optional<providers::inference_outcome> out;
    boost::asio::co_spawn(
        io, router.infer(std::move(req), sink),
        [&](std::exception_ptr, providers::inference_outcome o) { out = std::move(o); });
    io.run();
    ASSERT_TRUE(out && std::holds_alternative<providers::provider_error>(*out));
    ASSERT_EQ(sink.reports.size(), 1u);
    EXPECT_EQ(sink.reports[0].cost, 2'000'000'000u) << "a million input tokens at $2";
    providers::summary_request sreq;
    sreq.model = "scripted";
    sreq.segment.push_back(session::llm_message{});
    sreq.segment.back().content = std::string(400, 'a');
    std::optional<providers::summary_outcome> summary;
    boost::asio::co_spawn(
        io, router.summarize(std::move(sreq)),
        [&](std::exception_ptr, providers::summary_outcome o) { summary = std::move(o); });
    io.restart();
    io.run();
    ASSERT_TRUE(summary && std::holds_alternative<providers::summary_answer>(*summary));
    const auto& s = std::get<providers::summary_answer>(*summary);
    EXPECT_GT(s.usage.input, 0u);
    EXPECT_EQ(s.cost, session::cost_of(s.usage, prices.at("scripted")));
    EXPECT_GT(s.cost, 0u);
}

// One rule judges a configure's model, the one that routes it (the worker that takes the
// configure asks it): an endpoint of the file, then a model after its '/' or the endpoint's
// default model; `scripted` always; any model without a providers file.
TEST(ProvidersConfig, AModelIsJudgedByTheRuleThatRoutesIt) {
    const std::map<std::string, bool> endpoints{{"local", true}, {"bare", false}};
    EXPECT_EQ(providers::unservable_model("scripted", endpoints), std::nullopt);
    EXPECT_EQ(providers::unservable_model("local", endpoints), std::nullopt);
    EXPECT_EQ(providers::unservable_model("local/llama", endpoints), std::nullopt);
    EXPECT_EQ(providers::unservable_model("bare/model-x", endpoints), std::nullopt);
    EXPECT_EQ(providers::unservable_model("gpt-4o", {}), std::nullopt) << "no providers file";
    EXPECT_EQ(providers::unservable_model("gpt-4o", endpoints),
              "names no configured endpoint (bare, local; or scripted)");
    EXPECT_EQ(providers::unservable_model("local/", endpoints),
              "names no model after its endpoint (local/<model>)");
    EXPECT_EQ(providers::unservable_model("bare", endpoints),
              "names an endpoint without a default_model: name the model too (bare/<model>)");
    EXPECT_NE(providers::unservable_model("", endpoints), std::nullopt);
}

}  // namespace wuhu::testing
