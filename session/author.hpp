// Who wrote an entry, and the header every message carries in the LLM context.
//
// User lanes carry a participant (human or bot) or `unknown`; the system lane carries a machine
// source tag instead of an author; transcript entries carry the full `author`.
#pragma once

#include "session/ids.hpp"

#include <string>
#include <variant>

namespace wuhu::session {

enum class participant_kind { human, bot };

struct participant {
    participant_id id;
    std::string name;   // 1-128 bytes of UTF-8 without control characters
    std::string email;  // empty, or up to 254 printable ASCII characters without spaces or <>
    participant_kind kind = participant_kind::human;
    bool operator==(const participant&) const = default;
};

struct unknown_author {
    bool operator==(const unknown_author&) const = default;
};
struct system_author {
    bool operator==(const system_author&) const = default;
};

using author = std::variant<participant, unknown_author, system_author>;

// Machine source of a system-lane item, e.g. "asyncBashCallback", "asyncTaskNotification",
// "scheduledCallback". An open set: 1-64 characters of [A-Za-z0-9_].
class system_source {
  public:
    static result<system_source> parse(std::string_view s);
    const std::string& str() const { return value_; }
    auto operator<=>(const system_source&) const = default;

  private:
    explicit system_source(std::string v) : value_(std::move(v)) {}
    std::string value_;
};

// Validates name and email of a participant.
result<participant> make_participant(participant_id id, std::string name, std::string email,
                                     participant_kind kind);

// Name shown in the header of system-lane messages.
inline constexpr std::string_view system_header_name = "system-reminder";

// "name <email> yy/m/d HH:MM" (email part omitted when empty), in UTC shifted by
// `utc_offset_minutes`. Example: "minsheng <lambda@liu.ms> 26/2/17 14:56".
std::string format_header(std::string_view name, std::string_view email, unix_ms at,
                          int utc_offset_minutes);

// Header, a blank line, then the content.
std::string with_header(std::string_view header, std::string_view content);

}  // namespace wuhu::session
