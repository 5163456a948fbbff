#include "providers/stream_decoder.hpp"

#include <boost/json/object.hpp>

#include <set>

namespace wuhu::providers {

session::assistant_message stream_decoder::message() const {
    session::assistant_message m;
    m.text = text_;
    m.usage = usage_;
    m.model = model_;
    std::set<std::string> taken;
    for (const auto& [index, c] : calls_) {
        auto id = session::tool_call_id::parse(c.id);
        if (!id || taken.contains(id->str())) {
            // Missing, unusable, or a repeat of an earlier call's in this message (the session
            // refuses a message with two calls of one id, and the retry would get it again):
            // one of our own, unique in this message.
            id = session::tool_call_id::parse(id_prefix_ + std::to_string(index));
        }
        taken.insert(id->str());
        m.tool_calls.push_back(
            session::tool_call{*id, c.name, c.arguments.empty() ? std::string("{}") : c.arguments});
    }
    return m;
}

namespace event_json {

std::string_view text_of(const boost::json::value* v) {
    return v != nullptr && v->is_string() ? std::string_view(v->as_string()) : std::string_view{};
}

std::optional<std::uint64_t> count_of(const boost::json::object& o, std::string_view key) {
    // A count no model reaches is capped: the ledger adds them up (session/ledger.hpp).
    constexpr std::uint64_t most = 1'000'000'000'000;
    const auto* v = o.if_contains(key);
    if (v != nullptr && v->is_uint64()) {
        return std::min(v->as_uint64(), most);
    }
    if (v != nullptr && v->is_int64() && v->as_int64() >= 0) {
        return std::min(static_cast<std::uint64_t>(v->as_int64()), most);
    }
    return std::nullopt;
}

const boost::json::object* object_at(const boost::json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    return v != nullptr && v->is_object() ? &v->as_object() : nullptr;
}

}  // namespace event_json

}  // namespace wuhu::providers
