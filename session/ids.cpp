#include "session/ids.hpp"

namespace wuhu::session {

bool is_id_token(std::string_view s) {
    if (s.empty() || s.size() > 64) {
        return false;
    }
    for (char c : s) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok) {
            return false;
        }
    }
    return true;
}

result<session_id> session_id::parse(std::string_view s) {
    if (!is_id_token(s)) {
        return errc::invalid_session_id;
    }
    return session_id(std::string(s));
}

queue_item_id make_uuid_v7(unix_ms at, const std::array<std::uint8_t, 10>& random) {
    std::array<std::uint8_t, 16> b{};
    auto ms = static_cast<std::uint64_t>(at.value);
    for (int i = 0; i < 6; ++i) {
        b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(ms >> (40 - 8 * i));
    }
    for (std::size_t i = 0; i < 10; ++i) {
        b[6 + i] = random[i];
    }
    b[6] = static_cast<std::uint8_t>(0x70 | (b[6] & 0x0F));  // version 7
    b[8] = static_cast<std::uint8_t>(0x80 | (b[8] & 0x3F));  // variant 10
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(36);
    for (std::size_t i = 0; i < b.size(); ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) {
            out.push_back('-');
        }
        out.push_back(hex[b[i] >> 4]);
        out.push_back(hex[b[i] & 0x0F]);
    }
    return queue_item_id::parse(out).value();
}

}  // namespace wuhu::session
