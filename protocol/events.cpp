#include "protocol/events.hpp"

#include "session/codec.hpp"

namespace wuhu::protocol {

namespace json = boost::json;

std::string patch_event(const session::patch& p) {
    return json::serialize(session::to_json(p));
}

json::object message_start(std::uint64_t step, std::uint64_t epoch) {
    return json::object{{"type", "message.start"}, {"step", step}, {"epoch", epoch}};
}

json::object text_delta(std::uint64_t step, std::uint64_t epoch, std::uint64_t seq,
                        std::string_view text) {
    return json::object{
        {"type", "text.delta"}, {"step", step}, {"epoch", epoch}, {"seq", seq}, {"text", text}};
}

json::object tool_call_delta(std::uint64_t step, std::uint64_t epoch, std::uint64_t seq,
                             std::string_view id, std::string_view name,
                             std::string_view arguments) {
    return json::object{{"type", "tool_call.delta"}, {"step", step}, {"epoch", epoch},
                        {"seq", seq},  {"id", id},  {"name", name},  {"arguments", arguments}};
}

json::object message_discard(std::uint64_t step, std::uint64_t epoch) {
    return json::object{{"type", "message.discard"}, {"step", step}, {"epoch", epoch}};
}

json::object session_deleted(std::uint64_t epoch) {
    return json::object{{"type", "session.deleted"}, {"epoch", epoch}};
}

std::uint64_t read_count(const json::object& o, std::string_view key) {
    const auto* x = o.if_contains(key);
    if (x == nullptr) {
        return 0;
    }
    if (const auto* u = x->if_uint64()) {
        return *u;
    }
    if (const auto* i = x->if_int64(); i != nullptr && *i >= 0) {
        return static_cast<std::uint64_t>(*i);
    }
    return 0;
}

}  // namespace wuhu::protocol
