#include "session/lane.hpp"

namespace wuhu::session {

std::string_view lane_name(lane l) {
    switch (l) {
        case lane::system:
            return "system";
        case lane::steer:
            return "steer";
        case lane::follow_up:
            return "followUp";
    }
    return "unknown";
}

result<lane> parse_lane(std::string_view s) {
    for (lane l : all_lanes) {
        if (s == lane_name(l)) {
            return l;
        }
    }
    return errc::invalid_lane;
}

const queue_item_id& journal_entry::item_id() const {
    return std::visit(
        [](const auto& f) -> const queue_item_id& {
            using fact_t = std::decay_t<decltype(f)>;
            if constexpr (std::is_same_v<fact_t, enqueued_fact>) {
                return f.item.id;
            } else if constexpr (std::is_same_v<fact_t, scheduled_fact>) {
                return f.t.id;
            } else {
                return f.id;
            }
        },
        fact);
}

}  // namespace wuhu::session
