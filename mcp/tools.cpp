#include "mcp/tools.hpp"

#include "session/text.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace wuhu::mcp {

namespace json = boost::json;
using namespace boost::asio::experimental::awaitable_operators;

namespace {

struct bad_config : std::runtime_error {
    using std::runtime_error::runtime_error;
};

const json::object& object_at(const json::value& v, const std::string& where) {
    if (!v.is_object()) {
        throw bad_config(where + " must be an object");
    }
    return v.as_object();
}

milliseconds ms_at(const json::object& o, std::string_view key, milliseconds dflt,
                   const std::string& where) {
    const auto* v = o.if_contains(key);
    if (v == nullptr) {
        return dflt;
    }
    if (!v->is_int64() || v->as_int64() < 1 || v->as_int64() > 7LL * 24 * 3600 * 1000) {
        throw bad_config(where + "." + std::string(key) + " must be 1 to 604800000 (7 days)");
    }
    return milliseconds(v->as_int64());
}

void headers_of(const json::value& v, const std::string& where, http::header_list& out) {
    for (const auto& [name, value] : object_at(v, where)) {
        if (!value.is_string() || name.empty() ||
            std::string_view(name).find_first_of(":\r\n ") != std::string_view::npos ||
            std::string_view(value.as_string()).find_first_of("\r\n") != std::string_view::npos) {
            throw bad_config(where + ": header \"" + session::sanitized(std::string(name)) +
                             "\" must be a name and a one-line string");
        }
        out.emplace_back(std::string(name), std::string(value.as_string()));
    }
}

session::tool_approval approval_of(const json::object& o, const std::string& where) {
    session::tool_approval t;
    if (const auto* a = o.if_contains("approval")) {
        if (!a->is_string() || (a->as_string() != "always" && a->as_string() != "never")) {
            throw bad_config(where + ".approval must be \"always\" or \"never\"");
        }
        t.mode = a->as_string() == "always" ? session::approval_mode::always
                                            : session::approval_mode::never;
    }
    if (const auto* d = o.if_contains("approval_deadline_ms")) {
        if (!d->is_int64() || d->as_int64() < 1 || d->as_int64() > 2'592'000'000LL) {
            throw bad_config(where + ".approval_deadline_ms must be 1 to 2592000000 (30 days)");
        }
        t.deadline_ms = static_cast<std::uint64_t>(d->as_int64());
    }
    if (const auto* d = o.if_contains("approval_default")) {
        if (!d->is_string() || (d->as_string() != "reject" && d->as_string() != "approve")) {
            throw bad_config(where + ".approval_default must be \"reject\" or \"approve\"");
        }
        t.on_deadline =
            d->as_string() == "approve" ? session::decision::approve : session::decision::reject;
    }
    return t;
}

server_config server_of(const std::string& name, const json::value& v) {
    const std::string where = "mcp_servers." + name;
    static const std::set<std::string_view> known = {
        "url",   "headers", "headers_file", "timeout_ms", "idle_timeout_ms",
        "allow", "rename",  "overrides"};
    const auto& o = object_at(v, where);
    for (const auto& [key, _] : o) {
        if (!known.contains(key)) {
            throw bad_config(where + ": unknown field \"" + session::sanitized(std::string(key)) +
                             "\"");
        }
    }
    if (name.empty() || name.size() > 64 || !std::all_of(name.begin(), name.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
        })) {
        throw bad_config("an MCP server's name is 1-64 of A-Z a-z 0-9 _ -");
    }
    server_config c;
    c.where.name = name;
    const auto* url = o.if_contains("url");
    if (url == nullptr || !url->is_string()) {
        throw bad_config(where + ".url is required (the server's Streamable HTTP endpoint)");
    }
    c.url = url->as_string();
    auto base = http::parse_base_url(c.url);
    if (!base) {
        throw bad_config(where + ".url: " + base.error());
    }
    c.where.url = *base;
    if (const auto* h = o.if_contains("headers")) {
        headers_of(*h, where + ".headers", c.where.headers);
    }
    if (const auto* f = o.if_contains("headers_file")) {
        if (!f->is_string()) {
            throw bad_config(where + ".headers_file must be a file name");
        }
        std::ifstream in{std::string(f->as_string())};
        std::stringstream text;
        text << in.rdbuf();
        boost::system::error_code ec;
        auto parsed = json::parse(text.str(), ec);
        if (!in || ec) {
            throw bad_config(where + ".headers_file: cannot read a JSON object of headers from " +
                             std::string(f->as_string()));
        }
        headers_of(parsed, where + ".headers_file", c.where.headers);
    }
    c.timeout = ms_at(o, "timeout_ms", c.timeout, where);
    c.idle_timeout = ms_at(o, "idle_timeout_ms", c.idle_timeout, where);
    if (const auto* a = o.if_contains("allow")) {
        if (!a->is_array()) {
            throw bad_config(where + ".allow must be an array of tool names");
        }
        for (const auto& t : a->as_array()) {
            if (!t.is_string()) {
                throw bad_config(where + ".allow must be an array of tool names");
            }
            c.allow.emplace_back(t.as_string());
        }
    }
    if (const auto* r = o.if_contains("rename")) {
        for (const auto& [from, to] : object_at(*r, where + ".rename")) {
            if (!to.is_string()) {
                throw bad_config(where + ".rename values are tool names");
            }
            c.rename[std::string(from)] = std::string(to.as_string());
        }
    }
    if (const auto* ov = o.if_contains("overrides")) {
        for (const auto& [tool, terms] : object_at(*ov, where + ".overrides")) {
            const std::string at = where + ".overrides." + std::string(tool);
            const auto& to = object_at(terms, at);
            if (const auto* i = to.if_contains("idempotent")) {
                if (!i->is_bool()) {
                    throw bad_config(at + ".idempotent must be true or false");
                }
                c.idempotent[std::string(tool)] = i->as_bool();
            }
            const auto t = approval_of(to, at);
            if (t != session::tool_approval{}) {
                c.approval[std::string(tool)] = t;
            }
        }
    }
    c.where.http.connect_timeout = std::chrono::seconds(10);
    c.where.http.first_byte_timeout = c.timeout;
    c.where.http.idle_timeout = c.timeout;  // the tool watches progress itself
    return c;
}

}  // namespace

