// The LLM context projection of a transcript.
//
// Without compaction: the system prompt, then every message entry in order. With compactions:
// the system prompt, every summary in order (they stack), then the message entries from the
// newest compaction's first_kept onwards. Party and system messages are rendered with their
// header ("name <email> yy/m/d HH:MM", a blank line, the content). Which provider role a lane
// maps to is a `role_mapping`.
#pragma once

#include "session/state.hpp"

#include <string>
#include <vector>

namespace wuhu::session {

enum class llm_role { system, developer, user, assistant, tool };
std::string_view role_name(llm_role r);

struct llm_message {
    llm_role role = llm_role::user;
    std::string content;
    std::vector<tool_call> tool_calls;  // assistant only
    std::string tool_call_id;           // tool only
    std::string tool_name;              // tool only
    bool is_error = false;              // tool only
    entry_seq source;                   // transcript entry it came from (0: prompt or summary)
    bool operator==(const llm_message&) const = default;
};

// Which role party (steer/followUp) and system-lane messages take for a provider. The `system`
// role is reserved for the top-of-context prompt and never used for lane content.
struct role_mapping {
    llm_role party = llm_role::user;
    llm_role system_lane = llm_role::user;
};
inline constexpr role_mapping openai_roles{llm_role::user, llm_role::developer};
inline constexpr role_mapping anthropic_roles{llm_role::user, llm_role::user};

// Text that introduces a compaction summary in the context.
inline constexpr std::string_view summary_preamble =
    "Summary of the earlier part of this conversation:\n\n";

// The LLM message for one message entry (REQUIRES: is_message(e.body)).
llm_message to_llm_message(const entry& e, const role_mapping& roles, int utc_offset_minutes);

std::vector<llm_message> project_context(const session_state& s, const role_mapping& roles);
// Puts each response's tool results in the order of its calls (a call that waited for a
// person's approval has its result recorded after the ones that ran meanwhile).
void in_call_order(std::vector<llm_message>& ms);

std::uint64_t estimate_tokens(const llm_message& m);
std::uint64_t estimate_tokens(const std::vector<llm_message>& ms);

}  // namespace wuhu::session
