// The fleet driven from outside, as its users drive it: real wuhu-worker processes (the
// AddressSanitizer build under scripts/test) on one SQLite data directory or one PostgreSQL
// database, a real nats-server, and the signals an operator or a crash sends (SIGSTOP/SIGCONT,
// SIGKILL). Each test here is the regression test of a defect found that way, or the "done
// when" of an issue.
#include "client/client.hpp"
#include "ownership/postgres_lease.hpp"
#include "ownership/sqlite_lease.hpp"
#include "storage/sqlite_db.hpp"
#include "storage/sqlite_store.hpp"
#include "tests/support/burst.hpp"
#include "tests/support/http_get.hpp"
#include "tests/support/pg_env.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// Sends every request at once and parses the replies (null: no reply in time).
std::vector<json::value> send_all(burst& b,
                                  const std::vector<std::pair<std::string, std::string>>& requests,
                                  std::chrono::milliseconds timeout) {
    std::vector<burst_request> batch;
    for (const auto& [subject, body] : requests) {
        batch.push_back({subject, body});
    }
    std::vector<json::value> out;
    for (const auto& r : b.send(batch, timeout)) {
        out.push_back(r ? json::parse(*r) : json::value());
    }
    return out;
}

std::string enqueue_body(const std::string& id) {
    return R"({"lane":"followUp","id":")" + id + R"(","content":"item )" + id + "\"}";
}

bool ok(const json::value& v) {
    return v.is_object() && v.as_object().contains("ok") && v.at("ok") == true;
}

std::string code_of(const json::value& v) {
    if (!v.is_object() || !v.as_object().contains("error")) {
        return v.is_null() ? "no reply" : "ok";
    }
    return json::value_to<std::string>(v.at("error").at("code"));
}

// The model answers every turn the same, a little slowly, so that turns overlap requests.
constexpr const char* slow_script = R"({"responses":[{"text":"noted","delay_ms":5}]})";

// A worker of a test fleet: `base`'s store, its own id, the fleet's subject prefix (`tag`
// and this process's id) and, unless 0, a lease of `ttl_ms`.
worker_process::config fleet_member(worker_process::config base, const std::string& id,
                                    const std::string& tag, int ttl_ms = 0) {
    base.worker_id = id;
    base.prefix = tag + std::to_string(getpid());
    if (ttl_ms > 0) {
        base.args = {"--lease-ttl-ms", std::to_string(ttl_ms)};
    }
    return base;
}

// The store of the workers of one host: a SQLite data directory they share.
worker_process::config sharing(const std::filesystem::path& data_dir) {
    worker_process::config c;
    c.data_dir = data_dir;
    return c;
}

