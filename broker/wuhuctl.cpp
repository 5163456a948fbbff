// wuhuctl: talk to a Wuhu fleet over NATS.
//
//   wuhuctl send <sid> <text>            enqueue a follow-up       wuhuctl steer <sid> <text>
//   wuhuctl system <sid> <text>          a system-lane callback    wuhuctl cancel <sid> <lane> <id>
//   wuhuctl status <sid>                 wuhuctl configure <sid> key=value...
//   wuhuctl abort|pause|resume|delete <sid>
//   wuhuctl watch <sid> [--until-idle]   the live transcript, streaming text as it arrives
//
// --json prints replies as JSON. Exit codes: 0 ok, 1 the service refused (error reply),
// 2 usage, 3 no reply (no worker, or NATS unreachable).
#include "broker/nats_client.hpp"

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>

namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using wuhu::broker::nats_client;
using wuhu::broker::nats_message;

struct options {
    std::string nats = "nats://127.0.0.1:4222";
    std::string prefix = "wuhu";
    bool as_json = false;
};

std::string env_or(const char* name, std::string fallback) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

int call(nats_client& nc, const options& o, const std::string& sid, const std::string& verb,
         const json::value& body) {
    auto reply = nc.request(o.prefix + ".session." + sid + "." + verb, json::serialize(body), 10s);
    if (!reply) {
        std::cerr << "wuhuctl: no reply (is a worker running?)\n";
        return 3;
    }
    auto v = json::parse(*reply);
    if (o.as_json) {
        std::cout << *reply << "\n";
    }
    if (!v.at("ok").as_bool()) {
        if (!o.as_json) {
            std::cerr << "error " << json::value_to<std::string>(v.at("error").at("code")) << ": "
                      << json::value_to<std::string>(v.at("error").at("message")) << "\n";
        }
        return 1;
    }
    if (!o.as_json) {
        if (const auto* id = v.as_object().if_contains("id")) {
            std::cout << "ok " << json::value_to<std::string>(*id) << "\n";
        } else if (const auto* c = v.as_object().if_contains("canceled")) {
            std::cout << (c->as_bool() ? "canceled\n" : "not canceled (already materialized)\n");
        } else {
            std::cout << "ok\n";
        }
    }
    return 0;
}

// ---- watch

std::string str(const json::value& v, const char* key) {
    const auto* x = v.as_object().if_contains(key);
    return x != nullptr && x->is_string() ? std::string(x->as_string()) : std::string();
}

class renderer {
  public:
    void entry(const json::value& e) {
        const std::string type = str(e, "type");
        if (type == "assistant_message") {
            if (streaming_) {
                std::cout << "\n";  // the streamed text was the message; it is now committed
                streaming_ = false;
            } else if (!str(e, "text").empty()) {
                std::cout << "assistant: " << str(e, "text") << "\n";
            }
            for (const auto& c : e.at("tool_calls").as_array()) {
                std::cout << "  -> " << str(c, "name") << " " << str(c, "arguments") << "\n";
            }
        } else if (type == "party_message") {
            std::string name = str(e.at("author"), "name");
            std::cout << (name.empty() ? "someone" : name) << " (" << str(e, "lane")
                      << "): " << str(e, "content") << "\n";
        } else if (type == "system_message") {
            std::cout << "[" << str(e, "source") << "] " << str(e, "content") << "\n";
        } else if (type == "tool_result") {
            std::cout << "  <- " << str(e, "tool")
                      << (e.at("is_error").as_bool() ? " error: " : ": ") << str(e, "output")
                      << "\n";
        } else if (type == "compaction") {
            std::cout << "-- compacted: " << str(e, "summary") << " --\n";
        } else if (type == "interruption") {
            std::cout << "-- interrupted: " << str(e, "reason") << " --\n";
        } else if (type == "diagnostic") {
            std::cout << "!! " << str(e, "code") << ": " << str(e, "message") << "\n";
        }
        std::cout.flush();
    }
    void delta(const json::value& d) {
        const std::string type = str(d, "type");
        if (type == "message.start") {
            std::cout << "assistant: " << std::flush;
            streaming_ = true;
        } else if (type == "text.delta" && streaming_) {
            std::cout << str(d, "text") << std::flush;
        } else if (type == "message.discard" && streaming_) {
            std::cout << " [discarded]\n";
            streaming_ = false;
        }
    }

  private:
    bool streaming_ = false;
};

bool covered(const json::value& to, const json::value& version) {
    for (const char* k : {"transcript", "system", "steer", "followUp"}) {
        if (to.at(k).to_number<std::uint64_t>() > version.at(k).to_number<std::uint64_t>()) {
            return false;
        }
    }
    return true;
}

