#include "providers/provider_errors.hpp"

#include <boost/json/parse.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

namespace wuhu::providers {

namespace json = boost::json;

namespace {

bool contains_nocase(std::string_view hay, std::string_view needle) {
    return std::search(hay.begin(), hay.end(), needle.begin(), needle.end(), [](char a, char b) {
               return std::tolower(static_cast<unsigned char>(a)) ==
                      std::tolower(static_cast<unsigned char>(b));
           }) != hay.end();
}

// The `error` object of a provider's JSON error body: {"error":{"message","type","code"}}
// (OpenAI and the servers that copy it; Anthropic adds "type":"error" around it), or
// {"error":"text"} (some OpenAI-compatible servers).
struct error_body {
    std::string type;  // type, or code when there is no type
    std::string code;
    std::string message;
};

std::optional<error_body> parse_error_body(std::string_view body) {
    boost::system::error_code ec;
    auto v = json::parse(body, ec);
    if (ec || !v.is_object()) {
        return std::nullopt;
    }
    const auto* e = v.as_object().if_contains("error");
    if (e == nullptr) {
        return std::nullopt;
    }
    error_body out;
    if (e->is_string()) {
        out.message = e->as_string();
        return out;
    }
    if (!e->is_object()) {
        return std::nullopt;
    }
    auto text = [&](const char* key) -> std::string {
        const auto* f = e->as_object().if_contains(key);
        if (f == nullptr) {
            return {};
        }
        if (f->is_string()) {
            return std::string(f->as_string());
        }
        if (f->is_int64()) {
            return std::to_string(f->as_int64());
        }
        return {};
    };
    out.type = text("type");
    out.code = text("code");
    out.message = text("message");
    return out;
}

std::string describe(std::string_view provider, int status, const std::string& message) {
    return std::string(provider) + " answered HTTP " + std::to_string(status) +
           (message.empty() ? "" : ": " + message);
}

}  // namespace

bool says_context_overflow(std::string_view code_or_type, std::string_view message) {
    if (code_or_type == "context_length_exceeded" || code_or_type == "exceed_context_size_error" ||
        code_or_type == "request_too_large") {
        return true;
    }
    for (std::string_view marker :
         {"maximum context length", "context length exceeded", "context_length_exceeded",
          "prompt is too long", "exceeds the available context size", "exceed_context_size",
          "context window", "too many tokens", "input is too long", "exceed context limit",
          "decrease input length"}) {
        if (contains_nocase(message, marker)) {
            return true;
        }
    }
    return false;
}

provider_error classify_http(std::string_view provider, int status, std::string_view body,
                             std::optional<std::chrono::milliseconds> retry_after,
                             std::string_view redact) {
    const auto parsed = parse_error_body(body);
    std::string message = parsed ? parsed->message : std::string(body);
    message = redacted(message, redact, 1000);
    const std::string type = parsed ? (parsed->code.empty() ? parsed->type : parsed->code) : "";
    const auto text = describe(provider, status, message);
    using kind = provider_error_kind;
    if (status == 413 || ((status == 400 || status == 422) &&
                          (says_context_overflow(type, message) ||
                           (parsed && says_context_overflow(parsed->type, message))))) {
        return provider_error{kind::context_overflow, text};
    }
    if (status == 429 && type == "insufficient_quota") {
        return provider_error{kind::fatal, text};  // no retry brings the money back
    }
    if (status == 408 || status == 409 || status == 429 || status >= 500) {
        return provider_error{kind::transient, text, retry_after};
    }
    return provider_error{kind::fatal, text};
}

provider_error classify_stream_error(std::string_view provider, std::string_view type,
                                     std::string_view message, std::string_view redact) {
    const std::string text = std::string(provider) + " stream error" +
                             (type.empty() ? "" : " " + std::string(type)) + ": " +
                             redacted(message, redact, 1000);
    using kind = provider_error_kind;
    if (says_context_overflow(type, message)) {
        return provider_error{kind::context_overflow, text};
    }
    for (std::string_view fatal :
         {"invalid_request_error", "authentication_error", "permission_error", "not_found_error",
          "invalid_api_key", "model_not_found"}) {
        if (type == fatal) {
            return provider_error{kind::fatal, text};
        }
    }
    // overloaded_error, rate_limit_error, api_error, server_error and unknown types: a server
    // failing mid-stream; the turn is tried again.
    return provider_error{kind::transient, text};
}

std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view value,
                                                           std::int64_t now_unix_ms) {
    while (!value.empty() && value.front() == ' ') {
        value.remove_prefix(1);
    }
    while (!value.empty() && value.back() == ' ') {
        value.remove_suffix(1);
    }
    if (value.empty()) {
        return std::nullopt;
    }
    if (std::isdigit(static_cast<unsigned char>(value.front()))) {
        double seconds = 0;
        auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
        if (ec != std::errc{} || end != value.data() + value.size() || seconds < 0 ||
            seconds > 86400.0 * 365) {
            return std::nullopt;
        }
        return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
    }
    // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
    if (value.size() != 29 || value.substr(3, 2) != ", " || value.substr(25) != " GMT") {
        return std::nullopt;
    }
    auto number = [&](std::size_t at, std::size_t n) -> std::optional<int> {
        int v = 0;
        auto [end, ec] = std::from_chars(value.data() + at, value.data() + at + n, v);
        if (ec != std::errc{} || end != value.data() + at + n) {
            return std::nullopt;
        }
        return v;
    };
    static constexpr std::array<std::string_view, 12> months = {
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    const auto month = std::find(months.begin(), months.end(), value.substr(8, 3));
    const auto day = number(5, 2);
    const auto year = number(12, 4);
    const auto hh = number(17, 2);
    const auto mm = number(20, 2);
    const auto ss = number(23, 2);
    if (month == months.end() || !day || !year || !hh || !mm || !ss || value[19] != ':' ||
        value[22] != ':') {
        return std::nullopt;
    }
    // Days since 1970-01-01 of a civil date (H. Hinnant's days_from_civil).
    const int m = static_cast<int>(month - months.begin()) + 1;
    const int y = *year - (m <= 2 ? 1 : 0);
    const int era = y / 400;
    const int yoe = y - era * 400;
    const int doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + *day - 1;
    const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    const std::int64_t days = static_cast<std::int64_t>(era) * 146097 + doe - 719468;
    const std::int64_t at_ms = ((days * 24 + *hh) * 60 + *mm) * 60000 + std::int64_t{*ss} * 1000;
    return std::chrono::milliseconds(std::max<std::int64_t>(0, at_ms - now_unix_ms));
}

}  // namespace wuhu::providers
