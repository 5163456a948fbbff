#include "protocol/subjects.hpp"

#include <array>

namespace wuhu::protocol {

namespace s = wuhu::session;

namespace {
constexpr std::array<std::pair<verb, std::string_view>, 9> verbs{{
    {verb::enqueue, "enqueue"},
    {verb::cancel, "cancel"},
    {verb::system, "system"},
    {verb::subscribe, "subscribe"},
    {verb::configure, "configure"},
    {verb::abort, "abort"},
    {verb::pause, "pause"},
    {verb::resume, "resume"},
    {verb::remove, "delete"},
}};
}  // namespace

std::string_view verb_name(verb v) {
    for (const auto& [k, name] : verbs) {
        if (k == v) {
            return name;
        }
    }
    return "unknown";
}

std::optional<verb> verb_named(std::string_view name) {
    for (const auto& [k, n] : verbs) {
        if (n == name) {
            return k;
        }
    }
    return std::nullopt;
}

bool creates_session(verb v) {
    return v == verb::enqueue || v == verb::system || v == verb::configure;
}

bool valid_worker_id(std::string_view id) {
    return s::is_id_token(id);
}

bool valid_prefix(std::string_view prefix) {
    for (;;) {
        const auto dot = prefix.find('.');
        if (!s::is_id_token(prefix.substr(0, dot))) {
            return false;
        }
        if (dot == std::string_view::npos) {
            return true;
        }
        prefix.remove_prefix(dot + 1);
    }
}

s::result<route> parse_subject(std::string_view subject, std::string_view prefix) {
    const std::string head = std::string(prefix) + ".session.";
    if (subject.substr(0, head.size()) != head) {
        return s::errc::unknown_command;
    }
    std::string_view rest = subject.substr(head.size());
    // Read by length, byte by byte: nothing after a NUL (or any byte outside the alphabet of
    // ids and verbs) is ever dropped or allowed.
    for (char c : rest) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
        if (!ok) {
            return s::errc::invalid_session_id;
        }
    }
    auto dot = rest.rfind('.');
    if (dot == std::string_view::npos) {
        return s::errc::invalid_session_id;
    }
    std::string_view sid = rest.substr(0, dot);
    std::string_view name = rest.substr(dot + 1);
    auto id = s::session_id::parse(sid);  // a dot inside the id fails here
    if (!id) {
        return s::errc::invalid_session_id;
    }
    auto v = verb_named(name);
    if (!v) {
        return s::errc::unknown_command;
    }
    return route{std::move(*id), *v};
}

std::string session_requests_subject(std::string_view prefix) {
    return std::string(prefix) + ".session.>";
}

std::string request_subject(std::string_view prefix, const s::session_id& sid, verb v) {
    return std::string(prefix) + ".session." + sid.str() + "." + std::string(verb_name(v));
}

std::string patch_subject(std::string_view prefix, const s::session_id& sid) {
    return std::string(prefix) + ".events." + sid.str() + ".patch";
}

std::string delta_subject(std::string_view prefix, const s::session_id& sid) {
    return std::string(prefix) + ".events." + sid.str() + ".delta";
}

std::string events_subject(std::string_view prefix, const s::session_id& sid) {
    return std::string(prefix) + ".events." + sid.str() + ".>";
}

std::string sessions_subject(std::string_view prefix) {
    return std::string(prefix) + ".admin.sessions";
}

std::string worker_prefix(std::string_view prefix, std::string_view worker_id) {
    return std::string(prefix) + ".worker." + std::string(worker_id);
}

std::string local_sessions_subject(std::string_view prefix, std::string_view worker_id) {
    return worker_prefix(prefix, worker_id) + ".admin.local";
}

}  // namespace wuhu::protocol
