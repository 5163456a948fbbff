// The settings of a session's loop: timeouts, the retry policy, the role mapping, and where
// store IO runs.
#pragma once

#include "providers/inference_slots.hpp"
#include "runtime/clock.hpp"
#include "session/context.hpp"
#include "session/loop_policy.hpp"
#include "session/rules.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <cstdint>
#include <map>
#include <optional>

namespace wuhu::worker {

using std::chrono::milliseconds;

// How long a streamed answer (an inference, a summary) may take, each 0 for no limit: until its
// first byte arrives (the response's headers), between two bytes, and in all. A stream past
// one of them ends the attempt with a transient error, retried by the retry policy. They apply
// to every provider; an HTTP endpoint's own first-byte and idle timeouts (docs/providers.md),
// shorter by default, apply within them.
struct stream_limits {
    milliseconds first_byte{180'000};
    milliseconds idle{180'000};
    milliseconds total{3'600'000};
};

struct loop_options {
    stream_limits inference;
    stream_limits summary{milliseconds(180'000), milliseconds(180'000), milliseconds(600'000)};
    // A tool call's limit, for the tools without one of their own (the tools file's
    // `timeout_ms`).
    milliseconds tool_timeout{60'000};
    // How long a finished tool result may wait, while the next call of the response runs, to
    // be committed with the results that follow it (worker/tool_runner.hpp).
    milliseconds tool_result_linger{5};
    session::retry_policy retry;
    // The projection keeps the lanes apart (system-lane content is `developer`); each
    // provider maps developer to what its API takes (openai: developer, or user/system per
    // endpoint; anthropic: user).
    session::role_mapping roles = session::openai_roles;
    std::uint64_t jitter_seed = 0;  // 0: from std::random_device
    // Where store operations run (a bounded pool shared by the sessions), so that one
    // session's commit does not block the others; none: inline on the loop's executor.
    std::optional<boost::asio::any_io_executor> store_executor;
    // Bounds (DESIGN.md "Bounds"): what one lane may hold pending (lane_full past it), and how
    // many commands may wait for the session's serialized section (overloaded past it; 0: no
    // limit). Each waiting command holds its request, so the bound is also one on memory.
    session::lane_limits lanes;
    // The largest provider answer (its text and tool calls as streamed) or tool output stored
    // in one entry: past it, an answer's stream is stopped and the answer stored cut, ending
    // the turn; a tool's output is stored cut. Each with a note (session::cut_to). 0: none.
    std::size_t max_entry_bytes = 1024 * 1024;
    // The worker's inference slots (per worker and per tenant), shared by its loops; none: no
    // limit. Each attempt holds one from before its request until its stream ends; the loop
    // state is `inferring` while it waits.
    providers::inference_slots* inferences = nullptr;
    std::size_t max_waiting_commands = 64;
    // The fleet's default budget: each limit a session leaves at 0 (session/settings.hpp).
    session::budget budget;
    // Each tenant's default budget, by tenant (--tenant-budgets): each limit it leaves at 0 is
    // the fleet's, and each one a session leaves at 0 is its tenant's.
    std::map<std::string, session::budget, std::less<>> tenant_budgets;
    // The defaults of a session of `tenant` ("": of no tenant).
    session::budget defaults_for(std::string_view tenant) const {
        auto it = tenant_budgets.find(tenant);
        return it == tenant_budgets.end() ? budget : session::effective(it->second, budget);
    }
};

}  // namespace wuhu::worker
