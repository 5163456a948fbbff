// What the store indexes about a session, so that the recovery sweep and the fleet view need
// not load it: whether it has work, its lane depths, its pending timers and when the first is
// due, its last activity, its calls waiting for approval, and its ledger's cost and tokens.
//
// `summarize(before, actions)` is the summary of `applied(actions, before)` without applying
// them: a store computes it inside the commit that records `actions`, for the price of a walk
// over the actions and the pending timers (no copy of the transcript).
#pragma once

#include "session/action.hpp"
#include "session/state.hpp"

#include <array>
#include <cstdint>
#include <optional>

namespace wuhu::session {

struct session_summary {
    bool has_work = false;
    bool paused = false;
    std::array<std::uint32_t, 3> lanes{};  // pending items, by index_of(lane)
    std::uint32_t timers = 0;              // pending schedule_callback timers
    // When the earliest of them is due, or the earliest deadline of a call that waits for a
    // person's approval (its default decision needs an owner then).
    std::optional<unix_ms> next_timer;
    unix_ms last_activity{0};  // the later of the last entry and each lane's last fact (0: none)
    std::uint32_t approvals = 0;  // calls waiting for a person's approval (session/approval.hpp)
    std::uint64_t cost = 0;  // the ledger's cost (nano-dollars) and tokens (session/ledger.hpp)
    std::uint64_t tokens = 0;
    bool operator==(const session_summary&) const = default;
};

session_summary summarize(const session_state& s);
session_summary summarize(const session_state& before, const action_list& actions);

// The ledger's totals after `actions` (session/ledger.hpp): `t` with what their entries record.
usage_totals counted(usage_totals t, const action_list& actions);

}  // namespace wuhu::session