// What `wuhuctl --nats <url> --prefix <prefix> <args>` printed (its stdout in `out`, its
// stderr beside it), once it exited 0 (checked, bounded).
std::string wuhuctl(const std::string& url, const std::string& prefix,
                    const std::vector<std::string>& args, const std::filesystem::path& out) {
    std::vector<std::string> all{"--nats", url, "--prefix", prefix};
    all.insert(all.end(), args.begin(), args.end());
    const pid_t pid = spawn(WUHUCTL_BIN, all,
                            spawn_options{out.string() + ".err", std::nullopt, out.string()});
    EXPECT_EQ(wait_exit(pid, 30s), 0) << "wuhuctl " << out.filename();
    std::ifstream f(out);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

// Defect: the registry freed a session's loop while requests were still suspended on it (a
// delete among queued enqueues), and the AddressSanitizer build aborted with a
// heap-use-after-free. Every request is answered, and the ones sent after the delete make a
// new session that holds exactly them.
TEST(Fleet, DeletingASessionWhileCommandsWaitNeverCrashesTheWorker) {
    worker_process worker("del", slow_script);
    worker.start();
    nats::connection nc(nats_url(), "delete-burst");
    ASSERT_EQ(answer_when_up(nc, worker.prefix() + ".session.warmup.subscribe").at("ok"), true);
    burst b(nc);
    for (int round = 0; round < 40; ++round) {
        const std::string sid = "del" + std::to_string(round);
        const auto subject = [&](const char* verb) {
            return worker.prefix() + ".session." + sid + "." + verb;
        };
        std::vector<std::pair<std::string, std::string>> requests;
        requests.emplace_back(subject("enqueue"), enqueue_body("first"));
        for (int i = 0; i < 6; ++i) {
            requests.emplace_back(subject("enqueue"), enqueue_body("a" + std::to_string(i)));
        }
        requests.emplace_back(subject("delete"), "{}");
        for (int i = 0; i < 6; ++i) {
            requests.emplace_back(subject("enqueue"), enqueue_body("b" + std::to_string(i)));
        }
        auto replies = send_all(b, requests, 30s);
        ASSERT_TRUE(worker.running()) << "the worker died in round " << round;
        for (std::size_t i = 0; i < replies.size(); ++i) {
            ASSERT_TRUE(ok(replies[i]))
                << "round " << round << " request " << i << ": " << json::serialize(replies[i]);
        }
        // The delete came after the first seven: the session now holds the last six only.
        auto after = answer_when_up(nc, subject("subscribe"));
        ASSERT_EQ(after.at("ok"), true) << json::serialize(after);
        EXPECT_EQ(item_ids(after), (std::set<std::string>{"b0", "b1", "b2", "b3", "b4", "b5"}))
            << "round " << round;
        // Now the session is loaded and idle: a delete and the enqueues sent after it, at once.
        // None of them may overtake the delete (and be acknowledged, then deleted).
        std::vector<std::pair<std::string, std::string>> again{{subject("delete"), "{}"}};
        for (int i = 0; i < 6; ++i) {
            again.emplace_back(subject("enqueue"), enqueue_body("c" + std::to_string(i)));
        }
        for (const auto& r : send_all(b, again, 30s)) {
            ASSERT_TRUE(ok(r)) << "round " << round << ": " << json::serialize(r);
        }
        auto last = answer_when_up(nc, subject("subscribe"));
        EXPECT_EQ(item_ids(last), (std::set<std::string>{"c0", "c1", "c2", "c3", "c4", "c5"}))
            << "round " << round << ": an enqueue sent after the delete was lost";
    }
    EXPECT_EQ(worker.stop(), 0) << "a clean stop, with no sanitizer report";
}

// Defect: with a disk that refuses writes, failed sessions were dropped while requests waited
// on them: a few `unavailable` replies, then the same use-after-free. Now every request gets
// `ok` or a retryable `unavailable`, the worker stays up, and everything acknowledged is there
// when the disk works again.
TEST(Fleet, ADiskThatRefusesWritesGetsUnavailableRepliesAndNeverACrash) {
    temp_dir shared;
    worker_process::config full;
    full.data_dir = shared.path() / "data";
    full.max_file_bytes = 96 * 1024;  // files may not grow past this: writes soon fail
    worker_process worker("full", slow_script, full);
    worker.start();
    nats::connection nc(nats_url(), "full-disk");
    ASSERT_EQ(answer_when_up(nc, worker.prefix() + ".session.warmup.subscribe").at("ok"), true);
    burst b(nc);
    std::set<std::string> acked;
    std::map<std::string, int> codes;
    for (int round = 0; round < 30; ++round) {
        std::vector<std::pair<std::string, std::string>> requests;
        for (int s = 0; s < 4; ++s) {
            for (int i = 0; i < 8; ++i) {
                requests.emplace_back(
                    worker.prefix() + ".session.full" + std::to_string(s) + ".enqueue",
                    enqueue_body("r" + std::to_string(round) + "-" + std::to_string(i)));
            }
        }
        auto replies = send_all(b, requests, 30s);
        ASSERT_TRUE(worker.running()) << "the worker died in round " << round;
        for (std::size_t i = 0; i < replies.size(); ++i) {
            const auto code = code_of(replies[i]);
            ++codes[code];
            ASSERT_TRUE(code == "ok" || code == "unavailable") << json::serialize(replies[i]);
            if (code == "ok") {
                const auto sid = requests[i].first.substr(worker.prefix().size() + 9, 5);
                acked.insert(sid + "/" + json::value_to<std::string>(replies[i].at("id")));
            }
        }
    }
    EXPECT_GT(codes["unavailable"], 0) << "the disk never filled up: the test tested nothing";
    EXPECT_GT(codes["ok"], 0);
    EXPECT_EQ(worker.stop(), 0) << "a clean stop, with no sanitizer report";

    // The disk works again: every acknowledged item is there.
    worker_process::config roomy;
    roomy.data_dir = full.data_dir;
    roomy.prefix = worker.prefix();
    worker_process again("full", slow_script, roomy);
    again.start();
    std::set<std::string> found;
    for (int s = 0; s < 4; ++s) {
        const std::string sid = "full" + std::to_string(s);
        auto r = answer_when_up(nc, again.prefix() + ".session." + sid + ".subscribe");
        ASSERT_EQ(r.at("ok"), true) << json::serialize(r);
        for (const auto& id : item_ids(r)) {
            found.insert(sid + "/" + id);
        }
    }
    for (const auto& a : acked) {
        EXPECT_TRUE(found.contains(a)) << "acknowledged and lost: " << a;
    }
    EXPECT_EQ(again.stop(), 0);
}

namespace {

// Two workers of one host: one SQLite data directory, short leases.
struct two_workers {
    temp_dir shared;
    std::unique_ptr<worker_process> a;
    std::unique_ptr<worker_process> b;

    explicit two_workers(const std::string& tag) {
        a = std::make_unique<worker_process>(tag + "a", slow_script, config("A"));
        b = std::make_unique<worker_process>(tag + "b", slow_script, config("B"));
        a->start();
        b->start();
    }
    worker_process::config config(const std::string& id) const {
        return fleet_member(sharing(shared.path() / "data"), id, "wuhu_pair", 600);
    }
};

}  // namespace

// Defect: a frozen owner (SIGSTOP past its lease) that met a delete acknowledged an enqueue
// into its cached handle of the deleted file, and the item was gone once it died. A delete
// fences every old handle; the stale owner reloads from the store before it serves again.
TEST(Fleet, AStaleOwnerNeverAcknowledgesIntoADeletedSession) {
    two_workers w("stale");
    nats::connection nc(nats_url(), "stale-client");
    auto& a = *w.a;
    auto& b = *w.b;
    ASSERT_EQ(answer_when_up(nc, a.direct("s", "enqueue"), enqueue_body("d1")).at("ok"), true);
    // Frozen between turns (frozen inside a commit, it would hold the file's write lock, and
    // nobody could write the session until it woke up or died: SQLite's rule on one host).
    ASSERT_TRUE(wait_idle(nc, a.direct("s", "subscribe")));
    a.signal(SIGSTOP);
    std::this_thread::sleep_for(1500ms);  // past the 600 ms lease
    auto d2 = answer_when_up(nc, b.direct("s", "enqueue"), enqueue_body("d2"));
    ASSERT_EQ(d2.at("ok"), true) << json::serialize(d2) << ": B takes the session over";
    a.signal(SIGCONT);
    for (int i = 0; i < 100 && !a.has_logged("lease of session s lost"); ++i) {
        std::this_thread::sleep_for(50ms);
    }
    ASSERT_EQ(answer_when_up(nc, b.direct("s", "delete")).at("ok"), true);
    // A retries what it is refused, as a client would (owner_changed: nothing changed).
    json::value d3;
    for (int i = 0; i < 50; ++i) {
        d3 = answer_when_up(nc, a.direct("s", "enqueue"), enqueue_body("d3"));
        if (code_of(d3) != "owner_changed") {
            break;
        }
        std::this_thread::sleep_for(100ms);
    }
    ASSERT_EQ(d3.at("ok"), true) << json::serialize(d3);
    a.crash();
    // Whoever owns the session now has d3, and nothing from before the delete.
    json::value now;
    for (int i = 0; i < 50; ++i) {
        now = answer_when_up(nc, b.direct("s", "subscribe"));
        if (code_of(now) != "owner_changed") {
            break;
        }
        std::this_thread::sleep_for(100ms);
    }
    ASSERT_EQ(now.at("ok"), true) << json::serialize(now);
    EXPECT_EQ(item_ids(now), std::set<std::string>{"d3"}) << "acknowledged d3 must survive";
    // (A read of a session nobody owns takes no lease: a command makes B its owner again.)
    ASSERT_EQ(answer_when_up(nc, b.direct("s", "pause")).at("ok"), true);
    EXPECT_EQ(b.stop(), 0);
    // Defect: a failover left no log line. Each lease event is logged with its epoch.
    EXPECT_TRUE(a.has_logged("lease of session s acquired (epoch"));
    EXPECT_TRUE(a.has_logged("lease of session s lost (epoch"));
    EXPECT_TRUE(b.has_logged("lease of session s taken over from A, whose lease expired (epoch"));
    EXPECT_TRUE(b.has_logged("lease of session s released (epoch"));
}

// Defect: right after SIGCONT, a fenced owner answered `subscribe` from the state it had before
// it was frozen. Reads of a session whose lease a worker no longer holds go to the owner or
// fail with a retryable code, never serve old state. Here the frozen owner also cannot renew
// when it wakes up (the test holds the catalog's write lock past SQLite's busy timeout), which
// used to leave it serving its old state for as long as renewal failed.
TEST(Fleet, AFencedOwnerNeverServesOldState) {
    two_workers w("fenced");
    nats::connection nc(nats_url(), "fenced-client");
    auto& a = *w.a;
    auto& b = *w.b;
    ASSERT_EQ(answer_when_up(nc, a.direct("f", "configure")).at("ok"), true);
    ASSERT_EQ(answer_when_up(nc, a.direct("f", "pause")).at("ok"), true);  // no turns: exact
    ASSERT_EQ(answer_when_up(nc, a.direct("f", "enqueue"), enqueue_body("d1")).at("ok"), true);
    a.signal(SIGSTOP);
    std::this_thread::sleep_for(1500ms);  // past the 600 ms lease
    for (const char* id : {"d2", "d3"}) {
        auto r = answer_when_up(nc, b.direct("f", "enqueue"), enqueue_body(id));
        ASSERT_EQ(r.at("ok"), true) << json::serialize(r);
    }
    // The lease store is locked (another process writing) while A wakes up: A's renewal waits
    // out the busy timeout and fails.
    storage::sqlite::db catalog((w.shared.path() / "data" / "catalog.sqlite").string(), "FULL",
                                1000);
    catalog.exec("BEGIN IMMEDIATE");
    burst reads(nc);
    std::vector<std::pair<std::string, std::string>> requests(20,
                                                              {a.direct("f", "subscribe"), "{}"});
    std::thread wake([&] {
        std::this_thread::sleep_for(300ms);
        a.signal(SIGCONT);
        std::this_thread::sleep_for(6500ms);
        catalog.exec("ROLLBACK");
    });
    auto replies = send_all(reads, requests, 40s);
    wake.join();
    int served = 0;
    for (const auto& r : replies) {
        if (ok(r)) {
            ++served;
            EXPECT_EQ(r.at("patch").at("to").at("followUp"), 3)
                << "old state served by a fenced owner: "
                << json::serialize(r.at("patch").at("to"));
        } else {
            const auto code = code_of(r);
            EXPECT_TRUE(code == "owner_changed" || code == "unavailable") << json::serialize(r);
        }
    }
    EXPECT_EQ(a.stop(), 0);
    EXPECT_EQ(b.stop(), 0);
}

// Defect (of a test): DurableTimers.SurviveARestartAndFireOnce started the second owner itself,
// so it could not see that no worker would ever load the session again. Here the owner that
// scheduled the callback is killed, another worker starts, nobody sends the session anything,
// and the callback still arrives, once: the recovery sweep claims sessions with a pending
// timer (or work to do) and no live lease.
TEST(Fleet, ADurableTimerSurvivesItsOwnerDyingAndFiresOnceWithNobodyAsking) {
    temp_dir shared;
    const std::string script = R"({"responses":[
        {"tool_calls":[{"id":"cb1","name":"schedule_callback",
                        "arguments":{"delay_ms":3000,"content":"ping"}}]},
        {"text":"scheduled"},
        {"text":"got the ping"}]})";
    auto config = [&](const std::string& id) {
        return fleet_member(sharing(shared.path() / "data"), id, "wuhu_timer", 600);
    };
    worker_process a("timera", script, config("A"));
    worker_process b("timerb", script, config("B"));
    a.start();
    nats::connection nc(nats_url(), "timer-client");
    ASSERT_EQ(answer_when_up(nc, a.direct("warmup", "subscribe")).at("ok"), true);
    const auto asked = std::chrono::steady_clock::now();  // the timer is due 3 s after this
    ASSERT_EQ(answer_when_up(nc, a.direct("t", "enqueue"), enqueue_body("remind")).at("ok"), true);
    ASSERT_TRUE(wait_idle(nc, a.direct("t", "subscribe")));
    a.crash();  // before the timer is due

    // Watch the session's events only: nothing here asks a worker about it.
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> texts;
    std::optional<std::chrono::steady_clock::time_point> pinged;
    nc.subscribe(a.prefix() + ".events.t.patch", [&](nats::message m) {
        auto v = json::parse(m.data);
        std::lock_guard lock(mu);
        if (!pinged && m.data.find("got the ping") != std::string::npos) {
            pinged = std::chrono::steady_clock::now();
        }
        for (const auto& e : v.at("transcript").as_array()) {
            if (const auto* c = e.as_object().if_contains("content")) {
                texts.push_back(json::value_to<std::string>(*c));
            } else if (const auto* t = e.as_object().if_contains("text")) {
                texts.push_back(json::value_to<std::string>(*t));
            }
        }
        cv.notify_all();
    });
    nc.flush();
    b.start();
    {
        std::unique_lock lock(mu);
        EXPECT_TRUE(cv.wait_for(lock, 30s, [&] {
            return std::find(texts.begin(), texts.end(), "got the ping") != texts.end();
        })) << "the callback never arrived";
        ASSERT_TRUE(pinged.has_value());
        // On time: the dead owner's lease expires (600 ms) and the sweep (every 300 ms) loads
        // the session two rounds before the timer is due; 2 s more for the worker's start
        // under the sanitizers.
        const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(*pinged - asked);
        std::cout << "[ timer   ] due 3000 ms after the request, its owner killed; the callback's "
                  << "answer came after " << after.count() << " ms" << std::endl;
        EXPECT_GE(after.count(), 3000);
        EXPECT_LE(after.count(), 3000 + 600 + 2 * 300 + 2000) << "the timer fired late";
    }
    EXPECT_TRUE(b.has_logged("recovered session t"));
    auto now = answer_when_up(nc, b.direct("t", "subscribe"));
    int pings = 0;
    for (const auto& e : now.at("patch").at("transcript").as_array()) {
        pings += e.at("type") == "system_message" && e.at("content") == "ping";
    }
    EXPECT_EQ(pings, 1) << "exactly once";
    EXPECT_EQ(b.stop(), 0);
}

