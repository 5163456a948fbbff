#include "providers/providers_config.hpp"

#include "session/ids.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <set>
#include <stdexcept>

namespace wuhu::providers {

namespace json = boost::json;

namespace {

// `s` without the spaces, tabs and line breaks around it (a secret mounted as a file or
// variable often ends with a newline).
std::string trimmed(std::string_view s) {
    const auto first = s.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos) {
        return {};
    }
    return std::string(s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1));
}

// What is wrong with the file: thrown while one endpoint is read, answered by
// parse_providers().
struct bad_config : std::runtime_error {
    using std::runtime_error::runtime_error;
};

endpoint_config endpoint_of(const std::string& name, const json::value& v, const lookup& env,
                            const lookup& read_file) {
    const std::string where = "endpoint \"" + name + "\": ";
    if (!v.is_object()) {
        throw bad_config(where + "must be an object");
    }
    const auto& o = v.as_object();
    static const std::set<std::string_view> known = {
        "kind",       "base_url", "api_key_env", "api_key_file", "default_model", "system_role",
        "max_tokens", "headers",  "ca_file",     "timeouts_ms",  "file",          "record"};
    for (const auto& [k, _] : o) {
        if (!known.contains(k)) {
            throw bad_config(where + "unknown field \"" + std::string(k) + "\"");
        }
    }
    auto text = [&](const char* key) -> std::string {
        const auto* f = o.if_contains(key);
        if (f == nullptr) {
            return {};
        }
        if (!f->is_string()) {
            throw bad_config(where + "\"" + key + "\" must be a string");
        }
        return std::string(f->as_string());
    };
    endpoint_config c;
    c.name = name;
    auto kind = text("kind");
    if (kind == "openai") {
        c.api = api_kind::openai;
    } else if (kind == "anthropic") {
        c.api = api_kind::anthropic;
    } else if (kind == "replay") {
        // A recording played back: no server, no key.
        c.api = api_kind::replay;
        c.replay_file = text("file");
        if (c.replay_file.empty() || !read_file(c.replay_file)) {
            throw bad_config(where + "\"file\" must name a recording it can read");
        }
        for (const auto& [k, _] : o) {
            if (k != "kind" && k != "file" && k != "default_model") {
                throw bad_config(where +
                                 "a replay endpoint has only \"file\" (and "
                                 "\"default_model\"), not \"" +
                                 std::string(k) + "\"");
            }
        }
        c.default_model = text("default_model");
        return c;
    } else {
        throw bad_config(where + "\"kind\" must be \"openai\", \"anthropic\" or \"replay\"");
    }
    c.record_to = text("record");
    auto base = text("base_url");
    auto url = http::parse_base_url(base);
    if (!url) {
        throw bad_config(where + "\"base_url\" " +
                         (base.empty() ? "is missing" : "is bad: " + url.error()));
    }
    c.base = *url;
    auto key_env = text("api_key_env");
    auto key_file = text("api_key_file");
    if (!key_env.empty() && !key_file.empty()) {
        throw bad_config(where + "give \"api_key_env\" or \"api_key_file\", not both");
    }
    if (!key_env.empty()) {
        auto key = env(key_env);
        if (!key || trimmed(*key).empty()) {
            throw bad_config(where + "the environment variable " + key_env +
                             " (its API key) is not set");
        }
        c.api_key = trimmed(*key);
    } else if (!key_file.empty()) {
        auto key = read_file(key_file);
        if (!key) {
            throw bad_config(where + "cannot read the API key file " + key_file);
        }
        c.api_key = trimmed(key->substr(0, key->find_first_of("\r\n")));
        if (c.api_key.empty()) {
            throw bad_config(where + "the API key file " + key_file + " is empty");
        }
    }
    // It goes in a header: a control character would break the request (or forge another
    // header).
    if (std::any_of(c.api_key.begin(), c.api_key.end(),
                    [](char ch) { return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f; })) {
        throw bad_config(where + "the API key has a control character in it");
    }
    auto model = text("default_model");
    c.default_model = model;
    auto role = text("system_role");
    if (role.empty() || role == "developer") {
        c.system_lane_role = session::llm_role::developer;
    } else if (role == "user") {
        c.system_lane_role = session::llm_role::user;
    } else {
        // The system role is the system prompt's alone: lane content never takes it (the
        // spec's role mapping).
        throw bad_config(where +
                         "\"system_role\" must be \"developer\" or \"user\" (the system "
                         "role is the system prompt's alone)");
    }
    if (const auto* m = o.if_contains("max_tokens")) {
        if (!m->is_int64() || m->as_int64() < 1 || m->as_int64() > 1'000'000) {
            throw bad_config(where + "\"max_tokens\" must be 1-1000000");
        }
        c.max_tokens = static_cast<std::uint64_t>(m->as_int64());
    }
    if (const auto* h = o.if_contains("headers")) {
        if (!h->is_object()) {
            throw bad_config(where + "\"headers\" must be an object of strings");
        }
        for (const auto& [k, hv] : h->as_object()) {
            const std::string_view name_view = k;
            if (!hv.is_string() || name_view.empty() ||
                name_view.find_first_of(": \r\n") != std::string_view::npos ||
                std::string_view(hv.as_string()).find_first_of("\r\n") != std::string_view::npos) {
                throw bad_config(where + "header \"" + std::string(k) +
                                 "\" must be a name and a string");
            }
            c.headers.emplace_back(std::string(k), std::string(hv.as_string()));
        }
    }
    auto ca = text("ca_file");
    if (!ca.empty() && !read_file(ca)) {
        throw bad_config(where + "cannot read the CA file " + ca);
    }
    c.http.ca_file = ca;
    if (const auto* t = o.if_contains("timeouts_ms")) {
        if (!t->is_object()) {
            throw bad_config(where + "\"timeouts_ms\" must be an object");
        }
        for (const auto& [k, tv] : t->as_object()) {
            if (!tv.is_int64() || tv.as_int64() < 1 || tv.as_int64() > 3'600'000) {
                throw bad_config(where + "timeout \"" + std::string(k) + "\" must be 1-3600000 ms");
            }
            const std::chrono::milliseconds ms(tv.as_int64());
            if (k == "connect") {
                c.http.connect_timeout = ms;
            } else if (k == "first_byte") {
                c.http.first_byte_timeout = ms;
            } else if (k == "idle") {
                c.http.idle_timeout = ms;
            } else {
                throw bad_config(where + "unknown timeout \"" + std::string(k) +
                                 "\" (connect, first_byte, idle)");
            }
        }
    }
    return c;
}

}  // namespace