boost::system::result<std::vector<server_config>, std::string> parse_servers(
    std::string_view tools_file_json) {
    boost::system::error_code ec;
    auto v = json::parse(tools_file_json, ec);
    if (ec || !v.is_object()) {
        return std::string("the tools file is not a JSON object");
    }
    const auto* servers = v.as_object().if_contains("mcp_servers");
    std::vector<server_config> out;
    if (servers == nullptr) {
        return out;
    }
    try {
        for (const auto& [name, s] : object_at(*servers, "mcp_servers")) {
            out.push_back(server_of(std::string(name), s));
        }
    } catch (const bad_config& e) {
        return std::string(e.what());
    }
    return out;
}

namespace {

// Completes when `last` (the call's last sign of life) is `idle` old, or at `deadline`; says
// which.
asio::awaitable<std::string> watch(runtime::clock& clk, std::shared_ptr<std::int64_t> last,
                                   milliseconds idle, session::unix_ms deadline) {
    for (;;) {
        const auto now = clk.now().value;
        const auto idle_left = *last + idle.count() - now;
        const auto left = deadline.value - now;
        if (left <= 0) {
            co_return "it did not finish by its deadline";
        }
        if (idle_left <= 0) {
            co_return "no progress for " + std::to_string(idle.count()) + " ms (idle_timeout_ms)";
        }
        if (!co_await clk.elapsed(milliseconds(std::min(idle_left, left)))) {
            co_return "";  // the race is over
        }
    }
}

}  // namespace

asio::awaitable<tools::tool_output> mcp_tool::execute(std::string arguments,
                                                      tools::tool_call_context ctx) {
    boost::system::error_code ec;
    json::value args = json::parse(arguments, ec);  // checked by tools::call already
    if (ec) {
        args = json::object{};
    }
    auto& clk = ctx.services.time();
    auto last = std::make_shared<std::int64_t>(clk.now().value);
    std::function<void()> on_progress = [last, &clk] { *last = clk.now().value; };
    auto calling = client_->call(server_tool_, std::move(args), std::move(on_progress));
    auto watching = watch(clk, last, idle_timeout_, ctx.deadline);
    const auto began = std::chrono::steady_clock::now();
    struct observed {
        const call_observer& observe;
        const std::string& server;
        std::chrono::steady_clock::time_point began;
        std::string_view result = "cancelled";  // unless the call ends otherwise
        ~observed() {
            if (observe) {
                observe(server, result,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - began)
                            .count());
            }
        }
    } report{observe_, client_->where().name, began};
    auto r = co_await (std::move(calling) || std::move(watching));
    if (r.index() == 1) {
        // The call was cancelled by the race: the server has been sent notifications/cancelled.
        report.result = "cut_off";
        co_return tools::tool_output{
            "the MCP server " + client_->where().name + " was cut off: " + std::get<1>(r), true};
    }
    auto& out = std::get<0>(r);
    switch (out.kind) {
        case outcome::ok: {
            auto rendered = render_call_result(out.result);
            report.result = rendered.is_error ? "error" : "ok";
            co_return rendered;
        }
        case outcome::server_error:
            report.result = "server_error";
            co_return tools::tool_output{out.error, true};
        case outcome::failed:
            report.result = "failed";
            co_return tools::tool_output{out.error, true};
        case outcome::cancelled:
            break;
    }
    co_return tools::tool_output{"cancelled", true};
}