// Issue 31, defect 5: a scheduled callback changed no version and appeared in no patch, and it
// could not be listed or canceled. Now its facts are published with the system lane's, and
// `wuhuctl timers` lists it and `wuhuctl cancel <sid> system <id>` cancels it before it fires.
TEST(Fleet, ScheduledCallbacksArePublishedListedAndCanceledWithWuhuctl) {
    temp_dir shared;
    const std::string script = R"({"responses":[
        {"tool_calls":[{"id":"cb1","name":"schedule_callback",
                        "arguments":{"delay_ms":2000,"content":"ping"}},
                       {"id":"cb2","name":"schedule_callback",
                        "arguments":{"delay_ms":600000,"content":"much later"}}]},
        {"text":"scheduled"},
        {"text":"got the ping"}]})";
    worker_process a("listtimers", script,
                     fleet_member(sharing(shared.path()), "A", "wuhu_timers", 1000));
    a.start();
    nats::connection nc(nats_url(), "timers-client");
    ASSERT_EQ(answer_when_up(nc, a.direct("warmup", "subscribe")).at("ok"), true);
    std::mutex mu;
    std::vector<std::string> facts;  // "fact:id" of the system lane, as published
    nc.subscribe(a.prefix() + ".events.t.patch", [&](nats::message m) {
        auto v = json::parse(m.data);
        std::lock_guard lock(mu);
        for (const auto& f : v.at("journal").at("system").as_array()) {
            const auto& o = f.as_object();
            const auto* t = o.if_contains("timer");
            facts.push_back(json::value_to<std::string>(o.at("fact")) + ":" +
                            json::value_to<std::string>(t ? t->at("id")
                                                        : o.contains("id")
                                                            ? o.at("id")
                                                            : o.at("item").at("id")));
        }
    });
    nc.flush();
    ASSERT_EQ(answer_when_up(nc, a.direct("t", "enqueue"), enqueue_body("remind")).at("ok"), true);
    ASSERT_TRUE(wait_idle(nc, a.direct("t", "subscribe")));
    auto ctl = [&](const std::vector<std::string>& args, const std::string& name) {
        return wuhuctl(nats_url(), a.prefix(), args, shared.path() / name);
    };
    const auto listed = json::parse(ctl({"--json", "timers", "t"}, "listed"));
    ASSERT_EQ(listed.at("timers").as_array().size(), 2u) << listed;
    EXPECT_EQ(listed.at("timers").at(0).at("id"), "timer-cb1");
    EXPECT_EQ(listed.at("timers").at(1).at("content"), "much later");
    const auto text = ctl({"timers", "t"}, "listed-text");
    EXPECT_NE(text.find("timer-cb2  due "), std::string::npos) << text;
    EXPECT_NE(text.find("scheduledCallback: much later"), std::string::npos) << text;
    EXPECT_EQ(ctl({"cancel", "t", "system", "timer-cb2"}, "cancel"), "canceled\n");
    // cb1 fires; cb2 never does.
    const auto until = std::chrono::steady_clock::now() + 20s;
    json::value now;
    while (std::chrono::steady_clock::now() < until) {
        now = answer_when_up(nc, a.direct("t", "subscribe"));
        if (now.at("patch").at("transcript").as_array().back().at("type") == "assistant_message" &&
            now.at("patch").at("transcript").as_array().back().at("text") == "got the ping") {
            break;
        }
        std::this_thread::sleep_for(100ms);
    }
    const auto& entries = now.at("patch").at("transcript").as_array();
    ASSERT_EQ(entries.back().at("text"), "got the ping") << now;
    EXPECT_EQ(ctl({"--json", "timers", "t"}, "none"), "{\"ok\":true,\"timers\":[]}\n");
    EXPECT_EQ(ctl({"timers", "t"}, "none-text"), "no callbacks scheduled\n");
    EXPECT_EQ(ctl({"cancel", "t", "system", "timer-cb1"}, "fired"),
              "not canceled (it already fired)\n");
    std::this_thread::sleep_for(300ms);  // the last patch is delivered
    std::lock_guard lock(mu);
    EXPECT_EQ(facts, (std::vector<std::string>{"scheduled:timer-cb1", "scheduled:timer-cb2",
                                               "unscheduled:timer-cb2", "enqueued:timer-cb1",
                                               "fired:timer-cb1", "materialized:timer-cb1"}));
    EXPECT_EQ(a.stop(), 0);
}

// Issue 31, defect 13: users outgrow one nats-server first. Two workers on a three-node
// nats-server cluster (routes on loopback), given all three URLs; under load (a client
// library enqueuing all along), one node is killed (SIGKILL) and restarted. Every acknowledged
// item is found; wuhuctl and the client library work through the cluster too.
TEST(Fleet, AFleetOnAThreeNodeNatsClusterLosesNothingWhenANodeIsKilledAndRestarted) {
    const int c1 = free_port(), c2 = free_port(), c3 = free_port();
    std::string routes;
    for (int c : {c1, c2, c3}) {
        routes +=
            (routes.empty() ? "" : ",") + std::string("nats://127.0.0.1:") + std::to_string(c);
    }
    auto node = [&](int cluster_port) {
        return std::vector<std::string>{
            "--cluster_name", "wuhu", "--cluster",
            "nats://127.0.0.1:" + std::to_string(cluster_port), "--routes", routes};
    };
    own_nats n1(node(c1)), n2(node(c2)), n3(node(c3));
    ASSERT_TRUE(n1.up() && n2.up() && n3.up()) << "a cluster node did not start";
    const std::string urls = n1.url() + "," + n2.url() + "," + n3.url();
    {
        // The routes are up once a message published on one node reaches a subscriber on
        // another.
        nats::connection on1(n1.url(), "cluster-probe-1");
        nats::connection on3(n3.url(), "cluster-probe-3");
        std::atomic<bool> through{false};
        on3.subscribe("probe.x", [&](nats::message) { through = true; });
        on3.flush();
        for (int i = 0; i < 100 && !through; ++i) {
            on1.publish("probe.x", "hi");
            on1.flush();
            std::this_thread::sleep_for(50ms);
        }
        ASSERT_TRUE(through) << "the cluster's routes did not form";
    }
    temp_dir shared;
    worker_process a("clustera", slow_script,
                     fleet_member(sharing(shared.path()), "A", "wuhu_cluster", 1000));
    worker_process b("clusterb", slow_script,
                     fleet_member(sharing(shared.path()), "B", "wuhu_cluster", 1000));
    a.start(urls);
    b.start(urls);
    nats::connection nc(urls, "cluster-client");
    ASSERT_EQ(answer_when_up(nc, a.direct("warma", "subscribe")).at("ok"), true);
    ASSERT_EQ(answer_when_up(nc, b.direct("warmb", "subscribe")).at("ok"), true);
    client::client lib(nc, client::options{a.prefix(), 3s, {}});
    // Load: four sessions, one enqueue after another, all along.
    std::atomic<bool> loading{true};
    std::mutex mu;
    std::map<std::string, std::set<std::string>> acked;  // session -> item ids
    int refused = 0;
    std::thread load([&] {
        for (int i = 0; loading; ++i) {
            const std::string sid = "cl" + std::to_string(i % 4);
            const std::string id = "i" + std::to_string(i);
            auto r = lib.enqueue(sid, "followUp", "item " + id, std::nullopt, id);
            std::lock_guard lock(mu);
            if (r) {
                acked[sid].insert(id);
            } else {
                ++refused;
            }
        }
    });
    auto total = [&] {
        std::lock_guard lock(mu);
        std::size_t n = 0;
        for (const auto& [sid, ids] : acked) {
            n += ids.size();
        }
        return n;
    };
    std::this_thread::sleep_for(1s);
    const auto before_kill = total();
    n1.kill_now();
    // Long enough for a request lost with node 1 to time out (the client's 3 s) and for the
    // connections that were on it to reconnect to another node (every 250 ms).
    std::this_thread::sleep_for(7s);
    const auto while_down = total() - before_kill;
    ASSERT_TRUE(n1.start()) << "node 1 did not come back";
    std::this_thread::sleep_for(2s);
    loading = false;
    load.join();
    std::cout << "[ cluster ] " << total() << " items acknowledged (" << before_kill
              << " before the kill, " << while_down << " while node 1 was down), " << refused
              << " requests not answered" << std::endl;
    EXPECT_GT(before_kill, 0u);
    EXPECT_GT(while_down, 0u) << "the fleet served while a node was down";
    // Every acknowledged item is in its session.
    for (const auto& [sid, ids] : acked) {
        auto sub = lib.subscribe(sid);
        ASSERT_TRUE(sub) << sid << ": " << sub.error().message;
        const auto found = item_ids(json::value(*sub));
        for (const auto& id : ids) {
            EXPECT_TRUE(found.contains(id)) << sid << " lost acknowledged item " << id;
        }
    }
    // wuhuctl through the cluster.
    wuhuctl(urls, a.prefix(), {"send", "cl0", "after", "--id", "ctl1"}, shared.path() / "ctl");
    EXPECT_TRUE(item_ids(json::value(lib.subscribe("cl0").value())).contains("ctl1"));
    EXPECT_EQ(a.stop(), 0);
    EXPECT_EQ(b.stop(), 0);
}

// Issue 13: sessions orphaned by a crash are taken up at a bounded rate, not in one stampede:
// each sweep round claims at most --sweep-batch of them, and every one completes.
TEST(Fleet, OrphansOfACrashAreRecoveredAtMostABatchPerSweepRound) {
    temp_dir shared;
    const std::string script = R"({"responses":[{"text":"done","delay_ms":1000}]})";
    constexpr int sessions = 20;
    constexpr int batch = 4;
    auto config = [&](const std::string& id) {
        auto c = fleet_member(sharing(shared.path() / "data"), id, "wuhu_batch", 600);
        c.args.insert(c.args.end(), {"--sweep-batch", std::to_string(batch)});
        return c;
    };
    worker_process a("batcha", script, config("A"));
    worker_process b("batchb", script, config("B"));
    a.start();
    nats::connection nc(nats_url(), "batch-client");
    auto sid = [](int i) { return "o" + std::to_string(i); };
    for (int i = 0; i < sessions; ++i) {
        ASSERT_EQ(answer_when_up(nc, a.direct(sid(i), "enqueue"), enqueue_body("go")).at("ok"),
                  true);
    }
    a.crash();  // every session mid-turn (the model takes 1 s): work to do, and soon no owner
    b.start();
    auto recovered = [&] {
        int n = 0;
        for (const auto& line : json_lines(b.log())) {
            n += line.at("msg").as_string().starts_with("recovered session o");
        }
        return n;
    };
    for (int i = 0; i < 300 && recovered() < sessions; ++i) {
        std::this_thread::sleep_for(100ms);
    }
    ASSERT_EQ(recovered(), sessions) << "nobody asked: the sweep took every orphan up";
    std::vector<long> rounds;  // sessions recovered per round
    for (const auto& line : json_lines(b.log())) {
        const std::string msg(line.at("msg").as_string());
        if (msg.starts_with("sweep: recovering ")) {
            rounds.push_back(std::stol(msg.substr(18)));
        }
    }
    EXPECT_EQ(std::accumulate(rounds.begin(), rounds.end(), 0L), sessions);
    EXPECT_GE(rounds.size(), std::size_t{sessions / batch});
    for (const auto n : rounds) {
        EXPECT_LE(n, batch) << "a round recovered more than --sweep-batch";
    }
    for (int i = 0; i < sessions; ++i) {
        EXPECT_TRUE(wait_idle(nc, b.direct(sid(i), "subscribe"))) << sid(i);
        auto now = answer_when_up(nc, b.direct(sid(i), "subscribe"));
        EXPECT_NE(json::serialize(now).find("\"done\""), std::string::npos)
            << sid(i) << ": the turn completed";
    }
    EXPECT_EQ(b.stop(), 0);
}

