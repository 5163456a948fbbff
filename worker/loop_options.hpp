// The settings of a session's loop: timeouts, the retry policy, the role mapping, and where
// store IO runs.
#pragma once

#include "session/context.hpp"
#include "session/loop_policy.hpp"
#include "worker/clock.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <cstdint>
#include <optional>

namespace wuhu::worker {

struct loop_options {
    milliseconds inference_timeout{120'000};
    milliseconds tool_timeout{60'000};
    // How long a finished tool result may wait, while the next call of the response runs, to
    // be committed with the results that follow it (worker/tool_runner.hpp).
    milliseconds tool_result_linger{5};
    milliseconds summary_timeout{120'000};
    session::retry_policy retry;
    // The projection keeps the lanes apart (system-lane content is `developer`); each
    // provider maps developer to what its API takes (openai: developer, or user/system per
    // endpoint; anthropic: user).
    session::role_mapping roles = session::openai_roles;
    std::uint64_t jitter_seed = 0;  // 0: from std::random_device
    // Where store operations run (a bounded pool shared by the sessions), so that one
    // session's commit does not block the others; none: inline on the loop's executor.
    std::optional<boost::asio::any_io_executor> store_executor;
};

}  // namespace wuhu::worker
