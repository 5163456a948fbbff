// Compaction planning: when to compact, where to cut, what to summarize, and whether queued
// input can fit at all.
#pragma once

#include "session/context.hpp"
#include "session/state.hpp"

namespace wuhu::session {

// After each response: (cached_input + input + output) + compaction_buffer > context_limit.
bool should_compact(const token_usage& usage, const settings& config);

struct compaction_plan {
    entry_seq segment_begin;  // first entry of the segment to summarize
    entry_seq first_kept;     // first entry that stays in the context; the segment ends before it
    std::uint64_t tokens_before = 0;   // estimated tokens of the context before compaction
    std::vector<llm_message> segment;  // the segment's message entries, to summarize
};

// Walks back from the newest message entry of the current context, accumulating estimated
// tokens until keep_recent_tokens is reached; the cut lands on a party, system or assistant
// message, never on a tool result (a result stays with its call: the cut moves forward to the
// next valid boundary, or back if there is none). The segment runs from the previous
// compaction's first_kept (or the start) to the cut. nothing_to_compact when that is empty.
// `upto` (when not 0) limits the plan to entries up to that id: the response that triggered
// the compaction, so a retry after a restart plans exactly what the first attempt planned.
result<compaction_plan> plan_compaction(const session_state& s, const role_mapping& roles,
                                        entry_seq upto = {});

// The hard error of eager draining: the projected context must fit in context_limit after
// compaction, or the session reports input_too_large instead of staging the input.
result<void> check_fits(const session_state& s, const role_mapping& roles);
// The same check on an already projected context.
result<void> check_fits(const std::vector<llm_message>& context, const settings& config);

}  // namespace wuhu::session
