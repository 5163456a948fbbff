#include "providers/anthropic.hpp"

#include "providers/provider_errors.hpp"

#include <boost/json.hpp>

namespace wuhu::providers {

namespace json = boost::json;
using event_json::count_of;
using event_json::object_at;
using event_json::text_of;
using session::llm_role;

namespace {

constexpr std::string_view provider_name = "anthropic";

json::value json_or(std::string_view text, json::value fallback) {
    boost::system::error_code ec;
    auto v = json::parse(text, ec);
    return ec || !v.is_object() ? fallback : v;
}

}  // namespace

std::string anthropic_request_body(const inference_request& req,
                                   const anthropic_request_options& o) {
    std::string system;
    json::array messages;
    // Appends a content block, merging it into the last message when that has the same role.
    auto push = [&](std::string_view role, json::object block) {
        if (!messages.empty() && messages.back().as_object().at("role").as_string() == role) {
            messages.back().as_object().at("content").as_array().push_back(std::move(block));
        } else {
            messages.push_back(
                json::object{{"role", role}, {"content", json::array{std::move(block)}}});
        }
    };
    auto text_block = [](const std::string& text) {
        return json::object{{"type", "text"}, {"text", text}};
    };
    for (const auto& m : req.context) {
        switch (m.role) {
            case llm_role::system:
                system.append(system.empty() ? "" : "\n\n").append(m.content);
                break;
            case llm_role::developer:
            case llm_role::user:
                if (!m.content.empty()) {
                    push("user", text_block(m.content));
                }
                break;
            case llm_role::assistant:
                if (!m.content.empty()) {
                    push("assistant", text_block(m.content));
                }
                for (const auto& c : m.tool_calls) {
                    push("assistant",
                         json::object{{"type", "tool_use"},
                                      {"id", c.id.str()},
                                      {"name", c.name},
                                      {"input", json_or(c.arguments, json::object{})}});
                }
                break;
            case llm_role::tool: {
                json::object result{{"type", "tool_result"},
                                    {"tool_use_id", m.tool_call_id},
                                    {"content", m.content}};
                if (m.is_error) {
                    result["is_error"] = true;
                }
                push("user", std::move(result));
                break;
            }
        }
    }
    json::object body{{"model", o.model},
                      {"max_tokens", o.max_tokens},
                      {"messages", std::move(messages)},
                      {"stream", true}};
    if (!system.empty()) {
        body["system"] = system;
    }
    if (!req.tools.empty()) {
        json::array tools;
        for (const auto& t : req.tools) {
            tools.push_back(json::object{
                {"name", t.name},
                {"description", t.description},
                {"input_schema", json_or(t.schema, json::object{{"type", "object"}})}});
        }
        body["tools"] = std::move(tools);
    }
    return json::serialize(body);
}

void anthropic_stream::on_event(const sse_event& e) {
    if (done()) {
        return;
    }
    boost::system::error_code ec;
    auto v = json::parse(e.data, ec);
    if (ec || !v.is_object()) {
        fail(provider_error{
            provider_error_kind::transient,
            "malformed stream from anthropic: a `" + e.event +
                "` event's data is not a JSON object: " + redacted(e.data, redact_, 200)});
        return;
    }
    const auto& d = v.as_object();
    std::string_view type = text_of(d.if_contains("type"));
    if (type.empty()) {
        type = e.event;
    }
    auto index = [&]() -> std::int64_t {
        const auto* i = d.if_contains("index");
        return i != nullptr && i->is_int64() ? i->as_int64() : -1;
    };
    if (type == "message_start") {
        if (const auto* m = object_at(d, "message")) {
            if (auto model = text_of(m->if_contains("model")); !model.empty()) {
                model_ = model;
            }
            if (const auto* u = object_at(*m, "usage")) {
                usage_.input = count_of(*u, "input_tokens").value_or(0);
                usage_.cached_input = count_of(*u, "cache_read_input_tokens").value_or(0);
                usage_.cache_write = count_of(*u, "cache_creation_input_tokens").value_or(0);
                usage_.output = count_of(*u, "output_tokens").value_or(0);
                reported();
            }
        }
    } else if (type == "content_block_start") {
        const auto* b = object_at(d, "content_block");
        if (b == nullptr) {
            return;
        }
        if (text_of(b->if_contains("type")) == "tool_use") {
            auto& call = calls_[index()];
            call.id = text_of(b->if_contains("id"));
            call.name = text_of(b->if_contains("name"));
            sink_.tool_call(tool_call_delta{call.id, call.name, ""});
        } else if (auto t = text_of(b->if_contains("text")); !t.empty()) {
            text_.append(t);
            sink_.text(t);
        }
    } else if (type == "content_block_delta") {
        const auto* delta = object_at(d, "delta");
        if (delta == nullptr) {
            return;
        }
        const auto kind = text_of(delta->if_contains("type"));
        if (kind == "text_delta") {
            if (auto t = text_of(delta->if_contains("text")); !t.empty()) {
                text_.append(t);
                sink_.text(t);
            }
        } else if (auto call = calls_.find(index());
                   kind == "input_json_delta" && call != calls_.end()) {
            const auto piece = text_of(delta->if_contains("partial_json"));
            call->second.arguments.append(piece);
            sink_.tool_call(
                tool_call_delta{call->second.id, call->second.name, std::string(piece)});
        }  // thinking and signature deltas (and a stray piece): not part of the message
    } else if (type == "message_delta") {
        if (const auto* u = object_at(d, "usage")) {
            usage_.output = count_of(*u, "output_tokens").value_or(usage_.output);
            usage_.input = count_of(*u, "input_tokens").value_or(usage_.input);
            usage_.cached_input =
                count_of(*u, "cache_read_input_tokens").value_or(usage_.cached_input);
            usage_.cache_write =
                count_of(*u, "cache_creation_input_tokens").value_or(usage_.cache_write);
            reported();
        }
    } else if (type == "message_stop") {
        done_ = true;
    } else if (type == "error") {
        std::string_view etype;
        std::string_view message;
        if (const auto* err = object_at(d, "error")) {
            etype = text_of(err->if_contains("type"));
            message = text_of(err->if_contains("message"));
        }
        fail(classify_stream_error(provider_name, etype, message, redact_));
    }  // ping, content_block_stop, and event types added later: nothing to do
}

}  // namespace wuhu::providers
