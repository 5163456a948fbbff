// Validation of user-supplied text: UTF-8, no NUL, size limits.
#pragma once

#include "session/errc.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace wuhu::session {

// Default limit on the content of one queued message (DESIGN.md "Identity and validation").
inline constexpr std::size_t default_max_content_bytes = 256 * 1024;

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s) noexcept;

// Checks message content: valid UTF-8, no NUL (PostgreSQL jsonb cannot hold \u0000), and at
// most `max_bytes` bytes.
result<void> check_content(std::string_view s, std::size_t max_bytes);

// Makes text from a provider or a tool safe to store and to send: invalid UTF-8 sequences and
// NUL characters become U+FFFD. Valid text is unchanged.
std::string sanitized(std::string_view s);

// Text past `max_bytes` (a provider's answer, a tool's output: DESIGN.md "Bounds") cut at a
// character boundary, with a note of what was cut appended (the model and the clients read
// it), the whole within `max_bytes` (for a limit of at least 256 bytes). Text within the limit,
// or a limit of 0, is unchanged, unless `was_cut` (what it belongs to was stopped past the
// limit: the note is added, the text cut as needed). `what`: "answer", "tool output".
std::string cut_to(std::string text, std::size_t max_bytes, std::string_view what,
                   bool was_cut = false);
// The note cut_to() appends.
std::string cut_note(std::size_t max_bytes, std::string_view what);

// Rough token estimate used by compaction planning: ceil(bytes / 4).
std::uint64_t estimate_tokens(std::string_view s) noexcept;

}  // namespace wuhu::session
