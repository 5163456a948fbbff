#include "session/text.hpp"

#include <cstdint>
#include <cstring>

namespace wuhu::session {

bool is_valid_utf8(std::string_view s) noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const auto* end = p + s.size();
    while (p < end) {
        // ASCII eight bytes at a time (a 60 KiB request is checked on the serving executor).
        constexpr std::uint64_t high_bits = 0x8080808080808080ULL;
        std::uint64_t word = 0;
        while (end - p >= 8 && (std::memcpy(&word, p, 8), (word & high_bits) == 0)) {
            p += 8;
        }
        if (p == end) {
            break;
        }
        unsigned char c = *p;
        if (c < 0x80) {
            ++p;
            continue;
        }
        int n = 0;
        std::uint32_t cp = 0;
        std::uint32_t min = 0;
        if ((c & 0xE0) == 0xC0) {
            n = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (end - p <= n) {
            return false;
        }
        for (int i = 1; i <= n; ++i) {
            if ((p[i] & 0xC0) != 0x80) {
                return false;
            }
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        p += n + 1;
    }
    return true;
}

result<void> check_content(std::string_view s, std::size_t max_bytes) {
    if (s.size() > max_bytes) {
        return errc::content_too_large;
    }
    if (!is_valid_utf8(s)) {
        return errc::invalid_utf8;
    }
    if (s.find('\0') != std::string_view::npos) {
        return errc::invalid_content;
    }
    return {};
}

std::string sanitized(std::string_view s) {
    if (is_valid_utf8(s) && s.find('\0') == std::string_view::npos) {
        return std::string(s);
    }
    static constexpr std::string_view replacement = "\xEF\xBF\xBD";
    std::string out;
    out.reserve(s.size());
    std::size_t i = 0;
    while (i < s.size()) {
        // The longest valid sequence starting at i (1-4 bytes), else one replacement.
        std::size_t len = 0;
        for (std::size_t n = 1; n <= 4 && i + n <= s.size(); ++n) {
            if (is_valid_utf8(s.substr(i, n))) {
                len = n;
                break;
            }
        }
        if (len == 0 || s[i] == '\0') {
            out.append(replacement);
            ++i;
        } else {
            out.append(s.substr(i, len));
            i += len;
        }
    }
    return out;
}

std::string cut_note(std::size_t max_bytes, std::string_view what) {
    return "\n\n[cut by the runtime: this " + std::string(what) + " passed the limit of " +
           std::to_string(max_bytes) + " bytes]";
}

std::string cut_to(std::string text, std::size_t max_bytes, std::string_view what, bool was_cut) {
    if (max_bytes == 0 || (text.size() <= max_bytes && !was_cut)) {
        return text;
    }
    const std::string note = cut_note(max_bytes, what);
    std::size_t keep = std::min(text.size(), max_bytes > note.size() ? max_bytes - note.size() : 0);
    while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) {
        --keep;  // not inside a UTF-8 sequence
    }
    text.resize(keep);
    text += note;
    return text;
}

std::uint64_t estimate_tokens(std::string_view s) noexcept {
    return (s.size() + 3) / 4;
}

}  // namespace wuhu::session
