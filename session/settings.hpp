// Per-session settings (a register: its patch is always the current value) and the status
// register published to subscribers.
#pragma once

#include "session/errc.hpp"
#include "session/ledger.hpp"

#include "session/entry.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace wuhu::session {

// A session's budget (issue 33, docs/protocol.md "Budgets"): the most its ledger
// (session/ledger.hpp) may reach, each limit 0 for "the fleet's default" (the worker's --budget-*
// flags; 0 there: none). At `soft_percent` of a limit the model gets one notice in the system lane;
// at a limit the loop stops before its next inference, records a `budget_exhausted` diagnostic and
// pauses the session, whose queued input waits until a configure changes the budget.
struct budget {
    std::uint64_t tokens = 0;        // every kind, summed (token_usage::total)
    std::uint64_t cost = 0;          // nano-dollars
    std::uint64_t turns = 0;         // answers
    std::uint64_t tool_calls = 0;    // calls started
    std::uint32_t soft_percent = 0;  // 1-100 (100: no notice); 0: the fleet's (80 by default)
    bool operator==(const budget&) const = default;
};

// Whether a tool's calls wait for a person's approval (docs/protocol.md "Approvals").
enum class approval_mode { never, always };
std::string_view approval_mode_name(approval_mode m);  // "never", "always"
std::optional<approval_mode> approval_mode_named(std::string_view name);

// A session's approval rules (configure's `approval`), over the tools file's: per tool name
// ("*": every tool; a tool's own name first), whether its calls need approval; how long a call
// waits (0: the tools file's) and what is decided then (nullopt: the tools file's).
inline constexpr std::uint64_t max_approval_deadline_ms = 30ULL * 24 * 3600 * 1000;

struct approval_settings {
    std::map<std::string, approval_mode> tools;
    std::uint64_t deadline_ms = 0;
    std::optional<decision> on_deadline;  // approve or reject
    bool operator==(const approval_settings&) const = default;
};

struct settings {
    std::string model = "scripted";
    std::string system_prompt;
    std::vector<std::string> tools;  // names of enabled tools; empty means every registered one
    std::uint64_t context_limit = 128'000;
    std::uint64_t compaction_buffer = 16'000;
    std::uint64_t keep_recent_tokens = 20'000;
    int utc_offset_minutes = 0;  // for message headers
    budget limits;               // the session's budget
    approval_settings approval;  // which calls wait for a person
    bool operator==(const settings&) const = default;
};

// Checks ranges: context_limit > compaction_buffer, keep_recent_tokens < context_limit,
// |utc_offset_minutes| <= 14h, model 1-128 bytes, tool names 1-64 of [A-Za-z0-9_-], a budget's
// soft_percent 0-100; approval: at most 256 tools (names as above, or "*"), a deadline of at
// most 30 days, a default decision of approve or reject.
result<void> validate(const settings& s);

// A partial change of the settings (the `configure` command): the fields it names; the others
// keep their value.
struct settings_update {
    std::optional<std::string> model;
    std::optional<std::string> system_prompt;
    std::optional<std::vector<std::string>> tools;
    std::optional<std::uint64_t> context_limit;
    std::optional<std::uint64_t> compaction_buffer;
    std::optional<std::uint64_t> keep_recent_tokens;
    std::optional<int> utc_offset_minutes;
    std::optional<budget> limits;  // the whole budget (a limit left out: the fleet's)
    std::optional<approval_settings> approval;  // the whole approval rules

    // The settings after this update; invalid_settings when out of range.
    result<settings> applied_to(settings current) const;
};

enum class loop_state {
    idle,
    preparing,
    inferring,
    executing_tools,
    compacting,
    awaiting_approval
};
std::string_view loop_state_name(loop_state s);

// The session's status register. Statuses are published as they change, and a subscribe
// reply carries the latest one; (epoch, seq) orders them, so that a watcher keeps the newest
// whatever order it receives them in: `epoch` is the lease epoch of the owner that published
// it (a later owner has a higher one), `seq` grows with every status that owner publishes.
// Both are 0 in a status that was not published (a stored one).
struct status {
    loop_state state = loop_state::idle;
    bool paused = false;
    bool has_work = false;
    std::uint64_t epoch = 0;
    std::uint64_t seq = 0;
    usage_totals usage;  // the session's ledger (session/ledger.hpp)
    bool operator==(const status&) const = default;
};

}  // namespace wuhu::session
