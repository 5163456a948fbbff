// What wuhuctl prints (client/wuhuctl.hpp): a session as it happens, the fleet view, and the
// calls waiting for approval.
#include "client/approvals.hpp"
#include "client/replies.hpp"
#include "client/wuhuctl.hpp"
#include "session/ledger.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <iostream>
#include <mutex>
#include <optional>

namespace wuhu::ctl {

using namespace std::chrono_literals;

// ---- watch

// A time in ms since the epoch, as "2026-11-26 14:50:07 UTC".
std::string utc(std::int64_t ms) {
    const std::time_t t = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return buf;
}

std::string str(const json::value& v, const char* key) {
    return wuhu::client::detail::field(v.as_object(), key);
}

// A status's ledger for people: "usage: 3 turns, 2 tool calls; tokens in 1200 (cached 1024,
// cache writes 0), out 50 (reasoning 0); cost $0.0012".
std::string usage_line(const json::value& u) {
    auto n = [&](const char* key) {
        const auto* x = u.is_object() ? u.as_object().if_contains(key) : nullptr;
        return x != nullptr && x->is_number() ? x->to_number<std::uint64_t>() : std::uint64_t{0};
    };
    return "usage: " + std::to_string(n("turns")) + " turns, " + std::to_string(n("tool_calls")) +
           " tool calls; tokens in " + std::to_string(n("input")) + " (cached " +
           std::to_string(n("cached_input")) + ", cache writes " +
           std::to_string(n("cache_write")) + "), out " + std::to_string(n("output")) +
           " (reasoning " + std::to_string(n("reasoning")) + "); cost $" +
           wuhu::session::dollars(n("cost"));
}

// Prints a session as it happens: a streamed message as it comes, and its committed entry
// again when the entry differs from what was streamed (the entry is the truth: an answer cut
// at the entry limit carries a note the stream never had).
class renderer {
  public:
    void entry(const json::value& e) {
        const std::string type = str(e, "type");
        if (type == "assistant_message") {
            const std::string text = str(e, "text");
            if (streaming_) {
                end_line();  // the streamed text was the message; it is now committed
                if (text != streamed_) {
                    std::cout << "assistant (as committed): " << text << "\n";
                }
            } else if (!text.empty()) {
                std::cout << "assistant: " << text << "\n";
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
            end_line();  // what was streaming stops here (its discard follows)
            std::cout << "-- interrupted: " << str(e, "reason") << " --\n";
        } else if (type == "diagnostic") {
            std::cout << "!! " << str(e, "code") << ": " << str(e, "message") << "\n";
        } else if (type == "approval_requested") {
            std::cout << "  ?? " << str(e, "tool") << " " << str(e, "arguments")
                      << " waits for approval (call " << str(e, "call") << ")\n";
        } else if (type == "approval_decided") {
            const auto& by = e.at("by");
            const std::string who = str(by, "kind") == "system" ? "the deadline" : str(by, "name");
            std::cout << "  == " << str(e, "decision") << " " << str(e, "call") << " by "
                      << (who.empty() ? "someone" : who) << "\n";
        }
        std::cout.flush();
    }
    void delta(const json::value& d) {
        const std::string type = str(d, "type");
        if (type == "message.start") {
            end_line();
            std::cout << "assistant: " << std::flush;
            streaming_ = true;
            streamed_.clear();
        } else if (type == "text.delta" && streaming_) {
            streamed_ += str(d, "text");
            std::cout << str(d, "text") << std::flush;
        } else if (type == "message.discard" && streaming_) {
            std::cout << " [discarded]\n" << std::flush;
            streaming_ = false;
        }
    }

    void deleted() {
        end_line();
        std::cout << "-- session deleted --" << std::endl;
    }

  private:
    // Ends a streamed line that nothing committed.
    void end_line() {
        if (streaming_) {
            std::cout << "\n";
            streaming_ = false;
        }
    }

    bool streaming_ = false;
    std::string streamed_;  // the text of the message being streamed
};

int watch(wuhu::client::client& c, const options& o, const std::string& sid, bool until_idle,
          int timeout_s) {
    auto w = wuhu::client::watch::open(c, sid);
    if (!w) {
        return report(w.error(), o);
    }
    renderer r;
    bool idle = false, seen_work = false;
    wuhu::client::watch::handlers h;
    h.on_patch = [&](const json::object& p) {
        if (o.as_json) {
            std::cout << json::serialize(json::object{{"patch", p}}) << std::endl;
        } else {
            for (const auto& e : p.at("transcript").as_array()) {
                r.entry(e);
            }
        }
        if (const auto* st = p.if_contains("status")) {
            idle = !st->at("has_work").as_bool();
            seen_work |= !idle;
        }
    };
    h.on_delta = [&](const json::object& d) {
        if (o.as_json) {
            std::cout << json::serialize(json::object{{"delta", d}}) << std::endl;
        } else {
            r.delta(d);
        }
    };
    h.on_deleted = [&](const json::object& d) {
        if (o.as_json) {
            std::cout << json::serialize(json::object{{"deleted", d}}) << std::endl;
        } else {
            r.deleted();
        }
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (!(until_idle && idle && seen_work)) {
        if ((*w)->deleted()) {
            return 0;  // nothing more will come
        }
        auto got = (*w)->next(deadline, h);
        if (!got) {
            return report(got.error(), o);
        }
        if (!*got) {
            return until_idle ? 4 : 0;
        }
    }
    return 0;
}

// "42s", "5m", "3h", "2d": how long `ms` is, roughly.
std::string roughly(std::int64_t ms) {
    const std::int64_t s = std::max<std::int64_t>(ms, 0) / 1000;
    if (s < 120) {
        return std::to_string(s) + "s";
    }
    if (s < 7200) {
        return std::to_string(s / 60) + "m";
    }
    if (s < 172800) {
        return std::to_string(s / 3600) + "h";
    }
    return std::to_string(s / 86400) + "d";
}

// One line per session: id, owner and epoch, state, work, lane depths, pending timers (and
// when the first is due), last activity.
void print_sessions(const json::object& page) {
    const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    auto number = [](const json::object& row, const char* key) -> std::int64_t {
        const auto* v = row.if_contains(key);
        return v != nullptr && v->is_number() ? v->to_number<std::int64_t>() : 0;
    };
    // The fleet's own view with tenancy names each session's tenant.
    bool tenants = false;
    for (const auto& value : page.at("sessions").as_array()) {
        tenants = tenants || value.as_object().contains("tenant");
    }
    if (tenants) {
        std::printf("%-16s ", "TENANT");
    }
    std::printf("%-24s %-16s %-6s %-17s %-5s %-12s %-10s %-4s %-12s %s\n", "SESSION", "OWNER",
                "EPOCH", "STATE", "WORK", "SYS/STR/FUP", "TIMERS", "ASK", "COST", "ACTIVE");
    for (const auto& value : page.at("sessions").as_array()) {
        const auto& row = value.as_object();
        std::string lanes = "-";
        if (const auto* l = row.if_contains("lanes")) {
            lanes = std::to_string(l->at("system").to_number<std::uint64_t>()) + "/" +
                    std::to_string(l->at("steer").to_number<std::uint64_t>()) + "/" +
                    std::to_string(l->at("followUp").to_number<std::uint64_t>());
        }
        std::string timers = std::to_string(number(row, "timers"));
        if (row.contains("next_timer")) {
            timers += " (" + roughly(number(row, "next_timer") - now) + ")";
        }
        const auto last = number(row, "last_activity");
        const std::string active = last == 0 ? "-" : roughly(now - last) + " ago";
        const std::string epoch =
            row.contains("epoch") ? std::to_string(number(row, "epoch")) : "-";
        if (tenants) {
            std::printf("%-16s ",
                        str(value, "tenant").empty() ? "-" : str(value, "tenant").c_str());
        }
        const std::string cost =
            "$" + wuhu::session::dollars(static_cast<std::uint64_t>(number(row, "cost")));
        std::printf("%-24s %-16s %-6s %-17s %-5s %-12s %-10s %-4s %-12s %s\n",
                    str(value, "id").c_str(),
                    str(value, "owner").empty() ? "-" : str(value, "owner").c_str(), epoch.c_str(),
                    str(value, "state").c_str(), row.at("has_work").as_bool() ? "yes" : "no",
                    lanes.c_str(), timers.c_str(), std::to_string(number(row, "approvals")).c_str(),
                    cost.c_str(), active.c_str());
    }
    if (const auto* unreachable = page.if_contains("unreachable")) {
        std::printf("owners that did not answer: %s\n", json::serialize(*unreachable).c_str());
    }
    if (const auto* next = page.if_contains("next")) {
        const auto* cost = page.if_contains("next_cost");
        std::printf(
            "more: wuhuctl sessions --after %s%s\n", next->as_string().c_str(),
            cost != nullptr ? (" --by-cost --after-cost " + json::serialize(*cost)).c_str() : "");
    }
}

// The calls waiting for approval: of `sid`, or of every session the fleet view says awaits.
int list_approvals(wuhu::nats::connection& nc, const wuhu::client::options& copts,
                   wuhu::client::client& c, const options& o, const std::string& sid) {
    // (tenant, id): the fleet's own view with tenancy names each row's tenant.
    std::vector<std::pair<std::string, std::string>> ids{{"", sid}};
    if (sid.empty()) {
        ids.clear();
        json::object q{{"awaiting_approval", true}, {"limit", 1000}};
        for (;;) {
            auto page = c.sessions(q);
            if (!page) {
                return report(page.error(), o);
            }
            for (const auto& row : page->at("sessions").as_array()) {
                const auto* t = row.as_object().if_contains("tenant");
                ids.emplace_back(t != nullptr && t->is_string() ? std::string(t->as_string()) : "",
                                 str(row, "id"));
            }
            const auto* next = page->if_contains("next");
            if (next == nullptr || !next->is_string()) {
                break;
            }
            q["after"] = *next;
        }
    }
    json::array all;
    for (const auto& [tenant, id] : ids) {
        std::optional<wuhu::client::client> theirs;
        if (!tenant.empty()) {
            auto to = copts;
            to.tenant = tenant;
            theirs.emplace(nc, to);
        }
        auto v = (theirs ? *theirs : c).subscribe(id);
        if (!v) {
            return report(v.error(), o);
        }
        for (auto& p : wuhu::client::pending_approvals(*v)) {
            p.as_object()["session"] = tenant.empty() ? id : tenant + "." + id;
            all.push_back(std::move(p));
        }
    }
    if (o.as_json) {
        std::cout << json::serialize(json::object{{"ok", true}, {"approvals", all}}) << "\n";
        return 0;
    }
    if (all.empty()) {
        std::cout << "no call waits for approval\n";
    }
    for (const auto& p : all) {
        const auto* due = p.as_object().if_contains("deadline");
        std::cout << str(p, "session") << "  " << str(p, "call") << "  " << str(p, "tool") << " "
                  << str(p, "arguments") << "  asked " << utc(p.at("at").to_number<std::int64_t>())
                  << (due != nullptr ? ", " + str(p, "on_deadline") + " at " +
                                           utc(due->to_number<std::int64_t>())
                                     : std::string(", no deadline"))
                  << "\n";
    }
    return 0;
}

}  // namespace wuhu::ctl
