#include "session/settings.hpp"

#include "session/text.hpp"

namespace wuhu::session {

namespace {
bool valid_tool_name(const std::string& n) {
    if (n.empty() || n.size() > 64) {
        return false;
    }
    for (char c : n) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok) {
            return false;
        }
    }
    return true;
}
}  // namespace

result<void> validate(const settings& s) {
    if (s.model.empty() || s.model.size() > 128 || !is_valid_utf8(s.model)) {
        return errc::invalid_settings;
    }
    if (auto r = check_content(s.system_prompt, default_max_content_bytes); !r) {
        return r.error();
    }
    if (s.context_limit == 0 || s.compaction_buffer >= s.context_limit ||
        s.keep_recent_tokens >= s.context_limit) {
        return errc::invalid_settings;
    }
    if (s.utc_offset_minutes < -14 * 60 || s.utc_offset_minutes > 14 * 60) {
        return errc::invalid_settings;
    }
    if (s.limits.soft_percent > 100) {
        return errc::invalid_settings;
    }
    if (s.tools.size() > 256) {
        return errc::invalid_settings;
    }
    for (const auto& t : s.tools) {
        if (!valid_tool_name(t)) {
            return errc::invalid_settings;
        }
    }
    const auto& a = s.approval;
    if (a.tools.size() > 256 || a.deadline_ms > max_approval_deadline_ms ||
        a.on_deadline == decision::respond) {
        return errc::invalid_settings;
    }
    for (const auto& [name, mode] : a.tools) {
        if (name != "*" && !valid_tool_name(name)) {
            return errc::invalid_settings;
        }
    }
    return {};
}

std::string_view approval_mode_name(approval_mode m) {
    return m == approval_mode::always ? "always" : "never";
}

std::optional<approval_mode> approval_mode_named(std::string_view name) {
    if (name == "always") {
        return approval_mode::always;
    }
    if (name == "never") {
        return approval_mode::never;
    }
    return std::nullopt;
}

std::string_view loop_state_name(loop_state s) {
    switch (s) {
        case loop_state::idle:
            return "idle";
        case loop_state::preparing:
            return "preparing";
        case loop_state::inferring:
            return "inferring";
        case loop_state::executing_tools:
            return "executing_tools";
        case loop_state::compacting:
            return "compacting";
        case loop_state::awaiting_approval:
            return "awaiting_approval";
    }
    return "unknown";
}

result<settings> settings_update::applied_to(settings s) const {
    if (model) {
        s.model = *model;
    }
    if (system_prompt) {
        s.system_prompt = *system_prompt;
    }
    if (tools) {
        s.tools = *tools;
    }
    if (context_limit) {
        s.context_limit = *context_limit;
    }
    if (compaction_buffer) {
        s.compaction_buffer = *compaction_buffer;
    }
    if (keep_recent_tokens) {
        s.keep_recent_tokens = *keep_recent_tokens;
    }
    if (utc_offset_minutes) {
        s.utc_offset_minutes = *utc_offset_minutes;
    }
    if (limits) {
        s.limits = *limits;
    }
    if (approval) {
        s.approval = *approval;
    }
    if (auto v = validate(s); !v) {
        return v.error();
    }
    return s;
}

}  // namespace wuhu::session
