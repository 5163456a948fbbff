// The fleet driven from outside, as its users drive it: real wuhu-worker processes (the
// AddressSanitizer build under scripts/test) on one SQLite data directory or one PostgreSQL
// database, a real nats-server, and the signals an operator or a crash sends (SIGSTOP/SIGCONT,
// SIGKILL). Each test here is the regression test of a defect found that way, or the "done
// when" of an issue.
#include "tests/broker/fleet.hpp"

namespace wuhu::testing {

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
    nats::connection nc(nats_url(), "full-disk");
    std::set<std::string> acked;
    // First on a roomy disk: the catalog's migrations, each session's file and lease, one item
    // each. A clean stop checkpoints every WAL away, so the full disk below starts with none:
    // its first writes succeed whatever the order the worker makes them in (a catalog WAL of
    // migrations was most of the limit, and a slow machine sometimes filled it before any
    // session's commit).
    worker_process::config roomy;
    roomy.data_dir = shared.path() / "data";
    worker_process before("full", slow_script, roomy);
    before.start();
    for (int s = 0; s < 4; ++s) {
        const std::string sid = "full" + std::to_string(s);
        auto r = answer_when_up(nc, before.prefix() + ".session." + sid + ".enqueue",
                                enqueue_body("first"));
        ASSERT_EQ(r.at("ok"), true) << json::serialize(r);
        acked.insert(sid + "/" + json::value_to<std::string>(r.at("id")));
    }
    ASSERT_EQ(before.stop(), 0);

    worker_process::config full = roomy;
    full.prefix = before.prefix();
    // Files may not grow past this: writes soon fail (the catalog's WAL passes it within a few
    // dozen commits of 4 KiB pages, a session's within a hundred of 1 KiB pages).
    full.max_file_bytes = 128 * 1024;
    worker_process worker("full", slow_script, full);
    worker.start();
    ASSERT_EQ(answer_when_up(nc, worker.prefix() + ".session.warmup.subscribe").at("ok"), true);
    burst b(nc);
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

}  // namespace wuhu::testing
