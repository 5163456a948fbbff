#include "session/author.hpp"

#include "session/text.hpp"

#include <cstdio>

namespace wuhu::session {

result<system_source> system_source::parse(std::string_view s) {
    if (s.empty() || s.size() > 64) {
        return errc::invalid_source;
    }
    for (char c : s) {
        bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        if (!ok) {
            return errc::invalid_source;
        }
    }
    return system_source(std::string(s));
}

result<participant> make_participant(participant_id id, std::string name, std::string email,
                                     participant_kind kind) {
    if (name.empty() || name.size() > 128 || !is_valid_utf8(name)) {
        return errc::invalid_author;
    }
    for (unsigned char c : name) {
        if (c < 0x20 || c == 0x7F) {
            return errc::invalid_author;
        }
    }
    if (email.size() > 254) {
        return errc::invalid_author;
    }
    for (unsigned char c : email) {
        if (c <= 0x20 || c >= 0x7F || c == '<' || c == '>') {
            return errc::invalid_author;
        }
    }
    return participant{std::move(id), std::move(name), std::move(email), kind};
}

namespace {

// Howard Hinnant's days -> civil date, valid for the whole proleptic Gregorian calendar.
struct civil {
    std::int64_t year;
    unsigned month;
    unsigned day;
};

civil civil_from_days(std::int64_t z) {
    z += 719468;
    const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const auto doe = static_cast<unsigned>(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const std::int64_t y = static_cast<std::int64_t>(yoe) + era * 400;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    const unsigned d = doy - (153 * mp + 2) / 5 + 1;
    const unsigned m = mp < 10 ? mp + 3 : mp - 9;
    return {y + (m <= 2 ? 1 : 0), m, d};
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    std::int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace

std::string format_header(std::string_view name, std::string_view email, unix_ms at,
                          int utc_offset_minutes) {
    const std::int64_t minutes = floor_div(at.value, 60'000) + utc_offset_minutes;
    const std::int64_t days = floor_div(minutes, 1440);
    const std::int64_t minute_of_day = minutes - days * 1440;
    const civil c = civil_from_days(days);
    char stamp[64];
    std::snprintf(stamp, sizeof stamp, "%02d/%u/%u %02d:%02d",
                  static_cast<int>(((c.year % 100) + 100) % 100), c.month, c.day,
                  static_cast<int>(minute_of_day / 60), static_cast<int>(minute_of_day % 60));
    std::string out(name);
    if (!email.empty()) {
        out.append(" <").append(email).append(">");
    }
    out.append(" ").append(stamp);
    return out;
}

std::string with_header(std::string_view header, std::string_view content) {
    std::string out(header);
    out.append("\n\n").append(content);
    return out;
}

}  // namespace wuhu::session
