#include "broker/patch_batch.hpp"

#include <algorithm>

namespace wuhu::broker {

bool patch_batch::add(const session::session_id& sid, session::patch p, bool loop_change) {
    const bool was_empty = held_.empty();
    auto it = std::find_if(held_.begin(), held_.end(), [&](const held& h) { return h.sid == sid; });
    if (it == held_.end()) {
        held_.push_back({sid, std::move(p), loop_change});
        return was_empty;
    }
    if (loop_change && it->loop_change) {
        // Two loop states: the first goes out on its own.
        out_(it->sid, it->p);
        it->p = std::move(p);
        return false;
    }
    it->p = session::compose(it->p, p);
    it->loop_change = it->loop_change || loop_change;
    return false;
}

void patch_batch::flush() {
    // out_ may publish, never add: the held patches are taken first all the same.
    auto held = std::move(held_);
    held_.clear();
    for (const auto& h : held) {
        out_(h.sid, h.p);
    }
}

}  // namespace wuhu::broker