// A session waiting on a timer due later than the next sweep rounds is passivated like any
// idle session (it used to stay loaded until the timer fired): the store's index knows when
// the timer is due, and the recovery sweep loads the session again before then, with nobody
// asking. The callback arrives once, after its due time.
TEST(Fleet, ASessionWaitingOnATimerIsPassivatedAndTheSweepBringsItBackWhenDue) {
    const std::string script = R"({"responses":[
        {"tool_calls":[{"id":"cb1","name":"schedule_callback",
                        "arguments":{"delay_ms":4000,"content":"ping"}}]},
        {"text":"scheduled"},
        {"text":"got the ping"}]})";
    worker_process::config c = fleet_member({}, "T", "wuhu_later", 600);
    c.args.insert(c.args.end(), {"--passivate-after", "200ms"});
    worker_process w("later", script, c);
    w.start();
    nats::connection nc(nats_url(), "later-client");
    std::mutex mu;
    std::condition_variable cv;
    std::optional<std::chrono::steady_clock::time_point> pinged;
    nc.subscribe(w.prefix() + ".events.t.patch", [&](nats::message m) {
        if (m.data.find("got the ping") != std::string::npos) {
            std::lock_guard lock(mu);
            pinged = std::chrono::steady_clock::now();
            cv.notify_all();
        }
    });
    nc.flush();
    const auto asked = std::chrono::steady_clock::now();
    ASSERT_EQ(answer_when_up(nc, w.direct("t", "enqueue"), enqueue_body("remind")).at("ok"), true);
    ASSERT_TRUE(wait_idle(nc, w.direct("t", "subscribe")));
    bool passivated = false;
    for (int i = 0; i < 30 && !passivated; ++i) {
        std::this_thread::sleep_for(100ms);
        passivated = w.has_logged("passivated 1 idle sessions");
    }
    EXPECT_TRUE(passivated) << "the session waits on a timer 4 s away: it is unloaded";
    {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return pinged.has_value(); }))
            << "the callback never arrived";
        const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(*pinged - asked);
        std::cout << "[ timer   ] due 4000 ms after the request; the callback's answer came after "
                  << after.count() << " ms" << std::endl;
        EXPECT_GE(after.count(), 4000);
        EXPECT_LE(after.count(), 4000 + 2 * 300 + 2000) << "the timer fired late";
    }
    EXPECT_TRUE(w.has_logged("recovered session t"));
    EXPECT_TRUE(w.has_logged("its timer is due in"));
    auto now = answer_when_up(nc, w.direct("t", "subscribe"));
    int pings = 0;
    for (const auto& e : now.at("patch").at("transcript").as_array()) {
        pings += e.at("type") == "system_message" && e.at("content") == "ping";
    }
    EXPECT_EQ(pings, 1) << "exactly once";
    EXPECT_EQ(w.stop(), 0);
}

// Defect: a patch larger than the NATS max payload was dropped without a log line (the publish
// result was ignored). Three items queued while paused are drained into one patch over the
// server's 8 KiB max payload: the worker logs the failed publish with its session and counts it,
// and a watcher that missed the patch repairs the gap from subscribe.
TEST(Fleet, APatchTooLargeToPublishIsLoggedWithItsSession) {
    own_nats nats({}, "max_payload: 8192");
    ASSERT_TRUE(nats.up()) << "nats-server did not start on port " << nats.port();
    const std::string url = nats.url();
    worker_process worker("big", slow_script);
    worker.start(url);
    nats::connection nc(url, "big-client");
    const auto subject = [&](const char* verb) { return worker.prefix() + ".session.big." + verb; };
    ASSERT_EQ(answer_when_up(nc, subject("configure")).at("ok"), true);
    ASSERT_EQ(answer_when_up(nc, subject("pause")).at("ok"), true);
    for (int i = 0; i < 3; ++i) {
        const std::string body = R"({"lane":"followUp","id":"b)" + std::to_string(i) +
                                 R"(","content":")" + std::string(3000, 'x') + "\"}";
        auto r = answer_when_up(nc, subject("enqueue"), body);
        ASSERT_EQ(r.at("ok"), true) << json::serialize(r);
    }
    ASSERT_EQ(answer_when_up(nc, subject("resume")).at("ok"), true);
    bool logged_it = false;
    for (int i = 0; i < 100 && !logged_it; ++i) {
        logged_it = worker.has_logged("could not publish a patch of big");
        std::this_thread::sleep_for(100ms);
    }
    EXPECT_TRUE(logged_it) << "the dropped patch left no log line";
    // The state is whole all the same: subscribe's reply comes in chunks.
    client::client c(nc, client::options{worker.prefix(), 30s, {}});
    auto whole = c.subscribe("big");
    ASSERT_TRUE(whole) << whole.error().message;
    EXPECT_GE(whole->at("patch").at("transcript").as_array().size(), 3u);
    EXPECT_EQ(worker.stop(), 0);
}

// Defects: a PostgreSQL outage left no log line (every request answered `unavailable`, and
// nothing said why or when it ended), and after it LeakSanitizer found the PGresults libpqxx
// 6.4 leaks on a broken connection, so a worker that should exit 0 on SIGTERM did not. And at
// the edge of an outage, an operation still under way on a connection not yet dropped could
// succeed after another had failed: "unavailable", "back", "unavailable" for one outage (1 run
// in 5). Here the worker's own database refuses connections for a while and drops those it
// had, long enough for the lease renewals and the sweeps to fail too.
TEST(Fleet, ADatabaseOutageIsLoggedOnceEachWayAndLeaksNothing) {
    scratch_database db("wuhu_outage");
    worker_process::config pg;
    pg.store = db.url();
    // A short lease: renewals (every 300 ms) and sweeps fail during the outage too, and the
    // leases run out (served until 720 ms after the last renewal) before it ends.
    pg.args = {"--lease-ttl-ms", "900"};
    worker_process worker("pg", slow_script, pg);
    worker.start();
    nats::connection nc(nats_url(), "outage-client");
    const auto subject = [&](int i) {
        return worker.prefix() + ".session.db" + std::to_string(i % 4) + ".enqueue";
    };
    for (int i = 0; i < 8; ++i) {
        auto r = answer_when_up(nc, subject(i), enqueue_body("before" + std::to_string(i)));
        ASSERT_EQ(r.at("ok"), true) << json::serialize(r);
    }
    {
        pqxx::nontransaction n(db.admin());
        n.exec("ALTER DATABASE " + db.name() + " ALLOW_CONNECTIONS false");
        // pg_terminate_backend only signals: a backend may still answer a query or two until
        // it exits (the store would then be "back" for a moment); and one that was past its
        // connection check when the database closed is not in the first list. So it is
        // repeated until no backend of the database is left: the outage starts then.
        bool gone = false;
        for (int i = 0; i < 500 && !gone; ++i) {
            n.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '" +
                   db.name() + "'");
            gone = n.exec1("SELECT count(*) FROM pg_stat_activity WHERE datname = '" +
                           db.name() + "'")[0]
                       .as<int>() == 0;
            if (!gone) {
                std::this_thread::sleep_for(10ms);
            }
        }
        ASSERT_TRUE(gone) << "the worker's connections to the database did not end";
    }
    int refused = 0;
    for (int i = 0; i < 12; ++i) {
        auto r = nc.request(subject(i), enqueue_body("during" + std::to_string(i)), 30s);
        ASSERT_TRUE(r.has_value());
        auto v = json::parse(*r);
        EXPECT_EQ(code_of(v), "unavailable") << *r;
        refused += code_of(v) == "unavailable";
    }
    EXPECT_EQ(refused, 12);
    std::this_thread::sleep_for(1500ms);  // past every lease's deadline
    {
        pqxx::nontransaction n(db.admin());
        n.exec("ALTER DATABASE " + db.name() + " ALLOW_CONNECTIONS true");
    }
    json::value back;
    for (int i = 0; i < 100 && !ok(back); ++i) {
        auto r = nc.request(subject(i), enqueue_body("after" + std::to_string(i)), 30s);
        back = r ? json::parse(*r) : json::value();
        if (!ok(back)) {
            std::this_thread::sleep_for(50ms);
        }
    }
    EXPECT_TRUE(ok(back)) << "the store came back, and so must the worker";
    EXPECT_EQ(worker.stop(), 0) << "SIGTERM exits 0: no sanitizer report (the leak made it fail)";
    int down = 0;
    int up = 0;
    for (const auto& line : json_lines(worker.log())) {
        const auto msg = line.at("msg").as_string();
        down += msg.find("session store is unavailable") != std::string::npos;
        up += msg.find("session store is back") != std::string::npos;
    }
    EXPECT_EQ(down, 1) << "once when the store went away, not per request";
    EXPECT_EQ(up, 1) << "once when it came back";
}

// Defect: with a PostgreSQL store `--lease auto` was the in-memory lease, whose epochs start at 1
// in every process, while each session row keeps its last epoch: a restarted worker was
// refused (lease_lost, then owner_changed) by its own sessions, more of them after each
// restart (50 sessions, 5 restarts: 37, 75, 111, 154, 189 refusals). The PostgreSQL lease hands
// out epochs from the database, so every restart is served at once.
TEST(Fleet, ALoneWorkerRestartedOnPostgresServesEverySessionAtOnce) {
    scratch_database db("wuhu_restart");
    worker_process::config pg;
    pg.store = db.url();
    constexpr int sessions = 50;
    for (int run = 0; run <= 5; ++run) {
        worker_process worker("rs", slow_script, pg);
        worker.start();
        nats::connection nc(nats_url(), "restart-client");
        ASSERT_EQ(answer_when_up(nc, worker.prefix() + ".session.warmup.subscribe").at("ok"), true);
        std::map<std::string, int> codes;
        for (int i = 0; i < sessions; ++i) {
            // Every other run in reverse: the order in which a worker meets its sessions
            // after a restart is not the order it met them before.
            const int k = run % 2 == 0 ? i : sessions - 1 - i;
            const auto subject = worker.prefix() + ".session.r" + std::to_string(k) + ".enqueue";
            auto r = nc.request(subject, enqueue_body("run" + std::to_string(run)), 30s);
            ++codes[r ? code_of(json::parse(*r)) : "no reply"];
        }
        EXPECT_EQ(codes["ok"], sessions) << "run " << run << ": " << [&] {
            std::string all;
            for (const auto& [code, n] : codes) {
                all += code + "=" + std::to_string(n) + " ";
            }
            return all;
        }();
        EXPECT_EQ(worker.stop(), 0);
        std::ifstream log(worker.log());
        const std::string text((std::istreambuf_iterator<char>(log)),
                               std::istreambuf_iterator<char>());
        EXPECT_NE(text.find("and postgres leases"), std::string::npos)
            << "--lease auto picks the PostgreSQL lease with a PostgreSQL store";
        int refused = 0;  // each a lease_lost from a session whose epoch was newer
        for (const auto& line : json_lines(worker.log())) {
            refused += line.at("msg").as_string().find(" lost (epoch") != std::string::npos;
        }
        EXPECT_EQ(refused, 0) << "run " << run << ": sessions refused their own owner";
    }
}

