#include "protocol/subjects.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>

namespace wuhu::protocol {

namespace s = wuhu::session;

namespace {
constexpr std::array<std::pair<verb, std::string_view>, 12> verbs{{
    {verb::enqueue, "enqueue"},
    {verb::cancel, "cancel"},
    {verb::system, "system"},
    {verb::subscribe, "subscribe"},
    {verb::configure, "configure"},
    {verb::abort, "abort"},
    {verb::pause, "pause"},
    {verb::resume, "resume"},
    {verb::remove, "delete"},
    {verb::approve, "approve"},
    {verb::reject, "reject"},
    {verb::respond, "respond"},
}};

// The layout's own tokens: a tenant named so would make one subject mean two things.
constexpr std::array<std::string_view, 5> layout_words{"session", "admin", "events", "tools",
                                                       "worker"};

bool id_byte(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

// Splits off the first token of `rest` (up to a dot); nullopt when there is no dot.
std::optional<std::string_view> take_token(std::string_view& rest) {
    const auto dot = rest.find('.');
    if (dot == std::string_view::npos) {
        return std::nullopt;
    }
    auto token = rest.substr(0, dot);
    rest.remove_prefix(dot + 1);
    return token;
}

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

bool valid_tenant(std::string_view tenant) {
    if (!s::is_id_token(tenant)) {
        return false;
    }
    for (auto word : layout_words) {
        if (tenant == word) {
            return false;
        }
    }
    return true;
}

subject_layout::subject_layout(std::string prefix, tenancy t)
    : prefix_(std::move(prefix)), tenancy_(std::move(t)) {
    if (!valid_prefix(prefix_)) {
        throw std::invalid_argument("the subject prefix must be tokens of [A-Za-z0-9_-] "
                                    "separated by dots: " + prefix_);
    }
    if (!tenancy_.default_tenant.empty() &&
        (!tenancy_.on || !valid_tenant(tenancy_.default_tenant))) {
        throw std::invalid_argument(
            tenancy_.on ? "the default tenant must be 1-64 characters of [A-Za-z0-9_-], and not "
                          "session, admin, events, tools or worker: " + tenancy_.default_tenant
                        : std::string("a default tenant needs tenancy on"));
    }
}

bool subject_layout::valid_worker(std::string_view worker_id) const {
    // With tenancy, `<prefix>.worker.<id>.…` must match no tenant's subject pattern
    // (`<prefix>.*.session.>`, `<prefix>.*.events.>`, …): the id is none of the layout's words.
    return valid_worker_id(worker_id) &&
           !(tenancy_.on && std::find(layout_words.begin(), layout_words.end(), worker_id) !=
                                layout_words.end());
}

std::string subject_layout::requests() const {
    return prefix_ + (tenancy_.on ? ".*.session.>" : ".session.>");
}

std::string subject_layout::views() const {
    return prefix_ + (tenancy_.on ? ".*.admin.sessions" : ".admin.sessions");
}

std::optional<std::string> subject_layout::fleet_view() const {
    if (!tenancy_.on) {
        return std::nullopt;
    }
    return prefix_ + ".admin.sessions";
}

std::string subject_layout::forwarded_requests(std::string_view worker_id) const {
    return prefix_ + ".worker." + std::string(worker_id) +
           (tenancy_.on ? ".*.session.>" : ".session.>");
}

namespace {
// What follows `<prefix>.worker.<id>.` in `subject`, or nullopt when it does not start so (no
// allocation: every request a worker takes is asked this).
std::optional<std::string_view> after_worker(std::string_view subject, std::string_view prefix,
                                             std::string_view worker_id) {
    constexpr std::string_view worker = ".worker.";
    if (!subject.starts_with(prefix)) {
        return std::nullopt;
    }
    subject.remove_prefix(prefix.size());
    if (!subject.starts_with(worker)) {
        return std::nullopt;
    }
    subject.remove_prefix(worker.size());
    if (!subject.starts_with(worker_id) || subject.size() <= worker_id.size() ||
        subject[worker_id.size()] != '.') {
        return std::nullopt;
    }
    return subject.substr(worker_id.size() + 1);
}
}  // namespace

std::string subject_layout::forward_acks(std::string_view worker_id) const {
    return prefix_ + ".worker." + std::string(worker_id) + ".ack.*";
}

std::string subject_layout::forward_ack(std::string_view worker_id, std::uint64_t n) const {
    return prefix_ + ".worker." + std::string(worker_id) + ".ack." + std::to_string(n);
}

namespace {
// A forward number: 1-19 decimal digits (below 10^19, so it fits 64 bits).
std::optional<std::uint64_t> forward_number(std::string_view digits) {
    if (digits.empty() || digits.size() > 19 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos) {
        return std::nullopt;
    }
    std::uint64_t n = 0;
    for (char c : digits) {
        n = n * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return n;
}
}  // namespace

std::optional<std::uint64_t> subject_layout::parse_forward_ack(std::string_view subject,
                                                               std::string_view worker_id) const {
    const auto rest = after_worker(subject, prefix_, worker_id);
    constexpr std::string_view ack = "ack.";
    if (!rest || !rest->starts_with(ack)) {
        return std::nullopt;
    }
    return forward_number(rest->substr(ack.size()));
}

bool subject_layout::is_forward_ack(std::string_view subject) const {
    constexpr std::string_view worker = ".worker.";
    if (!subject.starts_with(prefix_) || !subject.substr(prefix_.size()).starts_with(worker)) {
        return false;
    }
    const auto rest = subject.substr(prefix_.size() + worker.size());
    const auto dot = rest.find('.');
    if (dot == std::string_view::npos || !valid_worker(rest.substr(0, dot))) {
        return false;
    }
    return parse_forward_ack(subject, rest.substr(0, dot)).has_value();
}

bool subject_layout::for_worker(std::string_view subject, std::string_view worker_id) const {
    return after_worker(subject, prefix_, worker_id).has_value();
}

s::result<std::string> subject_layout::local_sessions(std::string_view worker_id) const {
    if (!valid_worker(worker_id)) {
        return s::errc::invalid_query;
    }
    return prefix_ + ".worker." + std::string(worker_id) + ".admin.local";
}

s::result<route> subject_layout::parse_rest(std::string_view rest) const {
    // Read by length, byte by byte: nothing after a NUL (or any byte outside the alphabet of
    // ids and verbs) is ever dropped or allowed.
    for (char c : rest) {
        if (!id_byte(c) && c != '.') {
            return s::errc::invalid_session_id;
        }
    }
    std::string_view tenant;
    if (tenancy_.on) {
        auto t = take_token(rest);
        if (!t) {
            return s::errc::unknown_command;
        }
        if (!valid_tenant(*t)) {
            return s::errc::invalid_tenant;
        }
        tenant = *t;
    }
    auto word = take_token(rest);
    if (!word || *word != "session") {
        return s::errc::unknown_command;
    }
    const auto dot = rest.rfind('.');
    if (dot == std::string_view::npos) {
        return s::errc::invalid_session_id;
    }
    const auto local = rest.substr(0, dot);
    if (!s::is_id_token(local)) {  // a dot inside the id fails here
        return s::errc::invalid_session_id;
    }
    auto v = verb_named(rest.substr(dot + 1));
    if (!v) {
        return s::errc::unknown_command;
    }
    auto sid = tenancy_.on ? session_of(tenant, local) : s::session_id::parse(local);
    if (!sid) {
        return sid.error();
    }
    return route{std::move(*sid), *v};
}

s::result<route> subject_layout::parse_request(std::string_view subject) const {
    if (subject.size() <= prefix_.size() || !subject.starts_with(prefix_) ||
        subject[prefix_.size()] != '.') {
        return s::errc::unknown_command;
    }
    return parse_rest(subject.substr(prefix_.size() + 1));
}

s::result<route> subject_layout::parse_forwarded(std::string_view subject,
                                                 std::string_view worker_id) const {
    const auto rest = after_worker(subject, prefix_, worker_id);
    if (!rest) {
        return s::errc::unknown_command;
    }
    return parse_rest(*rest);
}

s::result<std::optional<std::string>> subject_layout::parse_view(std::string_view subject) const {
    if (subject.size() <= prefix_.size() || !subject.starts_with(prefix_) ||
        subject[prefix_.size()] != '.') {
        return s::errc::unknown_command;
    }
    std::string_view rest = subject.substr(prefix_.size() + 1);
    if (rest == "admin.sessions") {
        return std::optional<std::string>();
    }
    if (!tenancy_.on) {
        return s::errc::unknown_command;
    }
    const auto dot = rest.find('.');
    if (dot == std::string_view::npos || rest.substr(dot + 1) != "admin.sessions") {
        return s::errc::unknown_command;
    }
    const auto tenant = rest.substr(0, dot);
    if (!valid_tenant(tenant)) {
        return s::errc::invalid_tenant;
    }
    return std::optional<std::string>(std::string(tenant));
}

namespace {
// The parts one after the other, in one allocation.
std::string joined(std::initializer_list<std::string_view> parts) {
    std::size_t n = 0;
    for (auto p : parts) {
        n += p.size();
    }
    std::string out;
    out.reserve(n);
    for (auto p : parts) {
        out.append(p);
    }
    return out;
}
}  // namespace

std::string subject_layout::of_session(const s::session_id& sid, std::string_view kind,
                                       std::string_view last) const {
    const auto t = tenant_of(sid);
    return joined({prefix_, ".", t, t.empty() ? "" : ".", kind, ".", sid.local(), ".", last});
}

std::string subject_layout::request(const s::session_id& sid, verb v) const {
    return of_session(sid, "session", verb_name(v));
}

s::result<std::string> subject_layout::forward(std::string_view worker_id,
                                               const s::session_id& sid, verb v) const {
    if (!valid_worker(worker_id)) {
        return s::errc::invalid_query;
    }
    const auto t = tenant_of(sid);
    return joined({prefix_, ".worker.", worker_id, ".", t, t.empty() ? "" : ".", "session.",
                   sid.local(), ".", verb_name(v)});
}

std::string subject_layout::patch(const s::session_id& sid) const {
    return of_session(sid, "events", "patch");
}

std::string subject_layout::delta(const s::session_id& sid) const {
    return of_session(sid, "events", "delta");
}

std::string subject_layout::deleted(const s::session_id& sid) const {
    return of_session(sid, "events", "deleted");
}

std::string subject_layout::events(const s::session_id& sid) const {
    return of_session(sid, "events", ">");
}

s::result<std::string> subject_layout::tool(const s::session_id& sid,
                                            std::string_view name) const {
    if (!s::is_id_token(name)) {
        return s::errc::invalid_query;
    }
    const auto t = tenant_of(sid);
    return joined({prefix_, ".", t, t.empty() ? "" : ".", "tools.", name});
}

std::string_view subject_layout::tenant_of(const s::session_id& sid) const {
    const auto t = sid.tenant();
    if (!t.empty()) {
        return t;
    }
    return tenancy_.on ? std::string_view(tenancy_.default_tenant) : std::string_view();
}

s::result<s::session_id> subject_layout::session_of(std::string_view tenant,
                                                    std::string_view local) const {
    if (!valid_tenant(tenant)) {
        return s::errc::invalid_tenant;
    }
    if (tenancy_.on && tenant == tenancy_.default_tenant) {
        return s::session_id::parse(local);
    }
    return s::session_id::of_tenant(tenant, local);
}

std::string subject_layout::scope_of(std::string_view tenant) const {
    return tenancy_.on && tenant == tenancy_.default_tenant ? std::string()
                                                            : std::string(tenant);
}

}  // namespace wuhu::protocol