std::vector<std::shared_ptr<mcp_tool>> tools_of(const std::shared_ptr<client>& c,
                                                const server_config& cfg,
                                                const std::vector<tool_info>& listed,
                                                const call_observer& observe) {
    std::vector<std::shared_ptr<mcp_tool>> out;
    for (const auto& t : listed) {
        if (!cfg.allow.empty() &&
            std::find(cfg.allow.begin(), cfg.allow.end(), t.name) == cfg.allow.end()) {
            continue;
        }
        const auto renamed = cfg.rename.find(t.name);
        const std::string name = renamed != cfg.rename.end() ? renamed->second : t.name;
        bool idempotent = t.idempotent_hint.value_or(false) || t.read_only_hint.value_or(false);
        if (auto o = cfg.idempotent.find(name); o != cfg.idempotent.end()) {
            idempotent = o->second;
        }
        out.push_back(std::make_shared<mcp_tool>(
            c, t.name, session::tool_spec{name, t.description, t.input_schema}, idempotent,
            cfg.timeout, cfg.idle_timeout, observe));
    }
    return out;
}

namespace {

// Registers `fresh` in place of what the server offered before (`offered`, updated).
void offer(tools::tool_registry& registry, const server_config& cfg,
           std::vector<std::shared_ptr<mcp_tool>> fresh, std::set<std::string>& offered,
           const std::function<void(std::string)>& log) {
    std::set<std::string> now;
    for (auto& t : fresh) {
        const auto name = t->spec().name;
        if (!offered.contains(name) && registry.find(name, {}) != nullptr) {
            log("MCP server " + cfg.where.name + ": its tool " + name +
                " has the name of another tool: not offered (rename it)");
            continue;
        }
        registry.put(t);
        if (auto a = cfg.approval.find(name); a != cfg.approval.end()) {
            registry.set_approval(name, a->second);
        }
        now.insert(name);
    }
    for (const auto& gone : offered) {
        if (!now.contains(gone)) {
            registry.remove(gone);
        }
    }
    std::string names;
    for (const auto& n : now) {
        names += (names.empty() ? "" : ", ") + n;
    }
    log("MCP server " + cfg.where.name + " (" + cfg.url + "): " + std::to_string(now.size()) +
        " tools offered" + (names.empty() ? "" : ": " + names));
    offered = std::move(now);
}

}  // namespace

asio::awaitable<void> serve(std::shared_ptr<client> c, server_config cfg,
                            tools::tool_registry& registry, runtime::clock& clk,
                            std::function<void(std::string)> log, call_observer observe) {
    std::set<std::string> offered;
    milliseconds backoff{1000};
    std::string last_failure;
    bool first = true;  // the registry expects this server's first offer (tool_registry)
    for (;;) {
        auto initializing = c->initialize();
        auto init = co_await std::move(initializing);
        std::string failure = init ? "" : init.error();
        // Listed, then again each time the server says its tools changed (or, without an
        // event stream, every minute), in the same session.
        while (failure.empty()) {
            std::vector<std::string> skipped;
            auto listing = c->list_tools(&skipped);
            auto listed = co_await std::move(listing);
            if (!listed) {
                failure = listed.error();
                break;
            }
            for (const auto& s : skipped) {
                log("MCP server " + cfg.where.name + ": left out " + s);
            }
            offer(registry, cfg, tools_of(c, cfg, *listed, observe), offered, log);
            if (std::exchange(first, false)) {
                registry.offered();
            }
            backoff = milliseconds{1000};
            last_failure.clear();
            bool unsupported = false;
            std::string ended;
            auto listening = c->listen(&unsupported, &ended);
            if (co_await std::move(listening)) {
                continue;  // changed
            }
            if (!unsupported) {
                failure = "its event stream ended: " + ended;
                break;
            }
            if (!co_await clk.elapsed(milliseconds(60'000))) {
                co_return;
            }
        }
        if (std::exchange(first, false)) {
            registry.offered();  // the sessions go on without its tools meanwhile
        }
        if (failure != last_failure) {
            log("MCP server " + cfg.where.name + " (" + cfg.url + ") is not answering: " + failure +
                "; trying again with backoff");
            last_failure = failure;
        }
        if (!co_await clk.elapsed(backoff)) {
            co_return;
        }
        backoff = std::min(backoff * 2, milliseconds{60'000});
    }
}

}  // namespace wuhu::mcp