boost::system::result<std::vector<endpoint_config>, std::string> parse_providers(
    std::string_view json_text, const lookup& env, const lookup& read_file) {
    boost::system::error_code ec;
    auto v = json::parse(json_text, ec);
    if (ec) {
        return std::string("not valid JSON: ") + ec.message();
    }
    if (!v.is_object() || !v.as_object().contains("endpoints") ||
        !v.as_object().at("endpoints").is_object() ||
        v.as_object().size() != (v.as_object().contains("prices") ? 2u : 1u)) {
        return std::string(
            "must be an object with the field \"endpoints\" (an object), and \"prices\" (an "
            "object) if any");
    }
    std::vector<endpoint_config> out;
    for (const auto& [name, e] : v.as_object().at("endpoints").as_object()) {
        const std::string n(name);
        // The rule of session ids: a name that is safe in a log line and a model setting.
        if (!session::session_id::parse(n) || n == "scripted") {
            return "endpoint name \"" + n + "\": 1-64 of [A-Za-z0-9_-], and not \"scripted\"";
        }
        try {
            out.push_back(endpoint_of(n, e, env, read_file));
        } catch (const bad_config& bad) {
            return std::string(bad.what());
        }
    }
    return out;
}

namespace {
// A model's endpoint (before the first '/'), and the model after it (nullopt: no '/').
std::pair<std::string, std::optional<std::string>> split_model(std::string_view model) {
    const auto slash = model.find('/');
    if (slash == std::string_view::npos) {
        return {std::string(model), std::nullopt};
    }
    return {std::string(model.substr(0, slash)), std::string(model.substr(slash + 1))};
}
}  // namespace

std::optional<route> route_model(std::string_view model,
                                 const std::map<std::string, provider*>& endpoints) {
    if (endpoints.empty() || model == "scripted" || model.empty()) {
        return route{};
    }
    auto [endpoint, named] = split_model(model);
    if (!endpoints.contains(endpoint)) {
        return std::nullopt;
    }
    return route{std::move(endpoint), named.value_or("")};
}

