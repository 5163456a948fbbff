// The usage ledger of a session (issue 33): what its inferences used and cost, and how many
// turns and tool calls it made, folded from its transcript, so that the totals survive every
// crash and takeover exactly (the reducer keeps them in session_state::usage as entries are
// appended; a store folds the same from the actions it commits).
//
// Cost is in nano-dollars (1e-9 USD), an integer: totals add exactly. Each entry carries the
// cost its usage had by the price table in force when it was recorded; a later change of prices
// re-prices nothing.
#pragma once

#include "session/entry.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wuhu::session {

struct usage_totals {
    token_usage tokens;            // by kind, summed
    std::uint64_t cost = 0;        // nano-dollars
    std::uint64_t turns = 0;       // inferences answered: assistant entries
    std::uint64_t tool_calls = 0;  // tool calls started: tool_started entries
    bool operator==(const usage_totals&) const = default;
};

// Adds what an entry records to `t` (nothing for the entries that record no usage), and
// whether it records any. Every inference's usage and cost count: an answer's (which is also a
// turn), a compaction's summary's, and a billed attempt's (below).
void count(usage_totals& t, const entry_body& b);
// The same for an answer not yet in an entry.
void count(usage_totals& t, const assistant_message& m);
bool counts(const entry_body& b);

// An inference the provider billed whose answer no entry records: it failed after the
// provider reported usage (Anthropic reports the input's as the stream begins), or it was
// stopped (an abort, a timeout). Recorded before the loop retries or ends the turn, as a
// diagnostic (code "billed_attempt") with the usage, the model and cost; the turn goes on
// (needs_inference looks past it). `why`: what became of the attempt.
inline constexpr std::string_view billed_attempt_code = "billed_attempt";
diagnostic billed_attempt(const token_usage& u, std::string model, std::uint64_t cost,
                          std::string_view why);
bool is_billed_attempt(const entry_body& b);

// A price per million tokens of each kind, in nano-dollars (so $2.50 is 2'500'000'000); the
// reasoning tokens are part of the output and priced with it.
struct model_prices {
    std::uint64_t input = 0;
    std::uint64_t cached_input = 0;
    std::uint64_t cache_write = 0;
    std::uint64_t output = 0;
    bool operator==(const model_prices&) const = default;
};

// What `u` costs at `p`, in nano-dollars, rounded to the nearest.
std::uint64_t cost_of(const token_usage& u, const model_prices& p);

// A budget's limit that the totals reached (or came near): which, how much of it was used, and
// the limit.
struct budget_limit {
    std::string_view name;  // "tokens", "cost", "turns", "tool_calls"
    std::uint64_t used = 0;
    std::uint64_t max = 0;
    bool operator==(const budget_limit&) const = default;
};

struct budget;  // session/settings.hpp

// The session's budget with the fleet's defaults for what it leaves at 0 (soft_percent: 80
// when both do).
budget effective(const budget& session, const budget& fleet);
// The first limit of `b` that `t` reached (used >= max), if any.
std::optional<budget_limit> exhausted(const usage_totals& t, const budget& b);
// The limits of `b` that `t` reached `b.soft_percent` of without reaching them, in order.
std::vector<budget_limit> nearly_exhausted(const usage_totals& t, const budget& b);
// The diagnostic that records a spent budget (code "budget_exhausted"), and the system-lane
// notice the model gets near a limit (its item's id names the limit and its value, so that it
// is enqueued once per limit set).
diagnostic budget_exhausted_report(const budget_limit& l);
std::string budget_notice_id(const budget_limit& l);
std::string budget_notice_text(const budget_limit& l, std::uint32_t percent);

// "0.000123" dollars, from nano-dollars (nine decimals at most, trailing zeros cut, at least
// two decimals): for people and logs.
std::string dollars(std::uint64_t nano);

}  // namespace wuhu::session
