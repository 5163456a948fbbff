// Small constructors for test data.
#pragma once

#include "session/rules.hpp"
#include "session/state.hpp"

#include <string>

namespace wuhu::testing {

using namespace wuhu::session;

queue_item_id item(const std::string& id);
tool_call_id call_id(const std::string& id);
author human(const std::string& id, const std::string& name, const std::string& email = "");
enqueue_input user_in(lane l, const std::string& id, const std::string& content,
                      author from = unknown_author{});
enqueue_input system_in(const std::string& id, const std::string& content,
                        const std::string& source = "asyncBashCallback");
assistant_message reply(
    const std::string& text,
    std::vector<std::pair<std::string, std::string>> calls = {});  // (call id, tool name)
tool_result result_of(const std::string& call, const std::string& output, bool is_error = false);

// Applies plan_enqueue and returns the new state (asserts success).
session_state enqueued(session_state s, enqueue_input in, std::int64_t at_ms);
// Applies plan_drain and returns the new state.
session_state drained(session_state s, checkpoint c, std::int64_t at_ms = 100);

}  // namespace wuhu::testing