std::optional<std::string> unservable_model(std::string_view model,
                                            const std::map<std::string, bool>& endpoints) {
    if (endpoints.empty() || model == "scripted") {
        return std::nullopt;
    }
    const auto [endpoint, named] = split_model(model);
    const auto found = endpoints.find(endpoint);
    if (found == endpoints.end()) {
        std::string names;
        for (const auto& [name, has_default] : endpoints) {
            names.append(names.empty() ? "" : ", ").append(name);
        }
        return "names no configured endpoint (" + names + "; or scripted)";
    }
    if (named && named->empty()) {
        return "names no model after its endpoint (" + endpoint + "/<model>)";
    }
    if (!named && !found->second) {
        return "names an endpoint without a default_model: name the model too (" + endpoint +
               "/<model>)";
    }
    return std::nullopt;
}

namespace {

provider_error no_endpoint(const std::string& model,
                           const std::map<std::string, provider*>& endpoints) {
    std::string names;
    for (const auto& [n, _] : endpoints) {
        names.append(names.empty() ? "" : ", ").append(n);
    }
    return provider_error{provider_error_kind::fatal, "the model \"" + model +
                                                          "\" names no configured endpoint (" +
                                                          names + "; or \"scripted\")"};
}

}  // namespace

namespace {

// The model asked for, as its endpoint names it (`openai/gpt-4o` asks for `gpt-4o`).
std::string asked_of(const std::string& model) {
    const auto slash = model.find('/');
    return slash == std::string::npos ? model : model.substr(slash + 1);
}

// Passes a stream on, its usage reports priced.
class pricing_sink final : public stream_sink {
  public:
    pricing_sink(stream_sink& to, const price_table* prices, std::string asked)
        : to_(to), prices_(prices), asked_(std::move(asked)) {}
    void text(std::string_view delta) override { to_.text(delta); }
    void tool_call(const tool_call_delta& delta) override { to_.tool_call(delta); }
    void alive() override { to_.alive(); }
    void usage(const reported_usage& u) override {
        reported_usage priced = u;
        if (prices_ != nullptr) {
            priced.cost = cost_for(*prices_, u.usage, u.model, asked_);
        }
        to_.usage(priced);
    }

  private:
    stream_sink& to_;
    const price_table* prices_;
    std::string asked_;
};

}  // namespace

asio::awaitable<inference_outcome> routing_provider::infer(inference_request req,
                                                           stream_sink& sink) {
    const std::string asked = asked_of(req.model);
    pricing_sink priced(sink, prices_, asked);
    auto routed = route(std::move(req), priced);
    auto out = co_await std::move(routed);
    if (auto* m = std::get_if<session::assistant_message>(&out);
        m != nullptr && prices_ != nullptr) {
        price(*m, *prices_, asked);
    }
    co_return out;
}

asio::awaitable<inference_outcome> routing_provider::route(inference_request req,
                                                           stream_sink& sink) {
    auto r = route_model(req.model, endpoints_);
    if (!r) {
        co_return no_endpoint(req.model, endpoints_);
    }
    if (r->endpoint.empty()) {
        auto inferring = scripted_->infer(std::move(req), sink);
        co_return co_await std::move(inferring);
    }
    req.model = r->model;
    auto inferring = endpoints_.at(r->endpoint)->infer(std::move(req), sink);
    co_return co_await std::move(inferring);
}

asio::awaitable<summary_outcome> routing_provider::summarize(summary_request req) {
    const std::string asked = asked_of(req.model);
    if (prices_ != nullptr && req.usage) {
        req.usage = [to = std::move(req.usage), prices = prices_, asked](const reported_usage& u) {
            reported_usage priced = u;
            priced.cost = cost_for(*prices, u.usage, u.model, asked);
            to(priced);
        };
    }
    auto routed = route_summary(std::move(req));
    auto out = co_await std::move(routed);
    if (auto* s = std::get_if<summary_answer>(&out); s != nullptr && prices_ != nullptr) {
        s->cost = cost_for(*prices_, s->usage, s->model, asked);
    }
    co_return out;
}

asio::awaitable<summary_outcome> routing_provider::route_summary(summary_request req) {
    auto r = route_model(req.model, endpoints_);
    if (!r) {
        co_return no_endpoint(req.model, endpoints_);
    }
    if (r->endpoint.empty()) {
        auto summarizing = scripted_->summarize(std::move(req));
        co_return co_await std::move(summarizing);
    }
    req.model = r->model;
    auto summarizing = endpoints_.at(r->endpoint)->summarize(std::move(req));
    co_return co_await std::move(summarizing);
}

}  // namespace wuhu::providers