namespace {

// A fleet (issue 13): three workers on one store, sessions mid-turn with queued input and a
// pending durable timer; one worker is killed (SIGKILL). Without any client request, every
// session it owned is taken over by another worker (the recovery sweep claims sessions with
// work or a timer and no live lease) and completes; each timer fires once; no acknowledged
// item is lost. Prints the failover times (kill to the new lease, read from `leases`).
// `base`: the workers' store (a PostgreSQL URL, or a SQLite data directory they share).
void kill_one_of_three(const std::string& name, const worker_process::config& base,
                       ownership::lease_store& leases) {
    const std::string script = R"({"responses":[
        {"delay_ms":200,"tool_calls":[{"name":"schedule_callback",
                                       "arguments":{"delay_ms":2500,"content":"wake"}}]},
        {"text":"scheduled","delay_ms":600},
        {"text":"next","delay_ms":200},
        {"text":"next","delay_ms":200},
        {"text":"next","delay_ms":200}]})";
    constexpr int ttl_ms = 1000;
    auto config = [&](const std::string& id) {
        return fleet_member(base, id, "wuhu_failover", ttl_ms);
    };
    std::vector<std::unique_ptr<worker_process>> workers;
    for (const char* id : {"fa", "fb", "fc"}) {
        workers.push_back(std::make_unique<worker_process>(id, script, config(id)));
        workers.back()->start();
    }
    const std::string prefix = workers[0]->prefix();
    nats::connection nc(nats_url(), "failover-client");
    ASSERT_EQ(answer_when_up(nc, prefix + ".session.warmup.subscribe").at("ok"), true);
    constexpr int sessions = 12;
    auto sid = [](int i) { return "fo" + std::to_string(i); };
    for (int i = 0; i < sessions; ++i) {
        for (const char* item : {"first", "second"}) {
            auto r = nc.request(prefix + ".session." + sid(i) + ".enqueue",
                                enqueue_body(std::string(item) + std::to_string(i)), 30s);
            ASSERT_TRUE(r.has_value());
            ASSERT_TRUE(ok(json::parse(*r))) << *r;
        }
    }
    // The owners, from the lease store; the one with the most sessions is killed mid-turn.
    auto owners = [&] {
        std::map<std::string, std::string> out;
        auto live = leases.live({});
        EXPECT_TRUE(live.has_value()) << "the test could not read the leases";
        for (const auto& l : live ? *live : std::vector<ownership::lease>{}) {
            out[l.id.str()] = l.owner;
        }
        return out;
    };
    std::this_thread::sleep_for(300ms);
    const auto before = owners();
    std::map<std::string, int> held;
    for (const auto& [s, owner] : before) {
        ++held[owner];
    }
    const auto victim = std::max_element(held.begin(), held.end(), [](auto& a, auto& b) {
                            return a.second < b.second;
                        })->first;
    std::vector<std::string> orphans;
    for (const auto& [s, owner] : before) {
        if (owner == victim) {
            orphans.push_back(s);
        }
    }
    ASSERT_FALSE(orphans.empty());
    const auto killed_at = std::chrono::steady_clock::now();
    for (auto& w : workers) {
        if (w->id() == victim) {
            w->crash();
        }
    }
    // Failover: until another worker holds each orphan's lease (bounded: 20 s). Meanwhile the
    // survivors' wuhu_sessions_without_owner (what their last sweep round claimed) is watched.
    auto without_owner = [&] {
        double most = 0;
        for (const auto& w : workers) {
            if (w->id() != victim) {
                most = std::max(most, metric_value(worker_http(w->log(), "/metrics").body,
                                                   "wuhu_sessions_without_owner"));
            }
        }
        return most;
    };
    double most_without_owner = 0;
    std::map<std::string, double> failover_ms;
    while (failover_ms.size() < orphans.size() &&
           std::chrono::steady_clock::now() - killed_at < 20s) {
        most_without_owner = std::max(most_without_owner, without_owner());
        const auto now = owners();
        for (const auto& s : orphans) {
            if (auto it = now.find(s); it != now.end() && it->second != victim &&
                                       !failover_ms.contains(s)) {
                failover_ms[s] = std::chrono::duration<double, std::milli>(
                                     std::chrono::steady_clock::now() - killed_at)
                                     .count();
            }
        }
        std::this_thread::sleep_for(20ms);
    }
    most_without_owner = std::max(most_without_owner, without_owner());  // set after its claim
    ASSERT_EQ(failover_ms.size(), orphans.size()) << "sessions left without an owner";
    std::vector<double> times;
    for (const auto& [s, ms] : failover_ms) {
        times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    const double p50 = times[times.size() / 2];
    const double p99 = times[std::min(times.size() - 1, times.size() * 99 / 100)];
    std::cout << "failover (" << name << "): " << orphans.size() << " sessions of " << victim
              << " taken over, p50 " << p50 << " ms, p99 " << p99 << " ms (ttl " << ttl_ms
              << " ms; goal p99 <= ttl + 2 s)\n";
    EXPECT_LE(p99, ttl_ms + 2000.0);
    // Every session completes: both items answered, the timer fired once, nothing left to do.
    auto wakes_in = [](const json::value& reply) {
        int wakes = 0;
        for (const auto& e : reply.at("patch").at("transcript").as_array()) {
            wakes += e.at("type") == "system_message" && e.at("content") == "wake";
        }
        return wakes;
    };
    for (int i = 0; i < sessions; ++i) {
        json::value done;
        for (int tries = 0; tries < 300; ++tries) {
            auto r = nc.request(prefix + ".session." + sid(i) + ".subscribe", "{}", 2s);
            done = r ? json::parse(*r) : json::value();
            if (ok(done) && wakes_in(done) == 1 && done.at("status").at("state") == "idle" &&
                done.at("status").at("has_work") == false) {
                break;
            }
            std::this_thread::sleep_for(100ms);
        }
        ASSERT_TRUE(ok(done)) << sid(i);
        const auto items = item_ids(done);
        for (const char* item : {"first", "second"}) {
            EXPECT_TRUE(items.contains(item + std::to_string(i))) << sid(i) << " lost " << item;
        }
        EXPECT_EQ(wakes_in(done), 1) << sid(i) << ": the timer fires exactly once";
        EXPECT_EQ(done.at("status").at("has_work"), false) << sid(i);
    }
    int recovered = 0;
    for (const auto& w : workers) {
        recovered += w->id() != victim && w->has_logged("recovered session");
    }
    EXPECT_GT(recovered, 0) << "the sweep, not a request, brought the sessions back";
    double recoveries = 0;
    for (const auto& w : workers) {
        if (w->id() != victim) {
            recoveries += metric_value(worker_http(w->log(), "/metrics").body,
                                       "wuhu_recoveries_total");
        }
    }
    EXPECT_GE(recoveries, static_cast<double>(orphans.size()))
        << "every session recovered is counted in wuhu_recoveries_total";
    // Issue 31 (never tested): the gauge showed the orphans a sweep round claimed, and is back
    // to zero once every session has an owner (the rounds after claim nothing).
    most_without_owner = std::max(most_without_owner, without_owner());
    EXPECT_GE(most_without_owner, 1) << "no sweep round was seen claiming an orphan";
    double left = without_owner();
    for (int i = 0; i < 100 && left != 0; ++i) {
        std::this_thread::sleep_for(100ms);
        left = without_owner();
    }
    EXPECT_EQ(left, 0) << "sessions still without an owner";
    for (auto& w : workers) {
        if (w->id() != victim) {
            EXPECT_EQ(w->stop(), 0);
        }
    }
}

}  // namespace

TEST(Fleet, AWorkerKilledOnPostgresIsReplacedWithoutAnyRequest) {
    scratch_database db("wuhu_failover");
    worker_process::config pg;
    pg.store = db.url();
    ownership::postgres_lease leases({.dsn = db.dsn(), .schema = "wuhu", .test_clock = {}});
    kill_one_of_three("postgres", pg, leases);
}

// The same with the workers of one host sharing a SQLite data directory (the catalog's leases).
TEST(Fleet, AWorkerKilledOnSqliteIsReplacedByAnotherOfItsHostWithoutAnyRequest) {
    temp_dir shared;
    const auto local = sharing(shared.path() / "data");
    std::filesystem::create_directories(local.data_dir);
    ownership::sqlite_lease leases(local.data_dir);
    kill_one_of_three("sqlite", local, leases);
}

namespace {

// Two workers of one host (a shared SQLite data directory, leases of `ttl_ms`); the session
// `s` is made by A alone (A owns it), then B starts. Returns once B answers, and once B has
// (almost surely) forwarded a request to A and seen A acknowledge it: only the forwards to an
// owner known to acknowledge them are watched (a worker of an earlier release never does).
struct owner_and_other {
    static constexpr int ttl_ms = 3000;
    temp_dir shared;
    worker_process a;
    worker_process b;
    nats::connection nc{nats_url(), "fwdack-client"};

    explicit owner_and_other(const std::string& tag)
        : a("A", slow_script, fleet_member(in(shared), "A", tag, ttl_ms)),
          b("B", slow_script, fleet_member(in(shared), "B", tag, ttl_ms)) {
        a.start();
        EXPECT_EQ(answer_when_up(nc, subject("enqueue"), enqueue_body("i0")).at("ok"), true);
        b.start();
        EXPECT_TRUE(answer_when_up(nc, b.direct("warm", "subscribe")).is_object());
        // The queue group gives each of these to A or B at random: B forwards some to A.
        for (int i = 0; i < 16; ++i) {
            EXPECT_EQ(answer_when_up(nc, subject("enqueue"), enqueue_body("w" + std::to_string(i)))
                          .at("ok"),
                      true);
        }
    }
    std::string subject(const char* verb) const { return a.prefix() + ".session.s." + verb; }
    static worker_process::config in(const temp_dir& d) {
        auto c = sharing(d.path() / "data");
        std::filesystem::create_directories(c.data_dir);
        return c;
    }
};

}  // namespace

