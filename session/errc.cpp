#include "session/errc.hpp"

#include <array>
#include <string>

namespace wuhu::session {
namespace {

struct errc_text {
    std::string_view code;
    std::string_view message;
};

constexpr std::array<errc_text, errc_count> texts{{
    {"ok", "success"},
    {"invalid_session_id", "session id must be 1-64 characters of [A-Za-z0-9_-]"},
    {"invalid_item_id", "queue item id must be 1-128 printable ASCII characters"},
    {"invalid_participant_id", "participant id must be 1-128 printable ASCII characters"},
    {"invalid_tool_call_id", "tool call id must be 1-128 printable ASCII characters"},
    {"invalid_json", "the request body is not valid JSON"},
    {"invalid_type", "a field has the wrong JSON type"},
    {"missing_field", "a required field is missing"},
    {"unknown_field", "the request has a field this command does not take"},
    {"invalid_lane", "lane must be one of system, steer, followUp"},
    {"invalid_source", "system source must be 1-64 characters of [A-Za-z0-9_]"},
    {"invalid_author", "author must be {id, name, email?, kind: human|bot}"},
    {"invalid_utf8", "text is not valid UTF-8"},
    {"invalid_content", "content must not contain NUL characters"},
    {"content_too_large", "content is larger than the configured limit"},
    {"invalid_settings", "settings are out of range"},
    {"invalid_version", "version vector must hold non-negative integers"},
    {"not_cancelable", "items of the system lane cannot be canceled"},
    {"item_not_found", "no queue item with this id in this lane"},
    {"unknown_tool_call", "no tool call with this id in the transcript"},
    {"tool_call_not_started", "the tool call has not been marked as started"},
    {"tool_call_finished", "the tool call already has a result"},
    {"nothing_to_compact", "there is no segment old enough to summarize"},
    {"input_too_large", "queued input does not fit in the context window even after compaction"},
    {"invalid_entry", "the transcript entry is malformed"},
    {"unknown_command", "the subject names no command of this service"},
}};

class category final : public boost::system::error_category {
  public:
    const char* name() const noexcept override { return "wuhu.session"; }
    std::string message(int ev) const override {
        if (ev < 0 || ev >= errc_count) {
            return "unknown session error";
        }
        return std::string(texts[static_cast<std::size_t>(ev)].message);
    }
};

}  // namespace

std::string_view code_name(errc e) {
    auto i = static_cast<std::size_t>(e);
    return i < texts.size() ? texts[i].code : std::string_view("unknown");
}

const boost::system::error_category& session_category() noexcept {
    static const category instance;
    return instance;
}

}  // namespace wuhu::session
