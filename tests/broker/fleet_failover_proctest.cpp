// The fleet driven from outside (see fleet_proctest.cpp): real wuhu-worker processes, a real
// nats-server, the signals an operator or a crash sends.
// Here: failover. A worker of three killed mid-turn and replaced without any request, requests
// forwarded to an owner that died or froze, an epoch the store refuses.
#include "tests/broker/fleet.hpp"

namespace wuhu::testing {

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

}  // namespace wuhu::testing
