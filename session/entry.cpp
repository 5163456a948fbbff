#include "session/entry.hpp"

namespace wuhu::session {

bool is_message(const entry_body& b) {
    return std::holds_alternative<party_message>(b) || std::holds_alternative<system_message>(b) ||
           std::holds_alternative<assistant_message>(b) || std::holds_alternative<tool_result>(b);
}

std::string_view type_name(const entry_body& b) {
    static constexpr std::string_view names[] = {
        "party_message",      "system_message",   "assistant_message", "tool_started",
        "tool_result",        "compaction",       "interruption",      "diagnostic",
        "approval_requested", "approval_decided",
    };
    static_assert(std::size(names) == std::variant_size_v<entry_body>);
    return names[b.index()];
}

namespace {
constexpr std::string_view stage_names[] = {"nothing", "inference", "backoff",
                                            "compaction", "tool", "step"};
constexpr std::string_view decision_names[] = {"approve", "reject", "respond"};
}  // namespace

std::string_view decision_name(decision d) {
    return decision_names[static_cast<std::size_t>(d)];
}

std::optional<decision> decision_named(std::string_view name) {
    for (std::size_t i = 0; i < std::size(decision_names); ++i) {
        if (decision_names[i] == name) {
            return static_cast<decision>(i);
        }
    }
    return std::nullopt;
}

std::string_view stage_name(abort_stage s) {
    return stage_names[static_cast<std::size_t>(s)];
}

std::optional<abort_stage> stage_named(std::string_view name) {
    for (std::size_t i = 0; i < std::size(stage_names); ++i) {
        if (stage_names[i] == name) {
            return static_cast<abort_stage>(i);
        }
    }
    return std::nullopt;
}

}  // namespace wuhu::session
