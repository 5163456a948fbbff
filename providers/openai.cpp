#include "providers/openai.hpp"

#include "providers/provider_errors.hpp"

#include <boost/json.hpp>

namespace wuhu::providers {

namespace json = boost::json;
using event_json::count_of;
using event_json::text_of;
using session::llm_role;

namespace {

constexpr std::string_view provider_name = "openai";

// A tool's schema as JSON; a tool without a usable one takes any object.
json::value schema_of(const session::tool_spec& t) {
    boost::system::error_code ec;
    auto v = json::parse(t.schema, ec);
    if (ec || !v.is_object()) {
        return json::object{{"type", "object"}};
    }
    return v;
}

}  // namespace

std::string openai_request_body(const inference_request& req, const openai_request_options& o) {
    json::array messages;
    for (const auto& m : req.context) {
        json::object msg;
        switch (m.role) {
            case llm_role::developer:
                msg["role"] = session::role_name(o.system_lane_role);
                msg["content"] = m.content;
                break;
            case llm_role::system:
            case llm_role::user:
                msg["role"] = session::role_name(m.role);
                msg["content"] = m.content;
                break;
            case llm_role::assistant: {
                msg["role"] = "assistant";
                if (m.content.empty() && !m.tool_calls.empty()) {
                    msg["content"] = nullptr;
                } else {
                    msg["content"] = m.content;
                }
                if (!m.tool_calls.empty()) {
                    json::array calls;
                    for (const auto& c : m.tool_calls) {
                        calls.push_back(json::object{
                            {"id", c.id.str()},
                            {"type", "function"},
                            {"function",
                             json::object{{"name", c.name}, {"arguments", c.arguments}}}});
                    }
                    msg["tool_calls"] = std::move(calls);
                }
                break;
            }
            case llm_role::tool:
                msg["role"] = "tool";
                msg["tool_call_id"] = m.tool_call_id;
                msg["content"] = m.content;
                break;
        }
        messages.push_back(std::move(msg));
    }
    json::object body{{"model", o.model},
                      {"messages", std::move(messages)},
                      {"stream", true},
                      {"stream_options", json::object{{"include_usage", true}}}};
    if (!req.tools.empty()) {
        json::array tools;
        for (const auto& t : req.tools) {
            tools.push_back(json::object{{"type", "function"},
                                         {"function", json::object{{"name", t.name},
                                                                   {"description", t.description},
                                                                   {"parameters", schema_of(t)}}}});
        }
        body["tools"] = std::move(tools);
    }
    if (o.max_tokens) {
        body["max_completion_tokens"] = *o.max_tokens;
    }
    return json::serialize(body);
}

void openai_stream::on_event(const sse_event& e) {
    if (done()) {
        return;
    }
    if (e.data == "[DONE]") {
        done_ = true;
        return;
    }
    boost::system::error_code ec;
    auto v = json::parse(e.data, ec);
    if (ec || !v.is_object()) {
        fail(provider_error{provider_error_kind::transient,
                            "malformed stream from openai: a chunk is not a JSON object: " +
                                redacted(e.data, redact_, 200)});
        return;
    }
    const auto& chunk = v.as_object();
    if (const auto* err = chunk.if_contains("error")) {
        std::string type;
        std::string message;
        if (err->is_object()) {
            const auto& eo = err->as_object();
            type = text_of(eo.if_contains("code"));
            if (type.empty()) {
                type = text_of(eo.if_contains("type"));
            }
            message = text_of(eo.if_contains("message"));
        } else {
            message = text_of(err);
        }
        fail(classify_stream_error(provider_name, type, message, redact_));
        return;
    }
    if (auto m = text_of(chunk.if_contains("model")); !m.empty()) {
        model_ = m;
    }
    if (const auto* u = chunk.if_contains("usage"); u != nullptr && u->is_object()) {
        const auto& uo = u->as_object();
        std::uint64_t cached = 0;
        if (const auto* d = uo.if_contains("prompt_tokens_details");
            d != nullptr && d->is_object()) {
            cached = count_of(d->as_object(), "cached_tokens").value_or(0);
        }
        const auto prompt = count_of(uo, "prompt_tokens").value_or(0);
        usage_.cached_input = std::min(cached, prompt);
        usage_.input = prompt - usage_.cached_input;
        usage_.output = count_of(uo, "completion_tokens").value_or(0);
        if (const auto* d = uo.if_contains("completion_tokens_details");
            d != nullptr && d->is_object()) {
            // A part of the output (priced with it).
            usage_.reasoning =
                std::min(count_of(d->as_object(), "reasoning_tokens").value_or(0), usage_.output);
        }
        reported();
    }
    const auto* choices = chunk.if_contains("choices");
    if (choices == nullptr || !choices->is_array()) {
        return;
    }
    for (const auto& choice : choices->as_array()) {
        if (!choice.is_object()) {
            continue;
        }
        const auto& co = choice.as_object();
        if (const auto* i = co.if_contains("index");
            i != nullptr && i->is_int64() && i->as_int64() != 0) {
            continue;  // one answer is asked for; another would be a server's own idea
        }
        const auto* delta = co.if_contains("delta");
        if (delta == nullptr || !delta->is_object()) {
            continue;
        }
        const auto& d = delta->as_object();
        if (auto content = text_of(d.if_contains("content")); !content.empty()) {
            text_.append(content);
            sink_.text(content);
        }
        const auto* calls = d.if_contains("tool_calls");
        if (calls == nullptr || !calls->is_array()) {
            continue;
        }
        for (const auto& piece : calls->as_array()) {
            if (!piece.is_object()) {
                continue;
            }
            const auto& p = piece.as_object();
            // Keyed by `index`; servers that leave it out send each call whole or continue
            // the last one: a new id starts a new call, no id continues the last.
            std::int64_t index = 0;
            if (const auto* i = p.if_contains("index"); i != nullptr && i->is_int64()) {
                index = i->as_int64();
            } else if (!calls_.empty()) {
                const auto id = text_of(p.if_contains("id"));
                const auto last = std::prev(calls_.end());
                index = !id.empty() && id != last->second.id ? last->first + 1 : last->first;
            }
            auto& c = calls_[index];
            if (auto id = text_of(p.if_contains("id")); !id.empty()) {
                c.id = id;
            }
            std::string_view fragment;
            if (const auto* f = p.if_contains("function"); f != nullptr && f->is_object()) {
                if (auto name = text_of(f->as_object().if_contains("name"));
                    !name.empty() && c.name.empty()) {
                    c.name = name;
                }
                fragment = text_of(f->as_object().if_contains("arguments"));
                c.arguments.append(fragment);
            }
            sink_.tool_call(tool_call_delta{c.id, c.name, std::string(fragment)});
        }
    }
}

}  // namespace wuhu::providers