// Issue 31, defect 16: a worker that took a request of a session whose owner had just died
// forwarded it to that owner, where it was lost: its client waited its whole timeout (here
// 15 s; no reply at all) although the owner's lease expired within 3 s. The owner now
// acknowledges each forward as it takes it; an unacknowledged forward has the owner's lease
// watched and is routed again (served by the forwarding worker) once that lease expired.
TEST(Fleet, ARequestForwardedToAnOwnerThatDiedIsServedOnceItsLeaseExpires) {
    owner_and_other f("wuhu_fwddead");
    f.a.crash();  // every request now reaches B, which forwards it to A's lease
    std::this_thread::sleep_for(300ms);  // nats-server has dropped A's subscriptions
    const auto sent = std::chrono::steady_clock::now();
    auto r = f.nc.request(f.subject("enqueue"), enqueue_body("i1"), 15s);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count();
    ASSERT_TRUE(r.has_value()) << "the forward to the dead owner was lost";
    EXPECT_TRUE(ok(json::parse(*r))) << *r;
    std::cout << "a request forwarded to a dead owner answered after " << ms << " ms (ttl "
              << owner_and_other::ttl_ms << " ms)\n";
    EXPECT_LE(ms, owner_and_other::ttl_ms + 2000.0) << "served once the lease expired";
    auto read = answer_when_up(f.nc, f.subject("subscribe"));
    ASSERT_TRUE(ok(read)) << json::serialize(read);
    EXPECT_TRUE(item_ids(read).contains("i0") && item_ids(read).contains("i1"));
    const auto scrape = worker_http(f.b.log(), "/metrics").body;
    EXPECT_GE(metric_value(scrape, "wuhu_forwards_rerouted_total"), 1) << scrape;
    EXPECT_EQ(f.b.stop(), 0);
}

// Issue 31 (never tested): an owner whose epoch the store refuses, although its lease keeper
// still held the lease (here the test opens the session at the next epoch behind its back),
// counts it in wuhu_lease_events_total{event="fenced"}, drops that lease (lost) and routes
// the request again: it takes the lease anew and answers, and nothing acknowledged is lost.
TEST(Fleet, AnEpochTheStoreRefusesIsCountedAsFencedAndTheRequestIsRoutedAgain) {
    temp_dir shared;
    const auto local = owner_and_other::in(shared);
    worker_process a("A", slow_script, fleet_member(local, "A", "wuhu_fencing", 3000));
    a.start();
    nats::connection nc(nats_url(), "fencing-client");
    const auto subject = a.prefix() + ".session.s.";
    ASSERT_EQ(answer_when_up(nc, subject + "enqueue", enqueue_body("e1")).at("ok"), true);
    ASSERT_TRUE(wait_idle(nc, subject + "subscribe"));
    const auto sid = session::session_id::parse("s").value();
    ownership::sqlite_lease leases(local.data_dir);
    auto held = leases.owner_of(sid);
    ASSERT_TRUE(held && *held) << "A holds the session's lease";
    {
        storage::sqlite_store behind(storage::sqlite_options{local.data_dir});
        ASSERT_TRUE(behind.open(sid, session::lease_epoch{(*held)->epoch.value + 1},
                                storage::open_mode::existing));
    }
    auto e2 = answer_when_up(nc, subject + "enqueue", enqueue_body("e2"));
    EXPECT_EQ(e2.at("ok"), true) << json::serialize(e2);
    const auto scrape = worker_http(a.log(), "/metrics").body;
    EXPECT_GE(metric_value(scrape, R"(wuhu_lease_events_total{event="fenced"})"), 1) << scrape;
    EXPECT_GE(metric_value(scrape, R"(wuhu_lease_events_total{event="lost"})"), 1) << scrape;
    ASSERT_TRUE(wait_idle(nc, subject + "subscribe"));
    auto read = answer_when_up(nc, subject + "subscribe");
    ASSERT_TRUE(ok(read)) << json::serialize(read);
    EXPECT_EQ(item_ids(read), (std::set<std::string>{"e1", "e2"}));
    EXPECT_EQ(a.stop(), 0);
}

// The same with the owner frozen (SIGSTOP) rather than dead: nats-server still hands it its
// share of the queue group's requests (lost until it resumes), but every request B takes is
// answered once A's lease expired, and none is lost or applied twice: A, resumed, routes what
// it took to B, and what B routed again A never serves. The items carry no id (a request
// applied twice would show as two items).
TEST(Fleet, RequestsForwardedToAFrozenOwnerAreServedOnceItsLeaseExpires) {
    owner_and_other f("wuhu_fwdfrozen");
    // Frozen between turns (frozen inside a commit, it would hold the session file's write
    // lock, and nobody could write the session until it woke up: SQLite's rule on one host).
    ASSERT_TRUE(wait_idle(f.nc, f.subject("subscribe")));
    f.a.signal(SIGSTOP);
    const auto frozen = std::chrono::steady_clock::now();
    constexpr int n = 12;
    std::vector<double> answered_ms(n, -1);
    std::vector<std::string> replies(n);
    std::vector<std::thread> clients;
    for (int i = 0; i < n; ++i) {
        clients.emplace_back([&, i] {
            auto r = f.nc.request(f.subject("enqueue"),
                                  R"({"lane":"followUp","content":"f)" + std::to_string(i) + "\"}",
                                  20s);
            if (r) {
                replies[i] = *r;
                answered_ms[i] = std::chrono::duration<double, std::milli>(
                                     std::chrono::steady_clock::now() - frozen)
                                     .count();
            }
        });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(owner_and_other::ttl_ms + 3000));
    f.a.signal(SIGCONT);
    for (auto& c : clients) {
        c.join();
    }
    int early = 0;
    for (int i = 0; i < n; ++i) {
        EXPECT_GE(answered_ms[i], 0) << "request " << i << " was lost";
        EXPECT_TRUE(ok(json::parse(replies[i].empty() ? "null" : replies[i])))
            << replies[i] << " at " << answered_ms[i];
        early += answered_ms[i] >= 0 && answered_ms[i] <= owner_and_other::ttl_ms + 2000.0;
    }
    std::cout << early << " of " << n << " requests answered within ttl + 2 s of the freeze\n";
    EXPECT_GE(early, 1) << "the requests B took waited for A to resume";
    // Those answered early are exactly those B routed again (A's own were answered after it
    // resumed).
    const auto scrape = worker_http(f.b.log(), "/metrics").body;
    EXPECT_EQ(metric_value(scrape, "wuhu_forwards_rerouted_total"), early) << scrape;
    auto read = answer_when_up(f.nc, f.subject("subscribe"));
    ASSERT_TRUE(ok(read)) << json::serialize(read);
    std::map<std::string, std::set<std::string>> ids_of;  // content -> item ids
    for (const auto& f : read.at("patch").at("journal").at("followUp").as_array()) {
        if (const auto* item = f.as_object().if_contains("item")) {
            ids_of[json::value_to<std::string>(item->at("content"))].insert(
                json::value_to<std::string>(item->at("id")));
        }
    }
    for (const auto& e : read.at("patch").at("transcript").as_array()) {
        if (e.as_object().contains("item") && e.as_object().contains("content")) {
            ids_of[json::value_to<std::string>(e.at("content"))].insert(
                json::value_to<std::string>(e.at("item")));
        }
    }
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(ids_of["f" + std::to_string(i)].size(), 1u)
            << "f" << i << " applied " << ids_of["f" + std::to_string(i)].size() << " times";
    }
    EXPECT_EQ(f.a.stop(), 0);
    EXPECT_EQ(f.b.stop(), 0);
}

namespace {

// A fencing test (issue 13), on the store `base` names: worker A streams a long answer; it is
// frozen (SIGSTOP) past its lease; B takes the session over and answers; A is resumed. From
// then on A publishes no stream delta (it stops streaming at its lease's deadline, before it
// even asks the store), every write it attempts is refused by the store (its epoch is fenced),
// it serves nothing stale, and the final transcript holds nothing of A after the takeover,
// but the interruption that says the owner changed.
void freeze_the_owner(const worker_process::config& base) {
    std::string chunks;
    for (int i = 0; i < 60; ++i) {
        chunks += (i ? "," : "") + std::string("\"aa\"");
    }
    const std::string slow_a = R"({"responses":[{"chunks":[)" + chunks +
                               R"(],"chunk_delay_ms":50}]})";
    const std::string quick_b =
        R"({"responses":[{"text":"from b"},{"text":"from b"},{"text":"from b"}]})";
    auto config = [&](const std::string& id) {
        return fleet_member(base, id, "wuhu_frozen", 800);
    };
    worker_process a("frozena", slow_a, config("A"));
    worker_process b("frozenb", quick_b, config("B"));
    a.start();
    b.start();
    nats::connection nc(nats_url(), "frozen-client");
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<std::chrono::steady_clock::time_point, std::string>> deltas;
    nc.subscribe(a.prefix() + ".events.f.delta", [&](nats::message m) {
        auto v = json::parse(m.data);
        std::lock_guard lock(mu);
        if (const auto* t = v.as_object().if_contains("text")) {
            deltas.emplace_back(std::chrono::steady_clock::now(), json::value_to<std::string>(*t));
        }
        cv.notify_all();
    });
    nc.flush();
    ASSERT_EQ(answer_when_up(nc, b.direct("warmup", "subscribe")).at("ok"), true);
    ASSERT_EQ(answer_when_up(nc, a.direct("f", "enqueue"), enqueue_body("q1")).at("ok"), true);
    {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 20s, [&] { return !deltas.empty(); })) << "A never streamed";
    }
    a.signal(SIGSTOP);
    std::this_thread::sleep_for(2s);  // past the 800 ms lease
    auto q2 = answer_when_up(nc, b.direct("f", "enqueue"), enqueue_body("q2"));
    ASSERT_EQ(q2.at("ok"), true) << json::serialize(q2) << ": B takes the session over";
    ASSERT_TRUE(wait_idle(nc, b.direct("f", "subscribe")));
    const auto resumed = std::chrono::steady_clock::now();
    a.signal(SIGCONT);
    std::this_thread::sleep_for(1500ms);  // A's stream would have gone on for 1.5 s more
    {
        std::lock_guard lock(mu);
        int late = 0;
        for (const auto& [at, text] : deltas) {
            late += at > resumed && text == "aa";
        }
        EXPECT_EQ(late, 0) << "A streamed after it was resumed";
    }
    EXPECT_TRUE(a.has_logged("lease of session f lost")) << "A gave the session up";
    // A write sent to A: A must not take it under its old lease (it forwards it to B, or the
    // client is told to retry), and a read from A is never its old state.
    auto q3 = answer_when_up(nc, a.direct("f", "enqueue"), enqueue_body("q3"));
    const bool q3_taken = ok(q3);
    EXPECT_TRUE(q3_taken || code_of(q3) == "owner_changed" || code_of(q3) == "unavailable")
        << json::serialize(q3);
    auto read = answer_when_up(nc, a.direct("f", "subscribe"));
    if (ok(read)) {
        EXPECT_TRUE(item_ids(read).contains("q2")) << "A served its old state";
    }
    ASSERT_TRUE(wait_idle(nc, b.direct("f", "subscribe")));
    auto final = answer_when_up(nc, b.direct("f", "subscribe"));
    ASSERT_TRUE(ok(final)) << json::serialize(final);
    int from_a = 0;
    int owner_lost = 0;
    for (const auto& e : final.at("patch").at("transcript").as_array()) {
        if (e.at("type") == "assistant_message") {
            from_a += e.at("text").as_string().starts_with("aa");
        }
        owner_lost += e.at("type") == "interruption" && e.at("kind") == "owner_lost";
    }
    EXPECT_EQ(from_a, 0) << "an entry of A after the takeover";
    EXPECT_EQ(owner_lost, 1) << "the takeover is in the transcript";
    const auto items = item_ids(final);
    EXPECT_TRUE(items.contains("q1") && items.contains("q2")) << json::serialize(final);
    EXPECT_EQ(items.contains("q3"), q3_taken) << "what was acknowledged, and only that";
    // The lease events, counted (issue 31: never tested): A lost its lease; B renewed its own
    // (every 267 ms) and took A's over.
    const auto a_scrape = worker_http(a.log(), "/metrics").body;
    EXPECT_GE(metric_value(a_scrape, R"(wuhu_lease_events_total{event="lost"})"), 1) << a_scrape;
    const auto b_scrape = worker_http(b.log(), "/metrics").body;
    EXPECT_GE(metric_value(b_scrape, R"(wuhu_lease_events_total{event="renewed"})"), 1);
    EXPECT_GE(metric_value(b_scrape, R"(wuhu_lease_events_total{event="acquired"})"), 1);
    EXPECT_EQ(a.stop(), 0);
    EXPECT_EQ(b.stop(), 0);
}

}  // namespace

