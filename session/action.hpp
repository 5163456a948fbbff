// Actions: value descriptions of what one durable operation changed.
//
// A store persists an operation and returns its actions; the owner applies them with the pure
// reducer and publishes them. The invariant harness checks
// `apply_actions(actions, before) == store.load()` after every operation.
#pragma once

#include "session/entry.hpp"
#include "session/lane.hpp"
#include "session/settings.hpp"
#include "session/state.hpp"

#include <variant>
#include <vector>

namespace wuhu::session {

struct entry_appended {
    entry e;
    bool operator==(const entry_appended&) const = default;
};
struct journal_recorded {
    lane in = lane::follow_up;
    journal_entry j;
    bool operator==(const journal_recorded&) const = default;
};
struct settings_set {
    settings value;
    bool operator==(const settings_set&) const = default;
};
struct has_work_set {
    bool value = false;
    bool operator==(const has_work_set&) const = default;
};
struct paused_set {
    bool value = false;
    bool operator==(const paused_set&) const = default;
};

struct timer_scheduled {
    timer t;
    bool operator==(const timer_scheduled&) const = default;
};
// The timer is gone: it fired (its item is enqueued in the same operation).
struct timer_cleared {
    queue_item_id id;
    bool operator==(const timer_cleared&) const = default;
};

using action = std::variant<entry_appended, journal_recorded, settings_set, has_work_set,
                            paused_set, timer_scheduled, timer_cleared>;
using action_list = std::vector<action>;

}  // namespace wuhu::session
