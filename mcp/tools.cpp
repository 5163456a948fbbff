#include "mcp/tools.hpp"

#include "protocol/subjects.hpp"
#include "session/ids.hpp"
#include "session/text.hpp"
#include "tools/nats_tools.hpp"

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

server_config server_of(const std::string& name, const json::value& v, bool tenancy) {
    const std::string where = "mcp_servers." + name;
    static const std::set<std::string_view> known = {
        "url",   "headers", "headers_file", "timeout_ms", "idle_timeout_ms",
        "allow", "rename",  "overrides",    "tenant"};
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
            if (!to.is_string() || !session::is_id_token(to.as_string())) {
                throw bad_config(where + ".rename values are tool names (1-64 of A-Z a-z 0-9 _ -)");
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
            const auto t = tools::approval_terms(to, at + ": ");
            if (!t) {
                throw bad_config(t.error());
            }
            if (*t != session::tool_approval{}) {
                c.approval[std::string(tool)] = *t;
            }
        }
    }
    const auto* tenant = o.if_contains("tenant");
    if (tenant != nullptr && !tenancy) {
        throw bad_config(where + ".tenant needs a fleet with tenancy (--tenancy)");
    }
    if (tenancy) {
        if (tenant == nullptr || !tenant->is_string() ||
            (tenant->as_string() != "*" && !protocol::valid_tenant(tenant->as_string()))) {
            throw bad_config(where +
                             ".tenant is required with tenancy: the tenant whose sessions call "
                             "the server (a tenant id), or \"*\" for every tenant's");
        }
        if (tenant->as_string() != "*") {
            c.tenant = tenant->as_string();
        }
    }
    c.where.http.connect_timeout = std::chrono::seconds(10);
    c.where.http.first_byte_timeout = c.timeout;
    c.where.http.idle_timeout = c.timeout;  // the tool watches progress itself
    return c;
}

}  // namespace

boost::system::result<std::vector<server_config>, std::string> parse_servers(
    std::string_view tools_file_json, bool tenancy) {
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
            out.push_back(server_of(std::string(name), s, tenancy));
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
    // Copies: the frame may be destroyed last, after the tool (at the executor's end).
    struct observed {
        call_observer observe;
        std::string server;
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
        if (std::get<1>(r).empty()) {
            co_return tools::tool_output{"cancelled", true};  // an abort ended the race
        }
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
        const auto* held = registry.own(name, cfg.tenant);  // a tenant's go before the fleet's
        if (!offered.contains(name) && held != nullptr) {
            log("MCP server " + cfg.where.name + ": its tool " + name +
                " has the name of another tool: not offered (rename it)");
            continue;
        }
        if (held == nullptr && !cfg.tenant.empty() && registry.own(name, "") != nullptr) {
            log("MCP server " + cfg.where.name + ": its tool " + name +
                " goes before the fleet's tool " + name + " for the sessions of " + cfg.tenant);
        }
        if (held == nullptr || held->spec().description != t->spec().description ||
            held->spec().schema != t->spec().schema || held->idempotent() != t->idempotent()) {
            registry.put(t, cfg.tenant);  // new, or changed (the one it replaces is retired)
        }
        if (auto a = cfg.approval.find(name); a != cfg.approval.end()) {
            registry.set_approval(name, a->second, cfg.tenant);
        }
        now.insert(name);
    }
    for (const auto& gone : offered) {
        if (!now.contains(gone)) {
            registry.remove(gone, cfg.tenant);
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
    // The registry expects this server's first offer until its first attempt is over (or
    // this coroutine is, however it ends).
    struct first_offer {
        tools::tool_registry& registry;
        bool pending = true;
        void over() {
            if (std::exchange(pending, false)) {
                registry.offered();
            }
        }
        ~first_offer() { over(); }
    } first{registry};
    // An initialize or a listing that takes longer than this has failed (the calls' own
    // timeouts are far longer).
    constexpr milliseconds attempt_limit{30'000};
    std::set<std::string> offered;
    milliseconds backoff{1000};
    std::string last_failure;
    for (;;) {
        auto initializing = c->initialize();
        auto limit = clk.timeout(attempt_limit);
        auto init = co_await (std::move(initializing) || std::move(limit));
        std::string failure;
        if (init.index() == 1) {
            failure = "no answer to initialize within 30 s";
        } else if (!std::get<0>(init)) {
            failure = std::get<0>(init).error();
        }
        // Listed, then again in the same session each time the server says its tools changed
        // (or after its stream ended, or every minute without one); a listing that finds the
        // session forgotten initializes a new one.
        milliseconds gap{1000};
        while (failure.empty()) {
            std::vector<std::string> skipped;
            auto listing = c->list_tools(&skipped);
            auto listing_limit = clk.timeout(attempt_limit);
            auto listed = co_await (std::move(listing) || std::move(listing_limit));
            if (listed.index() == 1) {
                failure = "no answer to tools/list within 30 s";
                break;
            }
            if (!std::get<0>(listed)) {
                failure = std::get<0>(listed).error();
                break;
            }
            for (const auto& s : skipped) {
                log("MCP server " + cfg.where.name + ": left out " + s);
            }
            offer(registry, cfg, tools_of(c, cfg, *std::get<0>(listed), observe), offered, log);
            first.over();
            backoff = milliseconds{1000};
            last_failure.clear();
            const auto began = clk.now().value;
            std::string why;
            auto listening = c->listen(&why);
            const auto heard = co_await std::move(listening);
            // Never more than a listing a second, whatever the server says; a stream that
            // keeps ending soon waits longer each time.
            milliseconds wait = heard == client::heard::changed       ? milliseconds(1000)
                                : heard == client::heard::unsupported ? milliseconds(60'000)
                                                                      : gap;
            if (heard == client::heard::ended) {
                gap = clk.now().value - began < 60'000 ? std::min(gap * 2, milliseconds(60'000))
                                                       : milliseconds(1000);
            }
            if (!co_await clk.elapsed(wait)) {
                co_return;
            }
        }
        first.over();  // the sessions go on without its tools meanwhile
        if (!co_await clk.elapsed(backoff)) {
            co_return;
        }
        if (failure != last_failure) {
            log("MCP server " + cfg.where.name + " (" + cfg.url + ") is not answering: " + failure +
                "; trying again with backoff");
            last_failure = failure;
        }
        backoff = std::min(backoff * 2, milliseconds{60'000});
    }
}

}  // namespace wuhu::mcp
