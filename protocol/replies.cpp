#include "protocol/replies.hpp"

#include "protocol/events.hpp"
#include "session/error_table.hpp"

#include <boost/throw_exception.hpp>

#include <stdexcept>

namespace wuhu::protocol {

namespace json = boost::json;
namespace s = wuhu::session;

std::string error_reply(std::string_view code, std::string_view message) {
    return json::serialize(
        json::object{{"ok", false}, {"error", json::object{{"code", code}, {"message", message}}}});
}

std::string error_reply(const boost::system::error_code& ec) {
    return error_reply(s::wire_code(ec), ec.message());
}

std::string error_reply(const boost::system::error_code& ec,
                        std::optional<std::chrono::milliseconds> retry_after) {
    json::object error{{"code", s::wire_code(ec)}, {"message", ec.message()}};
    if (retry_after) {
        error["retry_after_ms"] = retry_after->count();
    }
    return json::serialize(json::object{{"ok", false}, {"error", std::move(error)}});
}

std::string error_reply(const s::decode_error& e) {
    return error_reply(s::code_name(e.code), e.message());
}

std::string ok_reply(verb v, const command_result& r) {
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
            if (r.settings) {
                o["settings"] = s::to_json(*r.settings);
            }
            break;
        case verb::abort:
            o["stopped"] = s::stage_name(r.stopped);
            if (r.stopped != s::abort_stage::none) {
                o["entry"] = r.entry.value;
            }
            if (r.duplicate) {
                o["duplicate"] = true;
            }
            break;
        case verb::approve:
        case verb::reject:
        case verb::respond:
            if (r.decided) {
                o["decision"] = s::to_json(*r.decided);
            }
            if (r.duplicate) {
                o["duplicate"] = true;
            }
            break;
        default:
            break;
    }
    return json::serialize(o);
}

std::string subscribe_reply(const s::patch& p, const s::status& st, std::uint64_t step,
                            const std::optional<inflight>& streaming, bool more) {
    json::object o{
        {"ok", true}, {"patch", s::to_json(p)}, {"status", s::to_json(st)}, {"step", step}};
    if (more) {
        o["more"] = true;
    }
    if (p.config) {
        o["settings"] = s::to_json(*p.config);
    }
    if (streaming) {
        json::array calls;
        for (const auto& c : streaming->tool_calls) {
            calls.push_back(json::object{{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
        }
        o["inflight"] = json::object{{"step", streaming->step},
                                     {"epoch", streaming->epoch},
                                     {"text", streaming->text},
                                     {"seq", streaming->seq},
                                     {"tool_calls", std::move(calls)}};
    }
    return json::serialize(o);
}

void append_page(json::object& reply, json::object next) {
    auto& patch = reply["patch"].as_object();
    auto& later = next["patch"].as_object();
    auto append = [](json::value& into, json::value& more) {
        if (into.is_array() && more.is_array()) {
            for (auto& x : more.as_array()) {
                into.as_array().push_back(std::move(x));
            }
        }
    };
    append(patch["transcript"], later["transcript"]);
    if (auto* j = later.if_contains("journal"); j != nullptr && j->is_object()) {
        auto& into = patch["journal"];
        if (!into.is_object()) {
            into = json::object{};
        }
        for (auto& [lane, facts] : j->as_object()) {
            auto& mine = into.as_object()[lane];
            if (!mine.is_array()) {
                mine = json::array{};
            }
            append(mine, facts);
        }
    }
    patch["to"] = later["to"];
    // The registers of the last page's moment: a page's status (and settings, when they are in
    // its patch) are those of when it was read.
    for (const std::string_view k : {"status", "settings"}) {
        if (auto* r = later.if_contains(k)) {
            patch[k] = *r;
        } else {
            patch.erase(k);
        }
    }
    reply.erase("more");
    reply.erase("inflight");
    for (auto& [k, v] : next) {
        if (k != "patch") {
            reply[k] = std::move(v);
        }
    }
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

void throw_exception_from_error(const reply_error& e, const boost::source_location& loc) {
    boost::throw_exception(std::runtime_error(e.code + ": " + e.message), loc);
}

boost::system::result<json::object, reply_error> read_reply(std::string_view text) {
    boost::system::error_code ec;
    auto v = json::parse(text, ec);
    if (ec || !v.is_object() || !v.as_object().contains("ok") ||
        !v.as_object().at("ok").is_bool()) {
        return reply_error{"bad_reply",
                           "the reply is not a Wuhu reply: " + std::string(text.substr(0, 200))};
    }
    auto& o = v.as_object();
    if (!o.at("ok").as_bool()) {
        const auto* e = o.if_contains("error");
        if (e == nullptr || !e->is_object()) {
            return reply_error{"bad_reply", "an error reply without an error"};
        }
        auto str = [&](const char* k) {
            const auto* x = e->as_object().if_contains(k);
            return x != nullptr && x->is_string() ? std::string(x->as_string()) : std::string();
        };
        reply_error out{str("code"), str("message"), std::nullopt};
        // A hint is read only within reason (0 ms to 10 minutes): the worker's answer is not
        // trusted to make a client wait for ever.
        if (const auto* r = e->as_object().if_contains("retry_after_ms");
            r != nullptr && r->is_int64() && r->as_int64() >= 0 && r->as_int64() <= 600'000) {
            out.retry_after = std::chrono::milliseconds(r->as_int64());
        }
        return out;
    }
    return boost::system::result<json::object, reply_error>(boost::system::in_place_value,
                                                            std::move(o));
}

reply_assembler::progress reply_assembler::take(std::string message) {
    boost::system::error_code ec;
    auto v = json::parse(message, ec);
    const auto* chunk = !ec && v.is_object() ? v.as_object().if_contains("chunk") : nullptr;
    if (chunk == nullptr) {
        text_ = std::move(message);  // a whole reply
        return progress::done;
    }
    const auto* part = v.as_object().if_contains("part");
    const auto index = chunk->to_number<std::uint64_t>(ec);
    if (ec || index != next_ || part == nullptr || !part->is_string()) {
        return progress::bad;
    }
    ++next_;
    text_ += part->as_string();
    return next_ >= read_count(v.as_object(), "chunks") ? progress::done : progress::more;
}

}  // namespace wuhu::protocol
