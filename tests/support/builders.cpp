#include "tests/support/builders.hpp"

#include "session/reducer.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

queue_item_id item(const std::string& id) {
    return queue_item_id::parse(id).value();
}

tool_call_id call_id(const std::string& id) {
    return tool_call_id::parse(id).value();
}

author human(const std::string& id, const std::string& name, const std::string& email) {
    return make_participant(participant_id::parse(id).value(), name, email, participant_kind::human)
        .value();
}

enqueue_input user_in(lane l, const std::string& id, const std::string& content, author from) {
    return enqueue_input{l, item(id), user_input{std::move(from), content}};
}

enqueue_input system_in(const std::string& id, const std::string& content,
                        const std::string& source) {
    return enqueue_input{lane::system, item(id),
                         system_input{system_source::parse(source).value(), content}};
}

assistant_message reply(const std::string& text,
                        std::vector<std::pair<std::string, std::string>> calls) {
    assistant_message m;
    m.text = text;
    m.model = "scripted";
    for (auto& [id, name] : calls) {
        m.tool_calls.push_back(tool_call{call_id(id), name, "{}"});
    }
    return m;
}

tool_result result_of(const std::string& call, const std::string& output, bool is_error) {
    return tool_result{call_id(call), "", output, is_error};
}

session_state enqueued(session_state s, enqueue_input in, std::int64_t at_ms) {
    auto out = plan_enqueue(s, std::move(in), unix_ms{at_ms});
    EXPECT_TRUE(out.has_value());
    apply_actions(out->actions, s);
    return s;
}

session_state drained(session_state s, checkpoint c, std::int64_t at_ms) {
    apply_actions(plan_drain(s, c, unix_ms{at_ms}), s);
    return s;
}

}  // namespace wuhu::testing
