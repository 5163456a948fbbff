#include "runtime/secrets.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace wuhu::runtime {

namespace {

constexpr std::string_view hidden = "***";

bool secret_key(std::string_view key) {
    static constexpr std::array<std::string_view, 8> keys{
        "password", "sslpassword", "passfile", "token", "secret", "key", "api_key", "sslkey"};
    return std::any_of(keys.begin(), keys.end(), [&](std::string_view k) {
        return k.size() == key.size() &&
               std::equal(k.begin(), k.end(), key.begin(), [](char a, char b) {
                   return a == std::tolower(static_cast<unsigned char>(b));
               });
    });
}

bool scheme_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '+' || c == '-' || c == '.';
}

// A found secret: [begin, end) of the text, replaced by "***".
struct span {
    std::size_t begin;
    std::size_t end;
};

// The secret values of `key=value&key=value` parameters in [from, to).
void query_secrets(std::string_view text, std::size_t from, std::size_t to,
                   std::vector<span>& out) {
    while (from < to) {
        std::size_t amp = text.find('&', from);
        if (amp == std::string_view::npos || amp > to) {
            amp = to;
        }
        const auto eq = text.find('=', from);
        if (eq != std::string_view::npos && eq < amp && secret_key(text.substr(from, eq - from))) {
            auto end = amp;
            if (end == to && end > eq + 1 && text[end - 1] == ',') {
                --end;  // the separator of a list of URLs
            }
            if (end > eq + 1) {
                out.push_back({eq + 1, end});
            }
        }
        from = amp + 1;
    }
}

// Secrets of a libpq keyword string: `key = value` or `key = 'quoted \' value'`.
void keyword_secrets(std::string_view text, std::vector<span>& out) {
    std::size_t i = 0;
    auto space = [&] {
        while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])) != 0) {
            ++i;
        }
    };
    while (i < text.size()) {
        space();
        const auto key_begin = i;
        while (i < text.size() && text[i] != '=' &&
               std::isspace(static_cast<unsigned char>(text[i])) == 0) {
            ++i;
        }
        const auto key = text.substr(key_begin, i - key_begin);
        space();
        if (i >= text.size() || text[i] != '=') {
            ++i;  // not a keyword: go on with the next word
            continue;
        }
        ++i;
        space();
        const auto value_begin = i;
        if (i < text.size() && text[i] == '\'') {
            for (++i; i < text.size() && text[i] != '\''; ++i) {
                if (text[i] == '\\') {
                    ++i;
                }
            }
            i = std::min(i + 1, text.size());
        } else {
            while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])) == 0) {
                ++i;
            }
        }
        if (secret_key(key) && i > value_begin) {
            out.push_back({value_begin, i});
        }
    }
}

// Whether a URL (`scheme://`) starts at `at`.
bool url_at(std::string_view text, std::size_t at) {
    std::size_t i = at;
    if (i >= text.size() || std::isalpha(static_cast<unsigned char>(text[i])) == 0) {
        return false;
    }
    while (i < text.size() && scheme_char(text[i])) {
        ++i;
    }
    return text.substr(i, 3) == "://";
}

// The secrets of text that holds no URL: a keyword string, or `user:password@host`.
void plain_secrets(std::string_view text, std::vector<span>& out) {
    if (text.find('=') != std::string_view::npos) {
        keyword_secrets(text, out);
    } else if (const auto at = text.rfind('@'); at != std::string_view::npos && at > 0) {
        out.push_back({0, at});  // user:password@host:4222
    }
}

// Every secret of a URL, a list of URLs or a keyword string, in order, not overlapping.
std::vector<span> find_secrets(std::string_view text) {
    std::vector<span> out;
    // Where each URL starts: at the start of the text or of an item of a list (after a comma),
    // never at a `://` inside a password or a keyword's value.
    std::vector<std::size_t> starts;
    for (std::size_t at = 0;;) {
        auto item = at;
        while (item < text.size() && text[item] == ' ') {
            ++item;
        }
        if (url_at(text, item)) {
            starts.push_back(item);
        }
        const auto comma = text.find(',', at);
        if (comma == std::string_view::npos) {
            break;
        }
        at = comma + 1;
    }
    // What comes before the first URL (all of it when there is none).
    plain_secrets(text.substr(0, starts.empty() ? text.size() : starts.front()), out);
    for (std::size_t k = 0; k < starts.size(); ++k) {
        const auto end = k + 1 < starts.size() ? starts[k + 1] : text.size();
        const auto authority = text.find("://", starts[k]) + 3;
        const auto segment = text.substr(0, end);
        auto at = segment.rfind('@');
        std::size_t rest = authority;
        if (at != std::string_view::npos && at >= authority) {
            if (at > authority) {
                out.push_back({authority, at});
            }
            rest = at + 1;
        }
        if (const auto q = segment.find('?', rest); q != std::string_view::npos) {
            query_secrets(text, q + 1, end, out);
        }
    }
    return out;
}

std::string replace_spans(std::string_view text, const std::vector<span>& spans) {
    std::string out;
    std::size_t at = 0;
    for (const auto& s : spans) {
        out.append(text.substr(at, s.begin - at)).append(hidden);
        at = s.end;
    }
    out.append(text.substr(at));
    return out;
}

void replace_all(std::string& text, std::string_view what, std::string_view with) {
    if (what.empty()) {
        return;
    }
    for (auto at = text.find(what); at != std::string::npos;
         at = text.find(what, at + with.size())) {
        text.replace(at, what.size(), with);
    }
}

}  // namespace

std::string redacted_url(std::string_view url) {
    return replace_spans(url, find_secrets(url));
}

std::vector<std::string> url_secrets(std::string_view url) {
    std::vector<std::string> out;
    for (const auto& s : find_secrets(url)) {
        auto secret = std::string(url.substr(s.begin, s.end - s.begin));
        if (secret.size() >= 2 && secret.front() == '\'' && secret.back() == '\'') {
            out.push_back(secret.substr(1, secret.size() - 2));  // as libpq reads it, too
        }
        // user:password: the password alone may be echoed too.
        if (const auto colon = secret.find(':'); colon != std::string::npos &&
                                                  colon + 1 < secret.size() &&
                                                  url.substr(s.end, 1) == "@") {
            out.push_back(secret.substr(colon + 1));
        }
        out.push_back(std::move(secret));
    }
    // Longest first, so that a secret that holds another is replaced whole.
    std::sort(out.begin(), out.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

std::string redacted(std::string_view text, std::string_view secret, std::size_t max) {
    std::string out(text);
    replace_all(out, secret, hidden);
    // A text cut in the middle of the secret ends with its first part: hidden too.
    for (std::size_t n = std::min(secret.size() - (secret.empty() ? 0 : 1), out.size()); n >= 4;
         --n) {
        if (out.ends_with(secret.substr(0, n))) {
            out.resize(out.size() - n);
            out.append(hidden);
            break;
        }
    }
    if (out.size() > max) {
        std::size_t cut = max;
        while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) {
            --cut;  // not inside a UTF-8 sequence
        }
        out.resize(cut);
        out.append("…");
    }
    return out;
}

std::string scrubbed(std::string_view text, std::string_view url) {
    std::string out(text);
    if (!url.empty()) {
        replace_all(out, url, redacted_url(url));
    }
    for (const auto& secret : url_secrets(url)) {
        replace_all(out, secret, hidden);
    }
    return out;
}

}  // namespace wuhu::runtime
