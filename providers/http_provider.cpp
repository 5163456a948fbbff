#include "providers/http_provider.hpp"

#include "providers/anthropic.hpp"
#include "providers/openai.hpp"
#include "providers/provider_errors.hpp"
#include "providers/sse.hpp"

#include <optional>

namespace wuhu::providers {

namespace {

// What an error response's body is read up to (the rest is not needed to sort it).
constexpr std::size_t max_error_body = 64 * 1024;

constexpr std::string_view summary_instruction =
    "Summarize the conversation above for your own later use: the goals, the decisions, the "
    "facts learned and what remains to be done. Reply with the summary only.";

// The decoder of the endpoint's API, behind one face.
class decoder {
  public:
    // A call without an id of the server's is named by the step and its index: unique in the
    // session (a tool service's idempotency key).
    decoder(api_kind k, stream_sink& sink, std::string model, std::string redact,
            std::uint64_t step) {
        const std::string id_prefix = "_" + std::to_string(step) + "_";
        if (k == api_kind::openai) {
            openai_.emplace(sink, std::move(model), std::move(redact), "call" + id_prefix);
        } else {
            anthropic_.emplace(sink, std::move(model), std::move(redact), "toolu" + id_prefix);
        }
    }
    void on_event(const sse_event& e) { openai_ ? openai_->on_event(e) : anthropic_->on_event(e); }
    bool done() const { return openai_ ? openai_->done() : anthropic_->done(); }
    std::optional<provider_error> error() const {
        return openai_ ? openai_->error() : anthropic_->error();
    }
    session::assistant_message message() const {
        return openai_ ? openai_->message() : anthropic_->message();
    }

