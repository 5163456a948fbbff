#include "session/errc.hpp"

#include "session/error_table.hpp"

namespace wuhu::session {
namespace {

constexpr std::array<error_text, errc_count> texts{{
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
    {"not_cancelable",
     "items of the system lane cannot be canceled (a scheduled callback can, before it fires)"},
    {"item_not_found", "no queue item with this id in this lane"},
    {"unknown_tool_call", "no tool call with this id in the transcript"},
    {"tool_call_not_started", "the tool call has not been marked as started"},
    {"tool_call_finished", "the tool call already has a result"},
    {"nothing_to_compact", "there is no segment old enough to summarize"},
    {"input_too_large", "queued input does not fit in the context window even after compaction"},
    {"invalid_entry", "the transcript entry is malformed"},
    {"invalid_query", "a field of the sessions query is out of range"},
    {"unknown_command", "the subject names no command of this service"},
    {"session_not_found", "no such session: only enqueue, system and configure create one"},
    {"invalid_tenant",
     "tenant must be 1-64 characters of [A-Za-z0-9_-], and not session, admin, events, tools or "
     "worker"},
    {"not_awaiting_approval",
     "the tool call does not wait for a decision (it needs no approval, or has its result)"},
    {"already_decided", "the tool call was decided otherwise already"},
    {"invalid_arguments", "the arguments are not a JSON object the tool's schema accepts"},
    {"lane_full",
     "the lane holds as many pending items (or bytes) as it may: retry once the session has "
     "taken some"},
    {"overloaded", "too many requests are waiting (in this worker, or for this session): retry"},
    {"rate_limited", "more requests (or new sessions) per second than allowed: retry"},
    {"quota_exceeded", "the tenant has as many sessions as it may: delete some first"},
}};

const table_category<errc_count>& category() {
    static const table_category<errc_count> instance("wuhu.session", texts,
                                                     "unknown session error");
    return instance;
}

}  // namespace

std::string_view code_name(errc e) {
    return category().code(static_cast<int>(e));
}

const boost::system::error_category& session_category() noexcept {
    return category();
}

}  // namespace wuhu::session
