// The providers file (`--providers`, `WUHU_PROVIDERS`): the model endpoints a worker may
// call, and the routing of a session's `model` setting to one of them.
//
//   {"endpoints": {
//      "openai": {"kind": "openai", "base_url": "https://api.openai.com/v1",
//                 "api_key_env": "OPENAI_API_KEY", "default_model": "gpt-4o-mini"},
//      "claude": {"kind": "anthropic", "base_url": "https://api.anthropic.com/v1",
//                 "api_key_file": "/run/secrets/anthropic", "max_tokens": 8192,
//                 "default_model": "claude-sonnet-4-20250514"},
//      "local":  {"kind": "openai", "base_url": "http://127.0.0.1:8080/v1",
//                 "system_role": "user", "headers": {"X-Team": "agents"},
//                 "ca_file": "/etc/wuhu/ca.pem",
//                 "timeouts_ms": {"connect": 5000, "first_byte": 60000, "idle": 30000}}}}
//
// Endpoint names are 1-64 of [A-Za-z0-9_-]. A key comes from an environment variable or a
// file (its first line), never from the file itself; an endpoint may have none (a local
// server). A session's model `<endpoint>/<model>` goes to that endpoint with that model,
// `<endpoint>` alone to its default model; `scripted` (the default) to the scripted model.
// With a providers file, any other model is an error of the inference (fatal: the transcript
// says which endpoints there are); without one, every model is the scripted one.
#pragma once

#include "providers/http_provider.hpp"
#include "providers/prices.hpp"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wuhu::providers {

namespace asio = boost::asio;

// Reads an environment variable, or a file's contents (nullopt: unset, or unreadable).
using lookup = std::function<std::optional<std::string>(std::string_view)>;

// The endpoints of a providers file, or a message naming what is wrong (exit 2 at start).
boost::system::result<std::vector<endpoint_config>, std::string> parse_providers(
    std::string_view json_text, const lookup& env, const lookup& read_file);

// Where a session's model goes.
struct route {
    std::string endpoint;  // empty: the scripted model
    std::string model;     // as the endpoint names it (empty: its default)
};
// nullopt when the model names no endpoint of `endpoints` (and is not `scripted`).
std::optional<route> route_model(std::string_view model,
                                 const std::map<std::string, provider*>& endpoints);
// Why a session may not be configured with `model`, given the providers file's endpoints (by
// name, whether each has a default model), or nullopt: it is `scripted`, or it names an
// endpoint and a model after it (`openai/gpt-4.1`), or an endpoint with a default model alone.
// No endpoints (no providers file): any model, which the scripted one answers.
std::optional<std::string> unservable_model(std::string_view model,
                                            const std::map<std::string, bool>& endpoints);

// A session's provider: the endpoint its model names, or the scripted one. Each answer, summary
// and usage report is priced by `prices` (prices.hpp) by the model its provider reported.
class routing_provider final : public provider {
  public:
    // `endpoints` empty: every model is the scripted one (no providers file).
    routing_provider(std::unique_ptr<provider> scripted,
                     const std::map<std::string, provider*>& endpoints,
                     const price_table* prices = nullptr)
        : scripted_(std::move(scripted)), endpoints_(endpoints), prices_(prices) {}

    asio::awaitable<inference_outcome> infer(inference_request req, stream_sink& sink) override;
    asio::awaitable<summary_outcome> summarize(summary_request req) override;

  private:
    asio::awaitable<inference_outcome> route(inference_request req, stream_sink& sink);
    asio::awaitable<summary_outcome> route_summary(summary_request req);

    std::unique_ptr<provider> scripted_;
    const std::map<std::string, provider*>& endpoints_;
    const price_table* prices_;
};

}  // namespace wuhu::providers
