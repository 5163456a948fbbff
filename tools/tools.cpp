#include "tools/tools.hpp"

#include "session/codec.hpp"
#include "session/json_reader.hpp"
#include "session/text.hpp"
#include "tools/json_schema.hpp"

#include <boost/json/parse.hpp>

#include <algorithm>
#include <cstdio>

namespace wuhu::tools {

namespace json = boost::json;

bool tool_registry::add(std::shared_ptr<tool> t) {
    std::string name = t->spec().name;
    return scopes_[""].emplace(std::move(name), std::move(t)).second;
}

void tool_registry::put(std::shared_ptr<tool> t, const std::string& tenant) {
    auto& slot = scopes_[tenant][t->spec().name];
    if (slot) {
        retired_.push_back(std::move(slot));
    }
    slot = std::move(t);
}

void tool_registry::remove(const std::string& name, const std::string& tenant) {
    auto s = scopes_.find(tenant);
    if (s == scopes_.end()) {
        return;
    }
    if (auto it = s->second.find(name); it != s->second.end()) {
        retired_.push_back(std::move(it->second));
        s->second.erase(it);
    }
}

std::string_view tool_registry::tenant_of(const session::session_id& sid) const {
    return sid.tenant().empty() ? std::string_view(default_tenant_) : sid.tenant();
}

std::string_view tool_registry::scope_of(const std::string& name, std::string_view tenant) const {
    if (!tenant.empty()) {
        if (auto s = scopes_.find(tenant); s != scopes_.end() && s->second.contains(name)) {
            return s->first;
        }
    }
    return {};
}

tool* tool_registry::find(const std::string& name, const std::vector<std::string>& enabled,
                          std::string_view tenant) const {
    if (!enabled.empty() && std::find(enabled.begin(), enabled.end(), name) == enabled.end()) {
        return nullptr;
    }
    return own(name, scope_of(name, tenant));
}

tool* tool_registry::own(const std::string& name, std::string_view tenant) const {
    const auto s = scopes_.find(tenant);
    if (s == scopes_.end()) {
        return nullptr;
    }
    const auto it = s->second.find(name);
    return it != s->second.end() ? it->second.get() : nullptr;
}

std::vector<session::tool_spec> tool_registry::specs(const std::vector<std::string>& enabled,
                                                     std::string_view tenant) const {
    std::map<std::string_view, const tool*> offered;  // by name: the tenant's own go first
    for (const auto& in : {tenant, std::string_view()}) {
        if (auto s = scopes_.find(in); s != scopes_.end()) {
            for (const auto& [name, t] : s->second) {
                offered.emplace(name, t.get());
            }
        }
        if (in.empty()) {
            break;
        }
    }
    std::vector<session::tool_spec> out;
    for (const auto& [name, t] : offered) {
        if (enabled.empty() || std::find(enabled.begin(), enabled.end(), name) != enabled.end()) {
            out.push_back(t->spec());
        }
    }
    return out;
}

std::optional<std::string> invalid_arguments(const tool& t, const std::string& args) {
    boost::system::error_code ec;
    const auto value = json::parse(args, ec);
    if (ec) {
        return "invalid arguments: not JSON (" + ec.message() + ")";
    }
    const auto schema = json::parse(t.spec().schema, ec);
    if (ec) {
        return std::nullopt;  // a tool without a usable schema takes what it is given
    }
    if (auto why = schema_violation(value, schema)) {
        return "invalid arguments: " + *why;
    }
    return std::nullopt;
}

asio::awaitable<tool_output> call(tool& t, std::string arguments, tool_call_context ctx) {
    if (auto why = invalid_arguments(t, arguments)) {
        co_return tool_output{std::move(*why), true};
    }
    try {
        tool_output out = co_await t.execute(std::move(arguments), ctx);
        co_return out;
    } catch (const std::exception& e) {
        co_return tool_output{std::string("tool failed: ") + e.what(), true};
    }
}

namespace {

using session::decoded;
using session::detail::object_reader;

// A tool's arguments read by `read` (object_reader& -> decoded<T>), or the error result that
// tells the model what was wrong with them.
template <class T, class Read>
std::variant<T, tool_output> read_args(const std::string& arguments, Read read) {
    auto v = session::parse_json(arguments);
    if (!v || !v->is_object()) {
        return tool_output{"arguments must be a JSON object", true};
    }
    auto r = object_reader::open(*v, "");
    session::decoded<T> args = read(*r);
    if (!args) {
        return tool_output{"invalid arguments: " + args.error().message(), true};
    }
    return std::move(*args);
}

class echo_tool final : public tool {
  public:
    const session::tool_spec& spec() const override { return spec_; }
    bool idempotent() const override { return true; }
    asio::awaitable<tool_output> execute(std::string arguments, tool_call_context) override {
        auto args = read_args<std::string>(arguments, [](object_reader& r) -> decoded<std::string> {
            WUHU_TRY(text, r.str("text"));
            return std::string(text);
        });
        if (auto* err = std::get_if<tool_output>(&args)) {
            co_return std::move(*err);
        }
        co_return tool_output{std::get<std::string>(std::move(args)), false};
    }

