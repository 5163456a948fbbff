// wuhuctl: talk to a Wuhu fleet over NATS.
//
//   wuhuctl send <sid> <text>            enqueue a follow-up       wuhuctl steer <sid> <text>
//   wuhuctl system <sid> <text>          a system-lane callback    wuhuctl cancel <sid> <lane> <id>
//   wuhuctl status <sid>                 wuhuctl configure <sid> key=value...
//   wuhuctl abort <sid> [--reason R] [--id K]
//   wuhuctl pause|resume|delete <sid>
//   wuhuctl timers <sid>                       the callbacks scheduled and not yet fired
//   wuhuctl approvals [<sid>]            the calls waiting for approval (of every session)
//   wuhuctl approve <sid> <call> [--arguments JSON]   wuhuctl reject <sid> <call> [--message M]
//   wuhuctl respond <sid> <call> <output>
//   wuhuctl watch <sid> [--until-idle]   the live transcript, streaming text as it arrives
//   wuhuctl sessions [--state S] [--owner W] [--has-work] [--limit N] [--after ID]
//                    [--of-tenant T] [--awaiting-approval] [--by-cost [--after-cost N]]
//
// Connection: --nats URL (credentials may go in it), --user/--password, --token, --creds FILE,
// --nkey FILE, --inbox-prefix P (each also WUHU_NATS_*; docs/security.md), and --tenant T for
// a tenant's sessions from the fleet's own account (an operator).
//
// --json prints replies as JSON. Exit codes: 0 ok, 1 the service refused (error reply),
// 2 usage, 3 no reply (no worker, or NATS unreachable), 4 watch --until-idle timed out.
#include "client/wuhuctl.hpp"
#include "client/replies.hpp"

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>

namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using wuhu::nats::connection;

std::string env_or(const char* name, std::string fallback) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

}  // namespace

namespace wuhu::ctl {

int report(const wuhu::client::failure& f, const options& o) {
    if (o.as_json) {
        std::cout << json::serialize(json::object{
                         {"ok", false}, {"error", {{"code", f.code}, {"message", f.message}}}})
                  << "\n";
    } else {
        std::cerr << (f.code == "no_reply" ? "wuhuctl: " : "error " + f.code + ": ") << f.message
                  << "\n";
    }
    return f.code == "no_reply" ? 3 : 1;
}

}  // namespace wuhu::ctl

