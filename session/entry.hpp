// Transcript entries: the append-only log of a session.
//
// Message entries (party, system, assistant, tool result) are eligible for the LLM context;
// the others (tool started, compaction, interruption, diagnostic) are markers for recovery,
// observability and the UI. Entries are never changed once appended.
#pragma once

#include "session/author.hpp"
#include "session/ids.hpp"
#include "session/lane.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace wuhu::session {

// An inference's tokens. `input` excludes what was read from the provider's prompt cache
// (`cached_input`) and what was written to it (`cache_write`, Anthropic's cache creation):
// the context was input + cached_input + cache_write tokens. `reasoning` is the part of
// `output` the model spent reasoning (as OpenAI reports it; priced as output).
struct token_usage {
    std::uint64_t input = 0;
    std::uint64_t cached_input = 0;
    std::uint64_t output = 0;
    std::uint64_t cache_write = 0;
    std::uint64_t reasoning = 0;
    std::uint64_t total() const { return input + cached_input + cache_write + output; }
    bool operator==(const token_usage&) const = default;
};

struct tool_call {
    tool_call_id id;
    std::string name;
    std::string arguments;  // JSON text, as the provider produced it
    bool operator==(const tool_call&) const = default;
};

// A steer or follow-up item, materialized.
struct party_message {
    author from;
    lane via = lane::follow_up;
    queue_item_id item;
    std::string content;
    // When the party sent it (its item was enqueued); the entry's `at` is when it joined the
    // transcript. The model's header shows this one. 0: not recorded (an entry stored before).
    unix_ms sent_at{0};
    bool operator==(const party_message&) const = default;
};

// A system-lane item, materialized.
struct system_message {
    system_source source;
    queue_item_id item;
    std::string content;
    bool operator==(const system_message&) const = default;
};

// `model` is the model the provider reported (the configured one if it reported none);
// `cost` what the usage cost by the price table when it was recorded (session/ledger.hpp).
struct assistant_message {
    std::string text;
    std::vector<tool_call> tool_calls;
    token_usage usage;
    std::string model;
    std::uint64_t cost = 0;  // nano-dollars (1e-9 USD); 0: no price known
    bool operator==(const assistant_message&) const = default;
};

// Durable "this tool call is about to run" (toolWillExecute).
struct tool_started {
    tool_call_id call;
    std::string tool;
    bool operator==(const tool_started&) const = default;
};

// Durable outcome of a tool call (toolDidExecute).
struct tool_result {
    tool_call_id call;
    std::string tool;
    std::string output;
    bool is_error = false;
    bool operator==(const tool_result&) const = default;
};

// Summary of the segment before `first_kept`; summaries stack across compactions. `usage`,
// `model` and `cost`: what the summary's inference used, as an answer's (all 0 and empty in
// entries stored before they were kept).
struct compaction {
    std::string summary;
    entry_seq first_kept;
    std::uint64_t tokens_before = 0;
    token_usage usage = {};
    std::string model = {};
    std::uint64_t cost = 0;
    bool operator==(const compaction&) const = default;
};

// Work that stopped before it finished. `aborted`: a client asked (the loop does not redo the
// work). `owner_lost`: the previous owner died mid-stream (the new owner redoes the inference).
enum class interruption_kind { aborted, owner_lost };

// What an abort stopped: the inference streaming, the wait before its retry, a compaction's
// summary, a tool call running, or the turn between two of its steps (a commit, a checkpoint,
// the tool calls not started yet). `none`: an owner_lost interruption (or an abort recorded
// before the stage was).
enum class abort_stage { none, inference, backoff, compaction, tool, step };
std::string_view stage_name(abort_stage s);  // "inference", ...; "nothing" for none
std::optional<abort_stage> stage_named(std::string_view name);

struct interruption {
    std::string reason;
    interruption_kind kind = interruption_kind::aborted;
    abort_stage stopped = abort_stage::none;
    // The abort request's idempotency key, if it had one: a retried abort finds it here.
    std::string abort_id = {};
    bool operator==(const interruption&) const = default;
};

// A person's decision on a call that waits for one (docs/protocol.md "Approvals"): run it
// (approve, perhaps with edited arguments), give the model an error instead (reject), or give
// it a result a person wrote, the tool not run (respond).
enum class decision { approve, reject, respond };
std::string_view decision_name(decision d);  // "approve", "reject", "respond"
std::optional<decision> decision_named(std::string_view name);

// Durable "this call waits for a person" (issue 33): recorded before anything of the call
// runs. `deadline`: when `on_deadline` is applied if nobody decided (0: never).
struct approval_requested {
    tool_call_id call;
    std::string tool;
    std::string arguments;  // as the model gave them
    unix_ms deadline{0};
    decision on_deadline = decision::reject;
    bool operator==(const approval_requested&) const = default;
};

// The decision on a waiting call, with who made it (system_author for the deadline's default,
// `by_deadline` set). A reject's or respond's result follows it in the same commit.
struct approval_decided {
    tool_call_id call;
    std::string tool;
    decision what = decision::approve;
    author by = unknown_author{};
    std::string arguments;  // approve: what the call runs with (as asked, or edited)
    std::string message;    // reject: the error the model sees; respond: the result
    bool by_deadline = false;
    bool operator==(const approval_decided&) const = default;
};

// A visible error or notice, e.g. input_too_large. `usage`, `model` and `cost`: what an
// inference the provider billed used when no answer records it (code "billed_attempt",
// session/ledger.hpp); none otherwise.
struct diagnostic {
    std::string code;
    std::string message;
    token_usage usage = {};
    std::string model = {};
    std::uint64_t cost = 0;
    bool operator==(const diagnostic&) const = default;
};

using entry_body =
    std::variant<party_message, system_message, assistant_message, tool_started, tool_result,
                 compaction, interruption, diagnostic, approval_requested, approval_decided>;

struct entry {
    entry_seq id;
    unix_ms at;
    entry_body body;
    bool operator==(const entry&) const = default;
};

// True for entries that go into the LLM context projection.
bool is_message(const entry_body& b);

// "party_message", "assistant_message", ... (the JSON `type` tag).
std::string_view type_name(const entry_body& b);

}  // namespace wuhu::session
