// Input lanes, queue items and the journal of their lifecycle.
//
// Each lane keeps an append-only journal of durable facts (enqueued, canceled, materialized;
// and in the system lane, the timers scheduled and unscheduled);
// its cursor is the number of facts recorded, and is that lane's component of the version
// vector. Pending items are those enqueued and neither canceled nor materialized, FIFO.
#pragma once

#include "session/author.hpp"
#include "session/ids.hpp"

#include <array>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace wuhu::session {

enum class lane { system = 0, steer = 1, follow_up = 2 };
inline constexpr std::array<lane, 3> all_lanes{lane::system, lane::steer, lane::follow_up};

// "system", "steer", "followUp".
std::string_view lane_name(lane l);
result<lane> parse_lane(std::string_view s);
constexpr std::size_t index_of(lane l) {
    return static_cast<std::size_t>(l);
}

// Payload of a steer or follow-up item: a party's message.
struct user_input {
    author from;  // participant or unknown_author, never system_author
    std::string content;
    bool operator==(const user_input&) const = default;
};

// Payload of a system-lane item: a machine source's notice.
struct system_input {
    system_source source;
    std::string content;
    bool operator==(const system_input&) const = default;
};

struct queue_item {
    queue_item_id id;
    lane in = lane::follow_up;
    unix_ms enqueued_at;
    std::variant<user_input, system_input> payload;
    bool operator==(const queue_item&) const = default;
};

struct enqueued_fact {
    queue_item item;
    bool operator==(const enqueued_fact&) const = default;
};
struct canceled_fact {
    queue_item_id id;
    bool operator==(const canceled_fact&) const = default;
};
// Links the item to the transcript entry it became.
struct materialized_fact {
    queue_item_id id;
    entry_seq entry;
    bool operator==(const materialized_fact&) const = default;
};

// A durable timer (schedule_callback): when due, it becomes a system-lane item whose id is the
// timer id, exactly once.
struct timer {
    queue_item_id id;
    unix_ms due;
    system_source source;
    std::string content;
    bool operator==(const timer&) const = default;
};

// System lane only: a callback scheduled for later (a timer), and its end: it fired (its item
// was enqueued, by the fact just before) or it was canceled first (its id is then spent).
struct scheduled_fact {
    timer t;
    bool operator==(const scheduled_fact&) const = default;
};
struct unscheduled_fact {
    queue_item_id id;
    bool fired = false;
    bool operator==(const unscheduled_fact&) const = default;
};

struct journal_entry {
    journal_seq seq;
    unix_ms at;
    std::variant<enqueued_fact, canceled_fact, materialized_fact, scheduled_fact, unscheduled_fact>
        fact;
    bool operator==(const journal_entry&) const = default;

    const queue_item_id& item_id() const;
};

enum class item_status { pending, canceled, materialized };

}  // namespace wuhu::session