// Issue 31, defect 1: the owner of a session streaming a 20-chunk answer is killed after 8
// chunks; the other worker takes the session over and streams the answer again from its first
// chunk. `wuhuctl watch` printed the old owner's 8 chunks, the interruption, then the last 12
// (it took the new owner's message.start for a repeat and its first 8 deltas for
// duplicates), and the client library's watch did the same. Now both show the new owner's
// answer whole, after the old one's partial text and the interruption.
TEST(Fleet, AWatcherSeesTheAnswerWholeWhenANewOwnerStreamsItAgain) {
    static const char* words[] = {"Alpha",   "bravo", "charlie", "delta",   "echo",
                                  "foxtrot", "golf",  "hotel",   "india",   "juliet",
                                  "kilo",    "lima",  "mike",    "november", "oscar",
                                  "papa",    "quebec", "romeo",  "sierra",  "tango."};
    json::array chunks;
    std::string answer;
    for (int i = 0; i < 20; ++i) {
        const std::string chunk = std::string(words[i]) + (i < 19 ? " " : "");
        chunks.emplace_back(chunk);
        answer += chunk;
    }
    const std::string script = json::serialize(json::object{
        {"responses", json::array{json::object{{"chunks", chunks}, {"chunk_delay_ms", 100}}}}});
    temp_dir shared;
    worker_process a("restreama", script,
                     fleet_member(sharing(shared.path()), "A", "wuhu_restream", 1000));
    worker_process b("restreamb", script,
                     fleet_member(sharing(shared.path()), "B", "wuhu_restream", 1000));
    a.start();
    nats::connection nc(nats_url(), "restream-client");
    ASSERT_EQ(answer_when_up(nc, a.direct("demo", "configure")).at("ok"), true);
    b.start();
    ASSERT_EQ(answer_when_up(nc, b.direct("warmup", "subscribe")).at("ok"), true);
    // wuhuctl watch, a process of its own.
    const auto ctl_log = (shared.path() / "watch.log").string();
    const pid_t ctl = spawn(WUHUCTL_BIN,
                            {"--nats", nats_url(), "--prefix", a.prefix(), "watch", "demo",
                             "--until-idle", "--timeout", "60"},
                            spawn_options{ctl_log + ".err", std::nullopt, ctl_log});
    // The client library's watch: each message's text as delivered, and the committed answer.
    client::options co;
    co.prefix = a.prefix();
    client::client lib(nc, co);
    auto w = client::watch::open(lib, "demo");
    ASSERT_TRUE(w) << w.error().code;
    std::vector<std::string> messages;  // each message.start begins one
    std::vector<std::string> discarded;
    std::string committed;
    client::watch::handlers h;
    h.on_delta = [&](const json::object& d) {
        if (d.at("type") == "message.start") {
            messages.emplace_back();
        } else if (d.at("type") == "text.delta" && !messages.empty()) {
            messages.back() += d.at("text").as_string();
        } else if (d.at("type") == "message.discard" && !messages.empty()) {
            discarded.push_back(messages.back());
        }
    };
    h.on_patch = [&](const json::object& p) {
        for (const auto& e : p.at("transcript").as_array()) {
            if (e.at("type") == "assistant_message") {
                committed = e.at("text").as_string();
            }
        }
    };
    std::this_thread::sleep_for(300ms);  // wuhuctl has subscribed
    ASSERT_EQ(answer_when_up(nc, a.direct("demo", "enqueue"), enqueue_body("q1")).at("ok"), true);
    // Eight chunks streamed by A, then A is killed.
    const auto until = std::chrono::steady_clock::now() + 30s;
    while ((messages.empty() || !messages.back().starts_with("Alpha bravo charlie delta echo "
                                                             "foxtrot golf hotel")) &&
           std::chrono::steady_clock::now() < until) {
        auto got = (*w)->next(std::chrono::steady_clock::now() + 100ms, h);
        ASSERT_TRUE(got) << got.error().code;
    }
    ASSERT_FALSE(messages.empty()) << "A never streamed";
    a.crash();
    while (committed.empty() && std::chrono::steady_clock::now() < until + 30s) {
        auto got = (*w)->next(std::chrono::steady_clock::now() + 100ms, h);
        ASSERT_TRUE(got) << got.error().code;
    }
    EXPECT_EQ(committed, answer) << "B answered";
    ASSERT_GE(messages.size(), 2u) << "B's message was delivered as a message of its own";
    EXPECT_EQ(messages.back(), answer) << "B's message, whole";
    EXPECT_EQ(discarded.size(), messages.size() - 1) << "A's message was discarded";
    EXPECT_EQ(wait_exit(ctl, 60s), 0) << "wuhuctl watch --until-idle";
    std::ifstream f(ctl_log);
    std::string line;
    std::vector<std::string> lines;
    while (std::getline(f, line)) {
        lines.push_back(line);
    }
    const std::string whole = "assistant: " + answer;
    EXPECT_NE(std::find(lines.begin(), lines.end(), whole), lines.end())
        << "wuhuctl printed the answer whole, on a line of its own";
    bool interrupted = false;
    for (const auto& l : lines) {
        interrupted |= l.starts_with("-- interrupted:");
        if (l.starts_with("assistant")) {
            EXPECT_TRUE(l.starts_with("assistant: Alpha"))
                << "a line that is no answer's start: " << l;
        }
    }
    EXPECT_TRUE(interrupted) << "the takeover was printed";
    if (::testing::Test::HasFailure()) {
        std::cerr << "wuhuctl watch printed:\n";
        for (const auto& l : lines) {
            std::cerr << l << "\n";
        }
    }
    EXPECT_EQ(b.stop(), 0);
}

// Issue 31, defect 3: `abort` answered {"ok":true} whatever it did. Sent with wuhuctl to a
// fleet of two workers (either may take it; the owner answers), it says what it stopped and
// which entry records it; a retry with its id gets the same answer and stops nothing more.
TEST(Fleet, AnAbortAcrossTheFleetSaysWhatItStopped) {
    const std::string script = R"({"responses":[
        {"chunks":["a","b","c","d","e","f","g","h"],"chunk_delay_ms":250}]})";
    temp_dir shared;
    worker_process a("aborta", script,
                     fleet_member(sharing(shared.path()), "A", "wuhu_abort", 1000));
    worker_process b("abortb", script,
                     fleet_member(sharing(shared.path()), "B", "wuhu_abort", 1000));
    a.start();
    b.start();
    nats::connection nc(nats_url(), "abort-client");
    ASSERT_EQ(answer_when_up(nc, a.direct("demo", "enqueue"), enqueue_body("q1")).at("ok"), true);
    ASSERT_EQ(answer_when_up(nc, b.direct("warmup", "subscribe")).at("ok"), true);
    auto ctl = [&](const std::vector<std::string>& args, const std::string& name) {
        return wuhuctl(nats_url(), a.prefix(), args, shared.path() / name);
    };
    client::options co;
    co.prefix = a.prefix();
    client::client lib(nc, co);
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (lib.subscribe("demo").value().at("status").at("state") != "inferring" &&
           std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(50ms);
    }
    const auto first = json::parse(ctl(
        {"--json", "abort", "demo", "--reason", "user pressed stop", "--id", "stop-1"}, "first"));
    EXPECT_EQ(first.at("stopped"), "inference") << first;
    EXPECT_EQ(first.at("entry"), 2) << first;
    // The next turn; the retry of the first abort answers the same and stops nothing.
    ASSERT_EQ(lib.enqueue("demo", "followUp", "again", std::nullopt, "q2").value(), "q2");
    const auto retry = json::parse(ctl(
        {"--json", "abort", "demo", "--reason", "user pressed stop", "--id", "stop-1"}, "retry"));
    EXPECT_EQ(retry.at("stopped"), "inference") << retry;
    EXPECT_EQ(retry.at("entry"), 2) << retry;
    EXPECT_EQ(retry.at("duplicate"), true) << retry;
    json::object sub;
    while (std::chrono::steady_clock::now() < until + 20s) {
        sub = lib.subscribe("demo").value();
        if (sub.at("status").at("has_work") == false) {
            break;
        }
        std::this_thread::sleep_for(50ms);
    }
    const auto& entries = sub.at("patch").at("transcript").as_array();
    ASSERT_EQ(entries.size(), 4u) << sub;
    EXPECT_EQ(entries[1].at("type"), "interruption");
    EXPECT_EQ(entries[1].at("stopped"), "inference");
    EXPECT_EQ(entries[1].at("abort_id"), "stop-1");
    // (The script answers by step, and the aborted turn added no answer: step 0's again.)
    EXPECT_EQ(entries[3].at("text"), "abcdefgh") << "the retry stopped nothing";
    // Nothing in progress: wuhuctl says so.
    EXPECT_EQ(ctl({"abort", "demo"}, "idle"), "nothing to stop: no turn was in progress\n");
    EXPECT_EQ(a.stop(), 0);
    EXPECT_EQ(b.stop(), 0);
}

