#include "broker/protocol.hpp"

#include "session/error_table.hpp"
#include "session/json_reader.hpp"
#include "session/overloaded.hpp"
#include "storage/errc.hpp"

#include <array>

namespace wuhu::broker {

namespace json = boost::json;
namespace s = wuhu::session;

namespace {
constexpr std::array<std::pair<verb, std::string_view>, 9> verbs{{
    {verb::enqueue, "enqueue"},
    {verb::cancel, "cancel"},
    {verb::system, "system"},
    {verb::subscribe, "subscribe"},
    {verb::configure, "configure"},
    {verb::abort, "abort"},
    {verb::pause, "pause"},
    {verb::resume, "resume"},
    {verb::remove, "delete"},
}};
}  // namespace

std::string_view verb_name(verb v) {
    for (const auto& [k, name] : verbs) {
        if (k == v) {
            return name;
        }
    }
    return "unknown";
}

s::result<route> parse_subject(std::string_view subject, std::string_view prefix) {
    const std::string head = std::string(prefix) + ".session.";
    if (subject.substr(0, head.size()) != head) {
        return s::errc::unknown_command;
    }
    std::string_view rest = subject.substr(head.size());
    // Read by length, byte by byte: nothing after a NUL (or any byte outside the alphabet of
    // ids and verbs) is ever dropped or allowed.
    for (char c : rest) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
        if (!ok) {
            return s::errc::invalid_session_id;
        }
    }
    auto dot = rest.rfind('.');
    if (dot == std::string_view::npos) {
        return s::errc::invalid_session_id;
    }
    std::string_view sid = rest.substr(0, dot);
    std::string_view name = rest.substr(dot + 1);
    auto id = s::session_id::parse(sid);  // a dot inside the id fails here
    if (!id) {
        return s::errc::invalid_session_id;
    }
    for (const auto& [k, n] : verbs) {
        if (n == name) {
            return route{std::move(*id), k};
        }
    }
    return s::errc::unknown_command;
}

std::string request_subject(std::string_view prefix, const s::session_id& sid, verb v) {
    return std::string(prefix) + ".session." + sid.str() + "." + std::string(verb_name(v));
}

std::string patch_subject(std::string_view prefix, const s::session_id& sid) {
    return std::string(prefix) + ".events." + sid.str() + ".patch";
}

std::string delta_subject(std::string_view prefix, const s::session_id& sid) {
    return std::string(prefix) + ".events." + sid.str() + ".delta";
}

std::string error_reply(std::string_view code, std::string_view message) {
    return json::serialize(
        json::object{{"ok", false}, {"error", json::object{{"code", code}, {"message", message}}}});
}

std::string error_reply(const boost::system::error_code& ec) {
    return error_reply(s::wire_code(ec), ec.message());
}

std::string error_reply(const s::decode_error& e) {
    return error_reply(s::code_name(e.code), e.message());
}

s::decoded<worker::command> decode_command(verb v, const json::value& body,
                                           const s::request_limits& limits,
                                           const s::queue_item_id& new_id) {
    switch (v) {
        case verb::enqueue: {
            WUHU_TRY(r, s::decode_enqueue(body, limits));
            return worker::command{worker::enqueue_command{
                s::enqueue_input{r.in, r.id.value_or(new_id),
                                 s::user_input{std::move(r.from), std::move(r.content)}}}};
        }
        case verb::system: {
            WUHU_TRY(r, s::decode_system(body, limits));
            return worker::command{worker::enqueue_command{
                s::enqueue_input{s::lane::system, r.id.value_or(new_id),
                                 s::system_input{std::move(r.source), std::move(r.content)}}}};
        }
        case verb::cancel: {
            WUHU_TRY(r, s::decode_cancel(body));
            return worker::command{worker::cancel_command{r.in, std::move(r.id)}};
        }
        case verb::configure: {
            WUHU_TRY(r, s::decode_configure(body, limits));
            return worker::command{worker::configure_command{std::move(r)}};
        }
        case verb::abort: {
            WUHU_TRY(r, s::decode_abort(body));
            return worker::command{worker::abort_command{std::move(r.reason)}};
        }
        case verb::pause:
        case verb::resume: {
            if (auto r = s::decode_empty(body); !r) {
                return r.error();
            }
            return v == verb::pause ? worker::command{worker::pause_command{}}
                                    : worker::command{worker::resume_command{}};
        }
        case verb::subscribe:
        case verb::remove:
            break;
    }
    return s::decode_error{s::errc::unknown_command, ""};
}