namespace {

using namespace wuhu::ctl;

int call(wuhu::client::client& c, const options& o, const std::string& sid, const std::string& verb,
         const json::object& body) {
    auto r = c.call(sid, verb, body);
    if (!r) {
        return report(r.error(), o);
    }
    if (o.as_json) {
        std::cout << json::serialize(*r) << "\n";
    } else if (const auto* id = r->if_contains("id")) {
        std::cout << "ok " << json::value_to<std::string>(*id) << "\n";
    } else if (const auto* d = r->if_contains("decision"); d && d->is_object()) {
        // approve, reject, respond: the decision on record
        const auto* dup = r->if_contains("duplicate");
        auto field = [&](const char* key) {
            return wuhu::client::detail::field(d->as_object(), key);
        };
        std::cout << field("decision") << " " << field("call") << " (" << field("tool") << ")"
                  << (dup != nullptr && *dup == true ? ": decided so before" : "") << "\n";
    } else if (const auto* stopped = r->if_contains("stopped"); stopped && stopped->is_string()) {
        // abort: what it stopped, and the interruption entry that records it
        const auto* entry = r->if_contains("entry");
        const std::string_view what = stopped->as_string();
        if (what == "nothing") {
            std::cout << "nothing to stop: no turn was in progress";
        } else {
            std::cout << (what == "inference"    ? "stopped the inference"
                          : what == "backoff"    ? "stopped the wait before a retry"
                          : what == "compaction" ? "stopped the compaction"
                          : what == "tool"       ? "stopped the tool call"
                                                 : "stopped the turn between two steps");
            if (entry != nullptr) {
                std::cout << " (interruption entry " << json::serialize(*entry) << ")";
            }
        }
        if (const auto* dup = r->if_contains("duplicate"); dup && dup->is_bool() && dup->as_bool()) {
            std::cout << ", answered before for this id";
        }
        std::cout << "\n";
    } else {
        std::cout << "ok\n";
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"wuhuctl: talk to a Wuhu fleet over NATS"};
    options o;
    o.nats = env_or("WUHU_NATS_URL", o.nats);
    o.prefix = env_or("WUHU_PREFIX", o.prefix);
    o.tenant = env_or("WUHU_TENANT", o.tenant);
    o.auth.user = env_or("WUHU_NATS_USER", "");
    o.auth.password = env_or("WUHU_NATS_PASSWORD", "");
    o.auth.token = env_or("WUHU_NATS_TOKEN", "");
    o.auth.credentials_file = env_or("WUHU_NATS_CREDS", "");
    o.auth.nkey_seed_file = env_or("WUHU_NATS_NKEY", "");
    o.inbox_prefix = env_or("WUHU_NATS_INBOX_PREFIX", o.inbox_prefix);
    app.add_option("--nats", o.nats, "NATS URL (WUHU_NATS_URL)");
    app.add_option("--prefix", o.prefix, "subject prefix (WUHU_PREFIX)");
    app.add_option("--tenant", o.tenant,
                   "a tenant's sessions, from the fleet's own account (WUHU_TENANT)");
    app.add_option("--user", o.auth.user, "NATS user (WUHU_NATS_USER)");
    app.add_option("--password", o.auth.password,
                   "NATS password (WUHU_NATS_PASSWORD; the variable keeps it out of the process "
                   "list)");
    app.add_option("--token", o.auth.token, "NATS token (WUHU_NATS_TOKEN)");
    app.add_option("--creds", o.auth.credentials_file, "NATS credentials file (WUHU_NATS_CREDS)");
    app.add_option("--nkey", o.auth.nkey_seed_file, "NATS NKey seed file (WUHU_NATS_NKEY)");
    app.add_option("--inbox-prefix", o.inbox_prefix,
                   "prefix of reply subjects, e.g. _INBOX_<user> (WUHU_NATS_INBOX_PREFIX)")
        ->check(CLI::Validator(
            [](std::string& v) {
                return wuhu::protocol::valid_prefix(v)
                           ? std::string()
                           : "must be tokens of [A-Za-z0-9_-] separated by dots: " + v;
            },
            "PREFIX"));
    app.add_flag("--json", o.as_json, "print replies as JSON");
    app.require_subcommand(1);
    // The options above may come after the subcommand too (`wuhuctl status demo --json`): the
    // subcommands made from here on pass what they do not know to the app.
    app.fallthrough();

    std::string sid, text, lane, id, source = "asyncTaskNotification", author = "cli";
    std::vector<std::string> settings;
    bool until_idle = false;
    int timeout_s = 3600;
    auto with_sid = [&](CLI::App* c) { c->add_option("session", sid, "session id")->required(); };
    auto* send = app.add_subcommand("send", "enqueue a follow-up");
    auto* steer = app.add_subcommand("steer", "enqueue a steer");
    for (auto* c : {send, steer}) {
        with_sid(c);
        c->add_option("text", text, "the message")->required();
        c->add_option("--id", id, "idempotency key");
        c->add_option("--author", author, "author name");
    }
    auto* sys = app.add_subcommand("system", "post a system-lane callback");
    with_sid(sys);
    sys->add_option("text", text, "the callback content")->required();
    sys->add_option("--source", source, "source tag");
    sys->add_option("--id", id, "idempotency key");
    auto* cancel = app.add_subcommand("cancel", "cancel a queued item");
    with_sid(cancel);
    cancel->add_option("lane", lane, "steer, followUp, or system (a scheduled callback)")
        ->required();
    cancel->add_option("id", id, "the item id")->required();
    auto* configure = app.add_subcommand("configure", "change settings: key=value ...");
    with_sid(configure);
    configure->add_option("settings", settings,
                          "model=..., system_prompt=..., context_limit=..., budget.turns=..., "
                          "budget.cost_usd=...");
    auto* status = app.add_subcommand("status", "the session's status and version");
    with_sid(status);
    auto* timers = app.add_subcommand("timers", "the callbacks scheduled and not yet fired");
    with_sid(timers);
    std::vector<CLI::App*> simple;
    auto* abort = app.add_subcommand("abort", "stop the turn in progress");
    with_sid(abort);
    std::string reason;
    abort->add_option("--reason", reason, "why (recorded with the interruption)");
    abort->add_option("--id", id, "idempotency key: a retry gets the first answer");
    for (const char* verb : {"pause", "resume", "delete"}) {
        simple.push_back(app.add_subcommand(verb, std::string(verb) + " the session"));
        with_sid(simple.back());
    }
    auto* approvals = app.add_subcommand(
        "approvals", "the calls waiting for approval: of a session, or of every one awaiting");
    approvals->add_option("session", sid, "session id (none: every session awaiting approval)");
    std::string call_id, arguments, message;
    auto* approve = app.add_subcommand("approve", "run a call that waits for approval");
    auto* reject = app.add_subcommand("reject", "refuse a waiting call (the model sees why)");
    auto* respond = app.add_subcommand("respond", "answer a waiting call instead of its tool");
    for (auto* c : {approve, reject, respond}) {
        with_sid(c);
        c->add_option("call", call_id, "the tool call id")->required();
        c->add_option("--author", author, "who decides (recorded with the decision)");
    }
    approve->add_option("--arguments", arguments, "run with these arguments (a JSON object)");
    reject->add_option("--message", message, "what the model is told");
    respond->add_option("output", message, "the call's result, as the model sees it")->required();
    auto* list = app.add_subcommand("sessions", "the fleet's sessions: owner, state, lanes");
    std::string state_filter, owner_filter, after;
    bool busy_only = false;
    std::size_t limit = 100;
    list->add_option("--state", state_filter,
                     "only sessions in this state: a loop state, unloaded, unowned or "
                     "unreachable");
    list->add_option("--owner", owner_filter, "only sessions of this worker");
    list->add_flag("--has-work", busy_only, "only sessions with work");
    list->add_option("--limit", limit, "page size (1-1000)");
    list->add_option("--after", after, "the page after this session id");
    std::string of_tenant;
    list->add_option("--of-tenant", of_tenant,
                     "the fleet's own view with tenancy: only this tenant's sessions");
    bool awaiting = false, by_cost = false;
    std::optional<std::uint64_t> after_cost;
    list->add_flag("--awaiting-approval", awaiting,
                   "only sessions with calls waiting for approval");
    list->add_flag("--by-cost", by_cost, "the costliest first");
    list->add_option("--after-cost", after_cost, "with --by-cost: the page after this cost");
    auto* w = app.add_subcommand("watch", "the live transcript, streaming text as it arrives");
    with_sid(w);
    w->add_flag("--until-idle", until_idle,
                "exit once the session is idle again (code 4 on timeout)");
    w->add_option("--timeout", timeout_s, "seconds to watch at most");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;  // --help is 0; every usage error is 2
    }

