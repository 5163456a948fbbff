// SessionState: everything durable about one session, as a value.
//
// Built only by the reducer (`apply`) from actions, so a state loaded from a store and a state
// kept in memory by the owner compare equal exactly when they hold the same facts.
//
// Invariants:
//   transcript[i].id == i + 1
//   lanes[l].journal[i].seq == i + 1
//   lanes[l].pending == the journal positions of the items enqueued in lane l and neither
//                       canceled nor materialized, FIFO (each item's content is held once:
//                       by its enqueued fact)
//   items / tool_calls are indexes derived from the transcript and the journals (a timer
//                       unscheduled before it fired is a canceled item: its id is spent)
#pragma once

#include "session/entry.hpp"
#include "session/lane.hpp"
#include "session/settings.hpp"

#include <array>
#include <map>
#include <string>
#include <vector>

namespace wuhu::session {

struct lane_state {
    std::vector<journal_entry> journal;
    std::vector<std::size_t> pending;  // FIFO: positions in `journal` of enqueued facts
    journal_seq cursor() const { return {journal.size()}; }
    // The i-th pending item (held by its enqueued fact).
    const queue_item& pending_item(std::size_t i) const {
        return std::get<enqueued_fact>(journal[pending[i]].fact).item;
    }
    bool operator==(const lane_state&) const = default;
};

struct item_record {
    lane in = lane::follow_up;
    item_status status = item_status::pending;
    entry_seq entry;  // set once materialized
    bool operator==(const item_record&) const = default;
};

enum class tool_status { not_started, started, finished };

// Where a call that needs a person's approval stands (session/approval.hpp): none asked,
// waiting (pending), approved (it runs with `arguments`), or refused (a reject or respond: its
// result is recorded with the decision).
enum class approval_status { none, pending, approved, refused };

// Status of one tool call of the latest assistant message.
struct tool_call_state {
    tool_call call;
    tool_status status = tool_status::not_started;
    approval_status approval = approval_status::none;
    unix_ms deadline{0};                      // pending: when on_deadline applies (0: never)
    decision on_deadline = decision::reject;  // pending
    std::string arguments;                    // approved: what the call runs with
    bool operator==(const tool_call_state&) const = default;
};

// The component-wise position of a client: last transcript entry id and the cursor of each
// lane's journal. (Settings and status are registers and need no version.)
struct version_vector {
    std::uint64_t transcript = 0;
    std::uint64_t system = 0;
    std::uint64_t steer = 0;
    std::uint64_t follow_up = 0;
    bool operator==(const version_vector&) const = default;
    std::uint64_t& of(lane l);
    std::uint64_t of(lane l) const;
    // True when every component of *this is <= the one of `o`.
    bool le(const version_vector& o) const;
};

struct session_state {
    std::vector<entry> transcript;
    std::array<lane_state, 3> lanes;
    std::map<std::string, item_record> items;  // by queue item id, across all lanes
    std::vector<tool_call_state> tool_calls;   // of the latest assistant message, in order
    entry_seq tool_calls_entry;                // id of that assistant message (0: none)
    std::map<std::string, timer> timers;       // pending timers by id
    settings config;
    bool paused = false;
    bool has_work = false;
    usage_totals usage;  // folded from the transcript (session/ledger.hpp)

    bool operator==(const session_state&) const = default;

    entry_seq last_entry() const { return {transcript.size()}; }
    const lane_state& in(lane l) const { return lanes[index_of(l)]; }
    version_vector version() const;
    bool has_pending() const;
    const item_record* find_item(const std::string& id) const;
    const tool_call_state* find_tool_call(const std::string& id) const;
    const entry* find_entry(entry_seq id) const;
    // The newest compaction entry, or nullptr.
    const entry* last_compaction() const;
};

}  // namespace wuhu::session
