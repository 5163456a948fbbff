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

result<session_id> session_id::parse_key(std::string_view key) {
    const auto dot = key.find('.');
    if (dot == std::string_view::npos) {
        return parse(key);
    }
    return of_tenant(key.substr(0, dot), key.substr(dot + 1));
}

result<session_id> session_id::of_tenant(std::string_view tenant, std::string_view local) {
    if (!is_id_token(tenant) || !is_id_token(local)) {
        return errc::invalid_session_id;
    }
    std::string key;
    key.reserve(tenant.size() + 1 + local.size());
    key.append(tenant).append(".").append(local);
    return session_id(std::move(key));
}

std::string_view session_id::tenant() const {
    const auto dot = value_.find('.');
    return dot == std::string::npos ? std::string_view() : std::string_view(value_).substr(0, dot);
}

std::string_view session_id::local() const {
    const auto dot = value_.find('.');
    return dot == std::string::npos ? std::string_view(value_)
                                    : std::string_view(value_).substr(dot + 1);
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