    try {
        wuhu::nats::options nopts;
        nopts.url = o.nats;
        nopts.name = "wuhuctl";
        nopts.auth = o.auth;
        nopts.inbox_prefix = o.inbox_prefix;
        wuhu::nats::connection nc(nopts);
        wuhu::client::options copts;
        copts.prefix = o.prefix;
        copts.timeout = 10s;
        copts.tenant = o.tenant;
        wuhu::client::client c(nc, copts);
        json::object body;
        auto* cmd = app.get_subcommands().front();
        const std::string name = cmd->get_name();
        if (name == "send" || name == "steer") {
            body = {{"lane", name == "send" ? "followUp" : "steer"},
                    {"author", {{"id", "cli"}, {"name", author}, {"kind", "human"}}},
                    {"content", text}};
            if (!id.empty()) {
                body["id"] = id;
            }
            return call(c, o, sid, "enqueue", body);
        }
        if (name == "system") {
            body = {{"source", source}, {"content", text}};
            if (!id.empty()) {
                body["id"] = id;
            }
            return call(c, o, sid, "system", body);
        }
        if (name == "cancel") {
            auto r = c.call(sid, "cancel", json::object{{"lane", lane}, {"id", id}});
            if (!r) {
                return report(r.error(), o);
            }
            const auto* done = r->if_contains("canceled");
            if (o.as_json) {
                std::cout << json::serialize(*r) << "\n";
            } else if (done != nullptr && done->is_bool() && done->as_bool()) {
                std::cout << "canceled\n";
            } else {
                std::cout << (lane == "system" ? "not canceled (it already fired)\n"
                                               : "not canceled (already materialized)\n");
            }
            return 0;
        }
        if (name == "configure") {
            for (const auto& kv : settings) {
                auto eq = kv.find('=');
                if (eq == std::string::npos) {
                    std::cerr << "wuhuctl: settings are key=value\n";
                    return 2;
                }
                std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
                boost::system::error_code ec;
                auto parsed = json::parse(value, ec);
                auto v = (ec || parsed.is_string() || key == "model" || key == "system_prompt")
                             ? json::value(value)
                             : parsed;
                if (key.starts_with("budget.")) {  // budget.turns=10 budget.cost_usd=0.50
                    if (!body.contains("budget") || !body["budget"].is_object()) {
                        body["budget"] = json::object{};
                    }
                    body["budget"].as_object()[key.substr(7)] = std::move(v);
                } else {
                    body[key] = std::move(v);
                }
            }
            return call(c, o, sid, "configure", body);
        }
        if (name == "status") {
            auto v = c.subscribe(sid);
            if (!v) {
                return report(v.error(), o);
            }
            if (o.as_json) {
                std::cout << json::serialize(json::object{{"ok", true},
                                                          {"status", v->at("status")},
                                                          {"version", v->at("patch").at("to")}})
                          << "\n";
                return 0;
            }
            std::cout << "state " << str(v->at("status"), "state") << ", has_work "
                      << v->at("status").at("has_work") << ", paused "
                      << v->at("status").at("paused") << ", version "
                      << json::serialize(v->at("patch").at("to")) << "\n";
            if (const auto* u = v->at("status").as_object().if_contains("usage")) {
                std::cout << usage_line(*u) << "\n";
            }
            return 0;
        }
        if (name == "timers") {
            // From scratch, the system lane's facts hold the pending timers' `scheduled` facts
            // (those that fired or were canceled coalesce away).
            auto v = c.subscribe(sid);
            if (!v) {
                return report(v.error(), o);
            }
            json::array pending;
            for (const auto& f : v->at("patch").at("journal").at("system").as_array()) {
                if (f.at("fact") == "scheduled") {
                    pending.push_back(f.at("timer"));
                }
            }
            if (o.as_json) {
                std::cout << json::serialize(json::object{{"ok", true}, {"timers", pending}})
                          << "\n";
                return 0;
            }
            if (pending.empty()) {
                std::cout << "no callbacks scheduled\n";
            }
            for (const auto& t : pending) {
                std::cout << str(t, "id") << "  due " << utc(t.at("due").to_number<std::int64_t>())
                          << "  " << str(t, "source") << ": " << str(t, "content") << "\n";
            }
            return 0;
        }
        if (name == "sessions") {
            json::object q{{"limit", limit}};
            if (!state_filter.empty()) {
                q["state"] = state_filter;
            }
            if (!owner_filter.empty()) {
                q["owner"] = owner_filter;
            }
            if (busy_only) {
                q["has_work"] = true;
            }
            if (!after.empty()) {
                q["after"] = after;
            }
            if (!of_tenant.empty()) {
                q["tenant"] = of_tenant;
            }
            if (awaiting) {
                q["awaiting_approval"] = true;
            }
            if (by_cost) {
                q["order"] = "cost";
            }
            if (after_cost) {
                q["after_cost"] = *after_cost;
            }
            auto page = c.sessions(q);
            if (!page) {
                return report(page.error(), o);
            }
            if (o.as_json) {
                std::cout << json::serialize(*page) << "\n";
                return 0;
            }
            print_sessions(*page);
            return 0;
        }
        if (name == "watch") {
            return watch(c, o, sid, until_idle, timeout_s);
        }
        if (name == "approvals") {
            return list_approvals(nc, copts, c, o, sid);
        }
        if (name == "approve" || name == "reject" || name == "respond") {
            body = {{"call", call_id},
                    {"author", {{"id", "cli"}, {"name", author}, {"kind", "human"}}}};
            if (!arguments.empty()) {
                boost::system::error_code ec;
                auto v = json::parse(arguments, ec);
                if (ec || !v.is_object()) {
                    std::cerr << "wuhuctl: --arguments must be a JSON object\n";
                    return 2;
                }
                body["arguments"] = std::move(v);
            }
            if (name == "reject" && !message.empty()) {
                body["message"] = message;
            }
            if (name == "respond") {
                body["output"] = message;
            }
            return call(c, o, sid, name, body);
        }
        if (name == "abort") {
            if (!reason.empty()) {
                body["reason"] = reason;
            }
            if (!id.empty()) {
                body["id"] = id;
            }
            return call(c, o, sid, "abort", body);
        }
        return call(c, o, sid, name, json::object{});
    } catch (const std::invalid_argument& e) {
        std::cerr << "wuhuctl: " << e.what() << "\n";  // options that cannot work: usage
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "wuhuctl: " << e.what() << "\n";
        return 3;
    }
}
