#include "providers/scripted_provider.hpp"

#include "session/json_reader.hpp"
#include "session/text.hpp"

namespace wuhu::providers {

namespace json = boost::json;
using session::decode_error;
using session::decoded;
using session::errc;
using session::detail::fail;
using session::detail::object_reader;

namespace {

constexpr std::size_t max_text = std::size_t{16} * 1024 * 1024;

decoded<session::token_usage> usage_at(const json::value& v, const std::string& path) {
    WUHU_TRY(ur, object_reader::open(v, path));
    WUHU_TRY(input, ur.opt_u64("input"));
    WUHU_TRY(cached, ur.opt_u64("cached_input"));
    WUHU_TRY(output, ur.opt_u64("output"));
    WUHU_CHECK(ur.finish());
    return session::token_usage{input.value_or(0), cached.value_or(0), output.value_or(0)};
}

decoded<scripted_failure> failure_at(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    WUHU_TRY(kind, r.str("kind"));
    WUHU_TRY(message, r.opt_str("message"));
    scripted_failure out;
    if (const json::value* u = r.opt_val("usage")) {
        WUHU_TRY(usage, usage_at(*u, r.path("usage")));
        out.usage = usage;
    }
    WUHU_CHECK(r.finish());
    for (auto k : {provider_error_kind::transient, provider_error_kind::context_overflow,
                   provider_error_kind::fatal}) {
        if (kind == kind_name(k)) {
            out.error = provider_error{k, std::string(message.value_or(kind))};
            return out;
        }
    }
    return fail(errc::invalid_type, r.path("kind"));
}

decoded<scripted_response> response_at(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    scripted_response out;
    WUHU_TRY(text, r.opt_str("text"));
    if (text) {
        out.chunks.emplace_back(*text);
    }
    if (r.opt_val("chunks") != nullptr) {
        if (text) {
            return fail(errc::invalid_type, r.path("chunks"));  // text or chunks, not both
        }
        WUHU_TRY(chunks, r.arr("chunks"));
        for (std::size_t i = 0; i < chunks->size(); ++i) {
            if (!(*chunks)[i].is_string()) {
                return fail(errc::invalid_type, r.path("chunks." + std::to_string(i)));
            }
            out.chunks.emplace_back((*chunks)[i].get_string());
        }
    }
    WUHU_TRY(delay, r.opt_u64("delay_ms"));
    out.delay = milliseconds(delay.value_or(0));
    WUHU_TRY(chunk_delay, r.opt_u64("chunk_delay_ms"));
    out.chunk_delay = milliseconds(chunk_delay.value_or(0));
    if (r.opt_val("tool_calls") != nullptr) {
        WUHU_TRY(calls, r.arr("tool_calls"));
        for (std::size_t i = 0; i < calls->size(); ++i) {
            std::string cp = r.path("tool_calls." + std::to_string(i));
            WUHU_TRY(cr, object_reader::open((*calls)[i], cp));
            scripted_call c;
            WUHU_TRY(id, cr.opt_str("id"));
            c.id = std::string(id.value_or(""));
            if (!c.id.empty() && !session::tool_call_id::valid(c.id)) {
                return fail(errc::invalid_tool_call_id, cr.path("id"));
            }
            WUHU_TRY(name, cr.str("name"));
            c.name = std::string(name);
            const json::value* args = cr.opt_val("arguments");
            c.arguments = args != nullptr ? json::serialize(*args) : "{}";
            WUHU_CHECK(cr.finish());
            out.tool_calls.push_back(std::move(c));
        }
    }
    if (const json::value* u = r.opt_val("usage")) {
        WUHU_TRY(usage, usage_at(*u, r.path("usage")));
        out.usage = usage;
    }
    if (const json::value* u = r.opt_val("early_usage")) {
        WUHU_TRY(usage, usage_at(*u, r.path("early_usage")));
        out.early_usage = usage;
    }
    if (r.opt_val("fail_first") != nullptr) {
        WUHU_TRY(errors, r.arr("fail_first"));
        for (std::size_t i = 0; i < errors->size(); ++i) {
            WUHU_TRY(e, failure_at((*errors)[i], r.path("fail_first." + std::to_string(i))));
            out.fail_first.push_back(std::move(e));
        }
    }
    WUHU_CHECK(r.finish());
    return out;
}

}  // namespace

decoded<script> parse_script(std::string_view json_text) {
    WUHU_TRY(v, session::parse_json(json_text));
    WUHU_TRY(r, object_reader::open(v, ""));
    script out;
    WUHU_TRY(responses, r.arr("responses"));
    for (std::size_t i = 0; i < responses->size(); ++i) {
        WUHU_TRY(resp, response_at((*responses)[i], "responses." + std::to_string(i)));
        out.responses.push_back(std::move(resp));
    }
    if (r.opt_val("summaries") != nullptr) {
        WUHU_TRY(sums, r.arr("summaries"));
        for (std::size_t i = 0; i < sums->size(); ++i) {
            if (!(*sums)[i].is_string()) {
                return fail(errc::invalid_type, "summaries." + std::to_string(i));
            }
            out.summaries.emplace_back((*sums)[i].get_string());
        }
    }
    WUHU_TRY(summary_delay, r.opt_u64("summary_delay_ms"));
    out.summary_delay = milliseconds(summary_delay.value_or(0));
    WUHU_TRY(model, r.opt_str("model"));
    out.model = std::string(model.value_or("scripted"));
    WUHU_CHECK(r.finish());
    return out;
}

int scripted_provider::attempts(std::uint64_t step) const {
    auto it = attempts_.find(step);
    return it == attempts_.end() ? 0 : it->second;
}

asio::awaitable<inference_outcome> scripted_provider::infer(inference_request req,
                                                            stream_sink& sink) {
    ++calls_;
    if (record_) {
        requests_.push_back(req);
    }
    const int attempt = attempts_[req.step]++;
    if (req.step >= script_->responses.size()) {
        std::string text = "(the script has no response for step " + std::to_string(req.step) + ")";
        sink.text(text);
        session::assistant_message m;
        m.text = std::move(text);
        m.model = script_->model;
        m.usage = {session::estimate_tokens(req.context), 0, session::estimate_tokens(m.text)};
        co_return m;
    }
    const scripted_response& r = script_->responses[req.step];
    co_await clock_.sleep(r.delay);
    if (attempt < static_cast<int>(r.fail_first.size())) {
        const auto& failure = r.fail_first[static_cast<std::size_t>(attempt)];
        if (failure.usage) {
            sink.usage(reported_usage{*failure.usage, script_->model, 0});
        }
        co_return failure.error;
    }
    if (r.early_usage) {
        sink.usage(reported_usage{*r.early_usage, script_->model, 0});
    }
    session::assistant_message m;
    m.model = script_->model;
    for (std::size_t i = 0; i < r.chunks.size(); ++i) {
        if (i > 0) {
            co_await clock_.sleep(r.chunk_delay);
        }
        sink.text(r.chunks[i]);
        m.text += r.chunks[i];
    }
    for (std::size_t i = 0; i < r.tool_calls.size(); ++i) {
        const scripted_call& c = r.tool_calls[i];
        std::string id =
            c.id.empty() ? "call_" + std::to_string(req.step) + "_" + std::to_string(i) : c.id;
        sink.tool_call({id, c.name, c.arguments});
        m.tool_calls.push_back(
            session::tool_call{session::tool_call_id::parse(id).value(), c.name, c.arguments});
    }
    m.usage = r.usage.value_or(session::token_usage{session::estimate_tokens(req.context), 0,
                                                    session::estimate_tokens(m.text)});
    co_return m;
}

asio::awaitable<summary_outcome> scripted_provider::summarize(summary_request req) {
    const auto& segment = req.segment;
    co_await clock_.sleep(script_->summary_delay);
    std::size_t i = summaries_++;
    summary_answer out;
    out.text = i < script_->summaries.size() ? script_->summaries[i]
                                             : "Summary " + std::to_string(i + 1) + " of " +
                                                   std::to_string(segment.size()) + " messages.";
    out.usage = {session::estimate_tokens(segment), 0, session::estimate_tokens(out.text)};
    out.model = script_->model;
    co_return out;
}

}  // namespace wuhu::providers