std::string ok_reply(verb v, const worker::command_reply& r) {
    json::object o{{"ok", true}};
    switch (v) {
        case verb::enqueue:
        case verb::system:
            if (r.id) {
                o["id"] = r.id->str();
            }
            break;
        case verb::cancel:
            o["canceled"] = r.canceled.value_or(false);
            break;
        case verb::configure:
            if (r.config) {
                o["settings"] = s::to_json(*r.config);
            }
            break;
        default:
            break;
    }
    return json::serialize(o);
}

std::string subscribe_reply(const s::patch& p, const s::status& st, std::uint64_t step,
                            const std::optional<worker::inflight_message>& inflight) {
    json::object o{
        {"ok", true}, {"patch", s::to_json(p)}, {"status", s::to_json(st)}, {"step", step}};
    if (p.config) {
        o["settings"] = s::to_json(*p.config);
    }
    if (inflight) {
        o["inflight"] = json::object{
            {"step", inflight->step}, {"text", inflight->text}, {"seq", inflight->deltas}};
    }
    return json::serialize(o);
}

std::vector<std::string> chunked(std::string reply, std::size_t max_bytes) {
    if (reply.size() <= max_bytes) {
        return {std::move(reply)};
    }
    // Escaping at most doubles a part (`"` and `\` gain a backslash; the reply has no raw
    // control characters), and the envelope takes well under 128 bytes.
    constexpr std::size_t envelope = 128;
    const std::size_t part_max = max_bytes > 2 * envelope ? (max_bytes - envelope) / 2 : 64;
    std::vector<std::string_view> parts;
    std::string_view rest = reply;
    while (!rest.empty()) {
        std::size_t n = std::min(part_max, rest.size());
        while (n < rest.size() && n > 0 && (static_cast<unsigned char>(rest[n]) & 0xC0) == 0x80) {
            --n;  // do not cut inside a UTF-8 sequence
        }
        parts.push_back(rest.substr(0, n));
        rest.remove_prefix(n);
    }
    std::vector<std::string> out;
    out.reserve(parts.size());
    for (std::size_t i = 0; i < parts.size(); ++i) {
        out.push_back(json::serialize(json::object{
            {"ok", true}, {"chunk", i}, {"chunks", parts.size()}, {"part", parts[i]}}));
    }
    return out;
}

std::string patch_event(const s::patch& p) {
    return json::serialize(s::to_json(p));
}

std::optional<std::string> delta_event(const worker::loop_event& e) {
    return std::visit(
        s::overloaded{
            [](const worker::stream_began_event& x) -> std::optional<std::string> {
                return json::serialize(json::object{{"type", "message.start"}, {"step", x.step}});
            },
            [](const worker::stream_delta_event& x) -> std::optional<std::string> {
                if (x.tool_call) {
                    return json::serialize(json::object{{"type", "tool_call.delta"},
                                                        {"step", x.step},
                                                        {"seq", x.seq},
                                                        {"id", x.tool_call->id},
                                                        {"name", x.tool_call->name},
                                                        {"arguments", x.tool_call->arguments}});
                }
                return json::serialize(json::object{
                    {"type", "text.delta"}, {"step", x.step}, {"seq", x.seq}, {"text", x.text}});
            },
            [](const worker::stream_ended_event& x) -> std::optional<std::string> {
                if (x.committed) {
                    return std::nullopt;  // the patch with the assistant entry is message.end
                }
                return json::serialize(json::object{{"type", "message.discard"}, {"step", x.step}});
            },
            [](const auto&) -> std::optional<std::string> { return std::nullopt; },
        },
        e);
}

}  // namespace wuhu::broker