int watch(nats_client& nc, const options& o, const std::string& sid, bool until_idle,
          int timeout_s) {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<nats_message> queue;
    // Subscribe first, then ask for the backfill: nothing falls between the two.
    nc.subscribe(o.prefix + ".events." + sid + ".>", [&](nats_message m) {
        std::lock_guard lock(mu);
        queue.push_back(std::move(m));
        cv.notify_one();
    });
    nc.flush();
    auto reply = nc.request(o.prefix + ".session." + sid + ".subscribe", "{}", 10s);
    if (!reply) {
        std::cerr << "wuhuctl: no reply (is a worker running?)\n";
        return 3;
    }
    auto sub = json::parse(*reply);
    if (!sub.at("ok").as_bool()) {
        std::cerr << "error " << str(sub.at("error"), "code") << "\n";
        return 1;
    }
    renderer r;
    for (const auto& e : sub.at("patch").at("transcript").as_array()) {
        r.entry(e);
    }
    json::value version = sub.at("patch").at("to");
    bool idle = !sub.at("status").at("has_work").as_bool();
    if (const auto* in = sub.as_object().if_contains("inflight")) {
        r.delta(json::object{{"type", "message.start"}});
        r.delta(json::object{{"type", "text.delta"}, {"text", in->at("text")}});
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    bool seen_work = !idle;
    while (!(until_idle && idle && seen_work)) {
        std::unique_lock lock(mu);
        if (!cv.wait_until(lock, deadline, [&] { return !queue.empty(); })) {
            return until_idle ? 4 : 0;
        }
        nats_message m = std::move(queue.front());
        queue.pop_front();
        lock.unlock();
        auto v = json::parse(m.data);
        if (m.subject.ends_with(".delta")) {
            r.delta(v);
            continue;
        }
        // Already in the backfill: a patch that ends at or below the version. A register-only
        // patch (from == to) at the current version is new (has_work, paused changed).
        const bool register_only = v.at("from") == v.at("to");
        if (covered(v.at("to"), version) && !(register_only && v.at("to") == version)) {
            continue;
        }
        for (const auto& e : v.at("transcript").as_array()) {
            r.entry(e);
        }
        version = v.at("to");
        if (const auto* st = v.as_object().if_contains("status")) {
            idle = !st->at("has_work").as_bool();
            seen_work |= !idle;
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"wuhuctl: talk to a Wuhu fleet over NATS"};
    options o;
    o.nats = env_or("WUHU_NATS_URL", o.nats);
    o.prefix = env_or("WUHU_PREFIX", o.prefix);
    app.add_option("--nats", o.nats, "NATS URL (WUHU_NATS_URL)");
    app.add_option("--prefix", o.prefix, "subject prefix (WUHU_PREFIX)");
    app.add_flag("--json", o.as_json, "print replies as JSON");
    app.require_subcommand(1);

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
    cancel->add_option("lane", lane, "steer or followUp")->required();
    cancel->add_option("id", id, "the item id")->required();
    auto* configure = app.add_subcommand("configure", "change settings: key=value ...");
    with_sid(configure);
    configure->add_option("settings", settings, "model=..., system_prompt=..., context_limit=...");
    auto* status = app.add_subcommand("status", "the session's status and version");
    with_sid(status);
    std::vector<CLI::App*> simple;
    for (const char* verb : {"abort", "pause", "resume", "delete"}) {
        simple.push_back(app.add_subcommand(verb, std::string(verb) + " the session"));
        with_sid(simple.back());
    }
    auto* w = app.add_subcommand("watch", "the live transcript, streaming text as it arrives");
    with_sid(w);
    w->add_flag("--until-idle", until_idle,
                "exit once the session is idle again (code 4 on timeout)");
    w->add_option("--timeout", timeout_s, "seconds to watch at most");
    CLI11_PARSE(app, argc, argv);

    try {
        nats_client nc(o.nats, "wuhuctl");
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
            return call(nc, o, sid, "enqueue", body);
        }
        if (name == "system") {
            body = {{"source", source}, {"content", text}};
            if (!id.empty()) {
                body["id"] = id;
            }
            return call(nc, o, sid, "system", body);
        }
        if (name == "cancel") {
            return call(nc, o, sid, "cancel", json::object{{"lane", lane}, {"id", id}});
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
                body[key] = (ec || parsed.is_string() || key == "model" || key == "system_prompt")
                                ? json::value(value)
                                : parsed;
            }
            return call(nc, o, sid, "configure", body);
        }
        if (name == "status") {
            auto reply = nc.request(o.prefix + ".session." + sid + ".subscribe", "{}", 10s);
            if (!reply) {
                std::cerr << "wuhuctl: no reply (is a worker running?)\n";
                return 3;
            }
            auto v = json::parse(*reply);
            if (o.as_json || !v.at("ok").as_bool()) {
                std::cout << json::serialize(json::object{
                                 {"ok", v.at("ok")},
                                 {"status", v.as_object().contains("status") ? v.at("status")
                                                                             : json::value()},
                                 {"version", v.as_object().contains("patch")
                                                 ? v.at("patch").at("to")
                                                 : json::value()}})
                          << "\n";
                return v.at("ok").as_bool() ? 0 : 1;
            }
            std::cout << "state " << str(v.at("status"), "state") << ", has_work "
                      << v.at("status").at("has_work") << ", paused " << v.at("status").at("paused")
                      << ", version " << json::serialize(v.at("patch").at("to")) << "\n";
            return 0;
        }
        if (name == "watch") {
            return watch(nc, o, sid, until_idle, timeout_s);
        }
        return call(nc, o, sid, name, json::object{});
    } catch (const std::exception& e) {
        std::cerr << "wuhuctl: " << e.what() << "\n";
        return 3;
    }
}
