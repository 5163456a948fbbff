#include "mcp/messages.hpp"

#include "session/ids.hpp"
#include "session/text.hpp"

#include <boost/json.hpp>

#include <algorithm>

namespace wuhu::mcp {

namespace json = boost::json;

bool speaks(std::string_view version) {
    return std::find(std::begin(protocol_versions), std::end(protocol_versions), version) !=
           std::end(protocol_versions);
}

namespace {

std::string request(const json::value& id, std::string_view method, json::object params) {
    return json::serialize(json::object{
        {"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}});
}

std::string notification(std::string_view method, json::object params) {
    json::object o{{"jsonrpc", "2.0"}, {"method", method}};
    if (!params.empty()) {
        o["params"] = std::move(params);
    }
    return json::serialize(o);
}

std::string_view string_at(const json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    return v != nullptr && v->is_string() ? std::string_view(v->get_string()) : std::string_view{};
}

std::optional<bool> bool_at(const json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    if (v == nullptr || !v->is_bool()) {
        return std::nullopt;
    }
    return v->get_bool();
}

}  // namespace

std::string initialize_request(std::int64_t id, std::string_view client_version) {
    return request(
        id, "initialize",
        json::object{{"protocolVersion", protocol_versions[0]},
                     {"capabilities", json::object{}},
                     {"clientInfo", json::object{{"name", "wuhu"}, {"version", client_version}}}});
}

std::string initialized_notification() {
    return notification("notifications/initialized", {});
}

std::string tools_list_request(std::int64_t id, const std::string& cursor) {
    json::object params;
    if (!cursor.empty()) {
        params["cursor"] = cursor;
    }
    return request(id, "tools/list", std::move(params));
}

std::string tools_call_request(std::int64_t id, std::string_view tool, const json::value& arguments,
                               std::string_view progress_token) {
    json::object params{{"name", tool}, {"arguments", arguments}};
    if (!progress_token.empty()) {
        params["_meta"] = json::object{{"progressToken", progress_token}};
    }
    return request(id, "tools/call", std::move(params));
}

std::string cancelled_notification(std::int64_t request_id, std::string_view reason) {
    return notification("notifications/cancelled",
                        json::object{{"requestId", request_id}, {"reason", reason}});
}

std::string answer_to_server_request(const json::value& id, std::string_view method) {
    if (method == "ping") {
        return json::serialize(
            json::object{{"jsonrpc", "2.0"}, {"id", id}, {"result", json::object{}}});
    }
    return json::serialize(
        json::object{{"jsonrpc", "2.0"},
                     {"id", id},
                     {"error", json::object{{"code", -32601}, {"message", "method not found"}}}});
}

boost::system::result<message, std::string> parse_message(std::string_view json_text) {
    boost::system::error_code ec;
    json::value v = json::parse(json_text, ec);
    if (ec) {
        return std::string("not JSON: ") + ec.message();
    }
    if (!v.is_object()) {
        return std::string(v.is_array() ? "a JSON-RPC batch (not sent by this revision)"
                                        : "not a JSON-RPC message (not an object)");
    }
    auto& o = v.as_object();
    if (string_at(o, "jsonrpc") != "2.0") {
        return std::string("not a JSON-RPC 2.0 message (no \"jsonrpc\":\"2.0\")");
    }
    message m;
    const auto* id = o.if_contains("id");
    if (id != nullptr && !id->is_string() && !id->is_int64() && !id->is_uint64()) {
        return std::string("a JSON-RPC id must be a string or an integer");
    }
    if (const auto* method = o.if_contains("method")) {
        if (!method->is_string() || method->get_string().empty()) {
            return std::string("a JSON-RPC \"method\" must be a non-empty string");
        }
        m.method = method->get_string();
        m.kind = id != nullptr ? message::request : message::notification;
        if (id != nullptr) {
            m.id = *id;
        }
        if (auto* p = o.if_contains("params")) {
            m.params = std::move(*p);
        }
        return m;
    }
    if (id == nullptr) {
        return std::string("a JSON-RPC response without an id");
    }
    m.id = *id;
    if (auto* r = o.if_contains("result")) {
        m.result = std::move(*r);
        return m;
    }
    const auto* e = o.if_contains("error");
    if (e == nullptr || !e->is_object()) {
        return std::string("a JSON-RPC response with neither a result nor an error");
    }
    const auto* code = e->as_object().if_contains("code");
    m.error_code = code != nullptr && code->is_int64() ? code->as_int64() : -32603;
    m.error_message = session::sanitized(string_at(e->as_object(), "message"));
    return m;
}

bool reader::feed(std::string_view bytes, const handler& on_message) {
    if (!error_.empty()) {
        return false;
    }
    if (!event_stream_) {
        if (body_.size() + bytes.size() > max_) {
            error_ = "the answer is larger than " + std::to_string(max_) + " bytes";
            return false;
        }
        body_.append(bytes);
        return true;
    }
    const bool ok = sse_.feed(bytes, [&](const providers::sse_event& e) {
        if (!error_.empty() || e.event != "message" || e.data.empty()) {
            return;  // other events (and an empty one the server primes the stream with)
        }
        auto m = parse_message(e.data);
        if (!m) {
            error_ = "an event of the stream: " + m.error();
            return;
        }
        on_message(std::move(*m));
    });
    if (!ok) {
        error_ = "the event stream: " + sse_.error();
    }
    return error_.empty();
}

bool reader::finish(const handler& on_message) {
    if (!error_.empty()) {
        return false;
    }
    if (event_stream_) {
        return true;  // an event cut off by the end is not a message
    }
    auto m = parse_message(body_);
    body_.clear();
    if (!m) {
        error_ = m.error();
        return false;
    }
    on_message(std::move(*m));
    return true;
}

boost::system::result<server_info, std::string> parse_initialize(const json::value& result) {
    if (!result.is_object()) {
        return std::string("the initialize result is not an object");
    }
    const auto& o = result.as_object();
    server_info out;
    out.protocol_version = string_at(o, "protocolVersion");
    if (!speaks(out.protocol_version)) {
        return "the server speaks protocol revision \"" +
               session::sanitized(out.protocol_version.substr(0, 32)) +
               "\", which this worker does not";
    }
    if (const auto* info = o.if_contains("serverInfo"); info != nullptr && info->is_object()) {
        out.name = session::sanitized(string_at(info->as_object(), "name").substr(0, 128));
    }
    const auto* caps = o.if_contains("capabilities");
    if (caps == nullptr || !caps->is_object() || !caps->as_object().contains("tools")) {
        return std::string("the server offers no tools (no \"tools\" capability)");
    }
    if (const auto* t = caps->as_object().if_contains("tools"); t->is_object()) {
        out.tools_list_changed = bool_at(t->as_object(), "listChanged").value_or(false);
    }
    return out;
}

namespace {

// What the providers accept as a tool's name.
bool valid_tool_name(std::string_view n) {
    return session::is_id_token(n);
}

}  // namespace

boost::system::result<tools_page, std::string> parse_tools_page(const json::value& result,
                                                                std::vector<std::string>* skipped) {
    if (!result.is_object()) {
        return std::string("the tools/list result is not an object");
    }
    const auto& o = result.as_object();
    const auto* tools = o.if_contains("tools");
    if (tools == nullptr || !tools->is_array()) {
        return std::string("the tools/list result has no \"tools\" array");
    }
    tools_page out;
    for (const auto& t : tools->as_array()) {
        if (!t.is_object()) {
            continue;
        }
        const auto& to = t.as_object();
        tool_info info;
        info.name = string_at(to, "name");
        if (!valid_tool_name(info.name)) {
            if (skipped != nullptr) {
                skipped->push_back("a tool named \"" + session::sanitized(info.name.substr(0, 64)) +
                                   "\" (a name is 1-64 of A-Z a-z 0-9 _ -)");
            }
            continue;
        }
        const auto* schema = to.if_contains("inputSchema");
        if (schema == nullptr || !schema->is_object()) {
            if (skipped != nullptr) {
                skipped->push_back(info.name + " (no inputSchema object)");
            }
            continue;
        }
        info.input_schema = json::serialize(*schema);
        info.description = session::sanitized(string_at(to, "description"));
        if (const auto* a = to.if_contains("annotations"); a != nullptr && a->is_object()) {
            info.idempotent_hint = bool_at(a->as_object(), "idempotentHint");
            info.read_only_hint = bool_at(a->as_object(), "readOnlyHint");
        }
        out.tools.push_back(std::move(info));
    }
    out.next_cursor = string_at(o, "nextCursor");
    return out;
}

tools::tool_output render_call_result(const json::value& result) {
    tools::tool_output out;
    if (!result.is_object()) {
        return {"the MCP server's result is not an object", true};
    }
    const auto& o = result.as_object();
    out.is_error = bool_at(o, "isError").value_or(false);
    std::vector<std::string> parts;
    bool has_text = false;
    if (const auto* content = o.if_contains("content"); content != nullptr && content->is_array()) {
        for (const auto& c : content->as_array()) {
            if (!c.is_object()) {
                continue;
            }
            const auto& co = c.as_object();
            const auto type = string_at(co, "type");
            if (type == "text") {
                parts.emplace_back(string_at(co, "text"));
                has_text = true;
            } else if (type == "image" || type == "audio") {
                parts.push_back("[" + std::string(type) + ": " +
                                std::string(string_at(co, "mimeType")) + ", " +
                                std::to_string(string_at(co, "data").size()) + " bytes of base64]");
            } else if (type == "resource_link") {
                parts.push_back("[resource: " + std::string(string_at(co, "uri")) + "]");
            } else if (type == "resource") {
                const auto* r = co.if_contains("resource");
                if (r != nullptr && r->is_object()) {
                    const auto& ro = r->as_object();
                    if (ro.contains("text")) {
                        parts.emplace_back(string_at(ro, "text"));
                        has_text = true;
                    } else {
                        parts.push_back("[resource: " + std::string(string_at(ro, "uri")) +
                                        ", binary]");
                    }
                }
            } else {
                parts.push_back("[content of type " + std::string(type) + "]");
            }
        }
    }
    if (!has_text) {
        if (const auto* s = o.if_contains("structuredContent"); s != nullptr && !s->is_null()) {
            parts.insert(parts.begin(), json::serialize(*s));
        }
    }
    for (std::size_t i = 0; i < parts.size(); ++i) {
        out.text += (i > 0 ? "\n\n" : "") + parts[i];
    }
    out.text = session::sanitized(out.text);
    return out;
}

std::optional<progress> parse_progress(const json::value& params) {
    if (!params.is_object()) {
        return std::nullopt;
    }
    const auto& o = params.as_object();
    const auto* token = o.if_contains("progressToken");
    const auto* value = o.if_contains("progress");
    if (token == nullptr || value == nullptr || !value->is_number()) {
        return std::nullopt;
    }
    progress p;
    if (token->is_string()) {
        p.token = token->get_string();
    } else if (token->is_int64()) {
        p.token = std::to_string(token->get_int64());
    } else {
        return std::nullopt;
    }
    p.value = value->to_number<double>();
    return p;
}

}  // namespace wuhu::mcp