  private:
    std::optional<openai_stream> openai_;
    std::optional<anthropic_stream> anthropic_;
};

// The work of one response: its head, then its body into the SSE parser and the decoder (or,
// for an error status, into a bounded buffer).
struct response_state {
    int status = 0;
    bool event_stream = false;
    std::string content_type;
    std::string retry_after;
    std::string error_body;
    sse_parser parser;
    bool parse_failed = false;
};

}  // namespace

http_provider::http_provider(asio::any_io_executor ex, endpoint_config config, runtime::clock& clk)
    : config_(std::move(config)), clock_(clk), client_(std::move(ex), config_.base, config_.http) {
    if (config_.api == api_kind::anthropic && config_.max_tokens == 0) {
        config_.max_tokens = 4096;
    }
}

http::request http_provider::request_for(const inference_request& req) const {
    http::request r;
    const std::string model = req.model.empty() ? config_.default_model : req.model;
    if (config_.api == api_kind::openai) {
        openai_request_options o;
        o.model = model;
        o.system_lane_role = config_.system_lane_role;
        if (config_.max_tokens > 0) {
            o.max_tokens = config_.max_tokens;
        }
        r.target = "/chat/completions";
        r.body = openai_request_body(req, o);
        if (!config_.api_key.empty()) {
            r.headers.emplace_back("Authorization", "Bearer " + config_.api_key);
        }
    } else {
        anthropic_request_options o;
        o.model = model;
        o.max_tokens = config_.max_tokens;
        r.target = "/messages";
        r.body = anthropic_request_body(req, o);
        if (!config_.api_key.empty()) {
            r.headers.emplace_back("x-api-key", config_.api_key);
        }
        r.headers.emplace_back("anthropic-version", "2023-06-01");
    }
    r.headers.emplace_back("Content-Type", "application/json");
    r.headers.emplace_back("Accept", "text/event-stream");
    for (const auto& h : config_.headers) {
        r.headers.push_back(h);
    }
    return r;
}

asio::awaitable<inference_outcome> http_provider::infer(inference_request req, stream_sink& sink) {
    auto attempting = attempt(std::move(req), sink);
    auto out = co_await std::move(attempting);
    if (auto* e = std::get_if<provider_error>(&out)) {
        // The key is already out (classify_*, redacted()); so are the values of the
        // endpoint's own headers, which may be secrets too (a gateway's token).
        for (const auto& [name, value] : config_.headers) {
            e->message = redacted(e->message, value, e->message.size() + 3 * value.size());
        }
    }
    co_return out;
}

asio::awaitable<inference_outcome> http_provider::attempt(inference_request req,
                                                          stream_sink& sink) {
    const std::string model = req.model.empty() ? config_.default_model : req.model;
    auto request = request_for(req);
    decoder d(config_.api, sink, model, config_.api_key, req.step);
    response_state st;
    auto on_head = [&st, &sink](const http::response_head& h) {
        sink.alive();
        st.status = h.status;
        st.content_type = h.header("content-type");
        st.event_stream = st.content_type.starts_with("text/event-stream");
        st.retry_after = h.header("retry-after");
    };
    auto on_body = [&st, &d, &sink](std::string_view piece) {
        sink.alive();
        if (st.status != 200 || !st.event_stream) {
            st.error_body.append(piece.substr(0, max_error_body - st.error_body.size()));
            return st.error_body.size() < max_error_body;
        }
        if (d.error()) {
            return false;  // the stream failed: the connection is not worth keeping
        }
        if (!d.done() && !st.parser.feed(piece, [&d](const sse_event& e) { d.on_event(e); })) {
            st.parse_failed = true;
            return false;
        }
        return true;  // to the body's end (after the end marker: the connection is reused)
    };
    std::string detail;
    auto sending = client_.send(std::move(request), on_head, on_body, &detail);
    const auto ec = co_await std::move(sending);
    const std::string who(config_.name);
    if (ec == asio::error::operation_aborted) {
        co_return provider_error{provider_error_kind::transient, who + ": cancelled"};
    }
    if (st.status != 0 && st.status != 200) {
        co_return classify_http(who, st.status, st.error_body,
                                parse_retry_after(st.retry_after, clock_.now().value),
                                config_.api_key);
    }
    if (st.status == 200 && !st.event_stream) {
        co_return provider_error{
            provider_error_kind::fatal,
            who + " answered with " +
                (st.content_type.empty() ? "no content type" : st.content_type) +
                ", not an event stream (is the base URL right?): " +
                redacted(st.error_body, config_.api_key, 300)};
    }
    if (st.parse_failed) {
        co_return provider_error{provider_error_kind::transient,
                                 "malformed stream from " + who + ": " + st.parser.error()};
    }
    if (auto e = d.error()) {
        e->message = who + ": " + e->message;
        co_return *e;
    }
    if (d.done()) {
        co_return d.message();
    }
    if (ec) {
        // A host that does not exist or a certificate that does not verify is configuration:
        // trying again does not help. The rest (refused, reset, timed out) may pass.
        const bool fatal = ec == http::errc::no_such_host || ec == http::errc::not_trusted;
        co_return provider_error{
            fatal ? provider_error_kind::fatal : provider_error_kind::transient,
            who + ": " + ec.message() + (detail.empty() ? "" : " (" + detail + ")")};
    }
    co_return provider_error{provider_error_kind::transient,
                             who + ": the stream ended before its end marker"};
}

asio::awaitable<summary_outcome> http_provider::summarize(summary_request sr) {
    // The segment as plain text: a request with tool calls and results in it but no tools
    // defined is refused by some APIs (and a summary needs no tools).
    inference_request req;
    req.model = std::move(sr.model);
    req.session = std::move(sr.session);
    const auto step = sr.step;
    auto sr_alive = std::move(sr.alive);
    auto sr_usage = std::move(sr.usage);
    for (auto& m : sr.segment) {
        if (m.role == session::llm_role::tool) {
            m.role = session::llm_role::user;
            m.content =
                "[result of " + m.tool_name + (m.is_error ? ", an error" : "") + "]\n" + m.content;
            m.tool_call_id.clear();
        } else if (m.role == session::llm_role::assistant) {
            for (const auto& c : m.tool_calls) {
                m.content += (m.content.empty() ? "" : "\n") + std::string("[called ") + c.name +
                             " with " + c.arguments + "]";
            }
            m.tool_calls.clear();
        }
        if (!m.content.empty()) {
            req.context.push_back(std::move(m));
        }
    }
    session::llm_message ask;
    ask.role = session::llm_role::user;
    ask.content = summary_instruction;
    req.context.push_back(std::move(ask));
    req.step = step;
    struct discard final : stream_sink {
        discard(std::function<void()> a, std::function<void(const reported_usage&)> u)
            : on_alive(std::move(a)), on_usage(std::move(u)) {}
        void text(std::string_view) override { alive(); }
        void tool_call(const tool_call_delta&) override { alive(); }
        void alive() override {
            if (on_alive) {
                on_alive();
            }
        }
        void usage(const reported_usage& u) override {
            if (on_usage) {
                on_usage(u);
            }
        }
        std::function<void()> on_alive;
        std::function<void(const reported_usage&)> on_usage;
    } quiet(std::move(sr_alive), std::move(sr_usage));
    auto inferring = infer(std::move(req), quiet);
    auto out = co_await std::move(inferring);
    if (auto* e = std::get_if<provider_error>(&out)) {
        co_return *e;
    }
    auto& m = std::get<session::assistant_message>(out);
    co_return summary_answer{std::move(m.text), m.usage, std::move(m.model), 0};
}

}  // namespace wuhu::providers