  private:
    session::tool_spec spec_{
        "echo", "Returns its text argument unchanged.",
        R"({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]})"};
};

class clock_tool final : public tool {
  public:
    const session::tool_spec& spec() const override { return spec_; }
    bool idempotent() const override { return true; }
    asio::awaitable<tool_output> execute(std::string, tool_call_context ctx) override {
        auto ms = ctx.services.time().now().value;
        std::time_t secs = static_cast<std::time_t>(ms / 1000);
        std::tm tm{};
        gmtime_r(&secs, &tm);
        char buf[40];
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
                      tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        co_return tool_output{buf, false};
    }

  private:
    session::tool_spec spec_{"clock", "Returns the current time in UTC (ISO 8601).",
                    R"({"type":"object","properties":{}})"};
};

// The longest wait the built-in tools take (a year): a larger one would overflow the clock's
// arithmetic (milliseconds since 1970 in 64 bits, and timers' deadlines).
constexpr std::uint64_t max_wait_ms = 366ULL * 24 * 3600 * 1000;

tool_output too_long(const char* field) {
    return tool_output{std::string(field) + " must be at most " + std::to_string(max_wait_ms) +
                           " (a year)",
                       true};
}

class sleep_tool final : public tool {
  public:
    const session::tool_spec& spec() const override { return spec_; }
    bool idempotent() const override { return true; }
    asio::awaitable<tool_output> execute(std::string arguments, tool_call_context ctx) override {
        auto args =
            read_args<std::uint64_t>(arguments, [](object_reader& r) { return r.u64("ms"); });
        if (auto* err = std::get_if<tool_output>(&args)) {
            co_return std::move(*err);
        }
        const std::uint64_t ms = std::get<std::uint64_t>(args);
        if (ms > max_wait_ms) {
            co_return too_long("ms");
        }
        co_await ctx.services.time().sleep(milliseconds(static_cast<std::int64_t>(ms)));
        co_return tool_output{"slept " + std::to_string(ms) + " ms", false};
    }

  private:
    session::tool_spec spec_{
        "sleep", "Waits for the given number of milliseconds.",
        R"({"type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":31622400000}},"required":["ms"]})"};
};

class schedule_callback_tool final : public tool {
  public:
    const session::tool_spec& spec() const override { return spec_; }
    // The timer id derives from the call id, so a re-run schedules nothing new.
    bool idempotent() const override { return true; }
    asio::awaitable<tool_output> execute(std::string arguments, tool_call_context ctx) override {
        struct callback {
            std::uint64_t delay_ms;
            std::string content;
        };
        auto args = read_args<callback>(arguments, [](object_reader& r) -> decoded<callback> {
            WUHU_TRY(delay, r.u64("delay_ms"));
            WUHU_TRY(content, r.text("content", session::default_max_content_bytes));
            return callback{delay, std::move(content)};
        });
        if (auto* err = std::get_if<tool_output>(&args)) {
            co_return std::move(*err);
        }
        auto [delay, content] = std::get<callback>(std::move(args));
        if (delay > max_wait_ms) {
            co_return too_long("delay_ms");
        }
        auto id = session::queue_item_id::parse("timer-" + ctx.call.str());
        if (!id) {
            co_return tool_output{"the tool call id is too long for a timer id", true};
        }
        session::unix_ms due{ctx.services.time().now().value + static_cast<std::int64_t>(delay)};
        session::timer t{*id, due, session::system_source::parse("scheduledCallback").value(),
                         std::move(content)};
        auto scheduling = ctx.services.schedule_timer(std::move(t));
        if (!co_await std::move(scheduling)) {
            co_return tool_output{"the session stopped: the callback was not scheduled", true};
        }
        co_return tool_output{
            "scheduled callback " + id->str() + " in " + std::to_string(delay) + " ms", false};
    }

  private:
    session::tool_spec spec_{
        "schedule_callback",
        "Schedules a message to this session's system lane after delay_ms; it arrives once, "
        "even across restarts.",
        R"({"type":"object","properties":{"delay_ms":{"type":"integer","minimum":0,"maximum":31622400000},"content":{"type":"string"}},"required":["delay_ms","content"]})"};
};

}  // namespace

bool is_builtin_tool(std::string_view name) {
    return name == "echo" || name == "clock" || name == "sleep" || name == "schedule_callback";
}

void tool_registry::set_approval(const std::string& name, session::tool_approval terms,
                                 const std::string& tenant) {
    approvals_[{tenant, name}] = terms;
}

std::optional<session::tool_approval> tool_registry::approval_for(
    const std::string& name, const session::approval_settings& s, std::string_view tenant) const {
    auto it = approvals_.find(std::pair(std::string(scope_of(name, tenant)), name));
    return session::approval_terms(s, name,
                                   it != approvals_.end() ? it->second : session::tool_approval{});
}

void add_builtin_tools(tool_registry& r) {
    r.add(std::make_shared<echo_tool>());
    r.add(std::make_shared<clock_tool>());
    r.add(std::make_shared<sleep_tool>());
    r.add(std::make_shared<schedule_callback_tool>());
}

}  // namespace wuhu::tools
