#include "session/state.hpp"

namespace wuhu::session {

std::uint64_t& version_vector::of(lane l) {
    switch (l) {
        case lane::system:
            return system;
        case lane::steer:
            return steer;
        case lane::follow_up:
            return follow_up;
    }
    return system;
}

std::uint64_t version_vector::of(lane l) const {
    return const_cast<version_vector*>(this)->of(l);
}

bool version_vector::le(const version_vector& o) const {
    return transcript <= o.transcript && system <= o.system && steer <= o.steer &&
           follow_up <= o.follow_up;
}

version_vector session_state::version() const {
    version_vector v;
    v.transcript = transcript.size();
    for (lane l : all_lanes) {
        v.of(l) = in(l).journal.size();
    }
    return v;
}

bool session_state::has_pending() const {
    for (const auto& l : lanes) {
        if (!l.pending.empty()) {
            return true;
        }
    }
    return false;
}

const item_record* session_state::find_item(const std::string& id) const {
    auto it = items.find(id);
    return it == items.end() ? nullptr : &it->second;
}

const tool_call_state* session_state::find_tool_call(const std::string& id) const {
    for (const auto& t : tool_calls) {
        if (t.call.id.str() == id) {
            return &t;
        }
    }
    return nullptr;
}

const entry* session_state::find_entry(entry_seq id) const {
    if (id.value == 0 || id.value > transcript.size()) {
        return nullptr;
    }
    return &transcript[id.value - 1];
}

const entry* session_state::last_compaction() const {
    for (auto it = transcript.rbegin(); it != transcript.rend(); ++it) {
        if (std::holds_alternative<compaction>(it->body)) {
            return &*it;
        }
    }
    return nullptr;
}

}  // namespace wuhu::session