TEST(Fleet, AFrozenOwnerOnSqliteIsFencedAndStopsStreamingWhenResumed) {
    temp_dir shared;
    freeze_the_owner(sharing(shared.path() / "data"));
}

TEST(Fleet, AFrozenOwnerOnPostgresIsFencedAndStopsStreamingWhenResumed) {
    scratch_database db("wuhu_frozen");
    worker_process::config pg;
    pg.store = db.url();
    freeze_the_owner(pg);
}

// Defect: an owner's admin.local answer listed every loaded session in one message; past the
// max payload the publish failed silently, the fleet view took 2 s per owner, and its rows
// read "unowned" with an owner set; a filter on "unowned" was refused. Here the server's max
// payload is 8 KiB, so 150 sessions overflow it as 10,000 overflowed 1 MiB: every level pages.
TEST(Fleet, TheFleetViewPagesAtEveryLevelAndShowsEveryRowState) {
    own_nats nats({}, "max_payload: 8192");
    ASSERT_TRUE(nats.up()) << "nats-server did not start on port " << nats.port();
    const std::string url = nats.url();

    temp_dir shared;
    // Leases that outlive the test: B's, while it is frozen, however long the fleet view's
    // clients wait for the requests the queue group hands B (its leases expiring would empty
    // the page of its sessions); A's, after it is killed.
    auto config = [&](const std::string& id) {
        return fleet_member(sharing(shared.path() / "data"), id, "wuhu_fleet", 60000);
    };
    // A turn infers for 1 s; then a session of a small context compacts for 4 s, another runs
    // its tool for 4 s (each loop state lasts long enough to be seen in the fleet view).
    const std::string busy_script = R"({"responses":[
        {"text":"working )" + std::string(120, '.') + R"(","delay_ms":1000,"usage":{"input":950},
         "tool_calls":[{"name":"sleep","arguments":{"ms":4000}}]},
        {"text":"done"}],
        "summary_delay_ms":4000})";
    worker_process a("fleeta", busy_script, config("A"));
    worker_process b("fleetb", busy_script, config("B"));
    a.start(url);
    b.start(url);
    nats::connection nc(url, "fleet-client");
    ASSERT_EQ(answer_when_up(nc, a.direct("warma", "subscribe")).at("ok"), true);
    ASSERT_EQ(answer_when_up(nc, b.direct("warmb", "subscribe")).at("ok"), true);
    // 150 sessions, owned alternately by A and B; every third one paused.
    constexpr int n = 150;
    auto sid = [](int i) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "fv%03d", i);
        return std::string(buf);
    };
    burst b1(nc);
    std::vector<std::pair<std::string, std::string>> creating;
    for (int i = 0; i < n; ++i) {
        const auto& owner = i % 2 == 0 ? a : b;
        creating.emplace_back(owner.direct(sid(i), "configure"), "{}");
    }
    for (const auto& r : send_all(b1, creating, 60s)) {
        ASSERT_TRUE(ok(r)) << json::serialize(r);
    }
    std::vector<std::pair<std::string, std::string>> pausing;
    for (int i = 0; i < n; i += 3) {
        pausing.emplace_back((i % 2 == 0 ? a : b).direct(sid(i), "pause"), "{}");
    }
    for (const auto& r : send_all(b1, pausing, 60s)) {
        ASSERT_TRUE(ok(r)) << json::serialize(r);
    }

    client::client c(nc, client::options{a.prefix(), 30s, {}});
    // Every page of a query, in order.
    auto all_pages = [&](json::object query, std::size_t* pages = nullptr) {
        std::vector<json::object> rows;
        for (int guard = 0; guard < 100; ++guard) {
            auto page = c.sessions(query);
            EXPECT_TRUE(page) << page.error().code << ": " << page.error().message;
            if (!page) {
                break;
            }
            for (const auto& r : page->at("sessions").as_array()) {
                rows.push_back(r.as_object());
            }
            if (pages != nullptr) {
                ++*pages;
            }
            if (!page->contains("next")) {
                break;
            }
            query["after"] = page->at("next");
        }
        return rows;
    };
    std::size_t pages = 0;
    auto rows = all_pages(json::object{{"limit", 40}}, &pages);
    EXPECT_GE(pages, 4u);
    std::vector<std::string> ids;
    for (const auto& r : rows) {
        if (r.at("id").as_string().starts_with("fv")) {
            ids.push_back(json::value_to<std::string>(r.at("id")));
            const int i = std::stoi(ids.back().substr(2));
            EXPECT_EQ(r.at("owner"), i % 2 == 0 ? "A" : "B") << ids.back();
            EXPECT_EQ(r.at("state"), "idle") << json::serialize(r);
            EXPECT_EQ(r.at("paused"), i % 3 == 0) << json::serialize(r);
            EXPECT_TRUE(r.contains("lanes")) << json::serialize(r);
        }
    }
    ASSERT_EQ(ids.size(), static_cast<std::size_t>(n)) << "every session once";
    EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
    EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), ids.size());
    // Filters: every state a row can show is accepted; the owner filter asks one owner.
    EXPECT_EQ(all_pages(json::object{{"state", "idle"}, {"limit", 1000}}).size(),
              static_cast<std::size_t>(n));
    EXPECT_EQ(all_pages(json::object{{"owner", "A"}}).size(), static_cast<std::size_t>(n / 2));
    for (const char* state : {"preparing", "inferring", "executing_tools", "compacting", "unloaded",
                              "unowned", "unreachable"}) {
        auto page = c.sessions(json::object{{"state", state}});
        ASSERT_TRUE(page) << state << ": " << page.error().message;
        EXPECT_TRUE(page->at("sessions").as_array().empty()) << state << json::serialize(*page);
    }
    // Each loop state a turn goes through shows, in the row and through its filter. (Issue 31:
    // the busy states were only ever checked to give empty pages.)
    auto shows = [&](const std::string& id, const char* state) {
        const auto until = std::chrono::steady_clock::now() + 20s;
        while (std::chrono::steady_clock::now() < until) {
            auto page = c.sessions(json::object{{"state", state}});
            if (page) {
                for (const auto& r : page->at("sessions").as_array()) {
                    if (r.at("id") == id.c_str()) {
                        return r.at("state") == state;
                    }
                }
            }
            std::this_thread::sleep_for(50ms);
        }
        return false;
    };
    ASSERT_EQ(answer_when_up(nc, a.direct("busyx", "enqueue"), enqueue_body("x1")).at("ok"), true);
    EXPECT_TRUE(shows("busyx", "inferring"));
    EXPECT_TRUE(shows("busyx", "executing_tools"));
    ASSERT_EQ(answer_when_up(nc, b.direct("busyy", "configure"),
                             R"({"context_limit":1000,"compaction_buffer":100,)"
                             R"("keep_recent_tokens":20})")
                  .at("ok"),
              true);
    ASSERT_EQ(answer_when_up(nc, b.direct("busyy", "enqueue"),
                             R"({"lane":"followUp","id":"y1","content":")" +
                                 std::string(200, 'y') + "\"}")
                  .at("ok"),
              true);
    EXPECT_TRUE(shows("busyy", "compacting")) << "owned by B: A asks B for it";
    // B frozen: its sessions show as unreachable (A asks, and B does not answer in 500 ms), and
    // the reply names it.
    b.signal(SIGSTOP);
    client::client quick(nc, client::options{a.prefix(), 2s, {}});
    // (The queue group may give a request to B: it is asked again.)
    auto ask = [&](const json::object& q) {
        auto r = quick.sessions(q);
        for (int i = 0; i < 10 && !r; ++i) {
            r = quick.sessions(q);
        }
        return r;
    };
    auto frozen = ask(json::object{{"owner", "B"}, {"limit", 5}});
    auto by_state = ask(json::object{{"state", "idle"}, {"limit", 5}});
    b.signal(SIGCONT);
    ASSERT_TRUE(frozen) << frozen.error().message;
    ASSERT_FALSE(frozen->at("sessions").as_array().empty()) << json::serialize(*frozen);
    for (const auto& r : frozen->at("sessions").as_array()) {
        EXPECT_EQ(r.at("state"), "unreachable") << json::serialize(r);
    }
    ASSERT_TRUE(by_state) << by_state.error().message;
    ASSERT_TRUE(by_state->contains("unreachable")) << json::serialize(*by_state);
    EXPECT_EQ(by_state->at("unreachable"), (json::array{"B"})) << json::serialize(*by_state);
    for (const auto& r : by_state->at("sessions").as_array()) {
        EXPECT_EQ(r.at("owner"), "A") << "only A's loaded sessions answer: " << json::serialize(r);
    }
    // B leaves: its sessions have no live lease, and show so.
    EXPECT_EQ(b.stop(), 0);
    auto unowned = all_pages(json::object{{"state", "unowned"}, {"limit", 30}});
    std::size_t of_b = 0;
    for (const auto& r : unowned) {
        EXPECT_FALSE(r.contains("owner")) << json::serialize(r);
        of_b += r.at("id").as_string().starts_with("fv");
    }
    EXPECT_EQ(of_b, static_cast<std::size_t>(n / 2));
    // A killed and started again: its sessions' leases (live for a minute) name A, and the new
    // A has none of them loaded: they show `unloaded` (issue 31: never shown) until a request
    // loads one.
    a.crash();
    a.start(url);
    ASSERT_EQ(answer_when_up(nc, a.direct("warmc", "subscribe")).at("ok"), true);
    auto unloaded = all_pages(json::object{{"state", "unloaded"}, {"limit", 30}});
    std::size_t of_a = 0;
    for (const auto& r : unloaded) {
        EXPECT_EQ(r.at("owner"), "A") << json::serialize(r);
        EXPECT_EQ(r.at("state"), "unloaded") << json::serialize(r);
        of_a += r.at("id").as_string().starts_with("fv");
    }
    EXPECT_EQ(of_a, static_cast<std::size_t>(n / 2));
    EXPECT_EQ(a.stop(), 0);
}

}  // namespace wuhu::testing
