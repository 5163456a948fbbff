// The fleet under chaos (issue 31, defect 16): three wuhu-worker processes on PostgreSQL
// leases (TTL 2 s), a nats-server and a PostgreSQL server of the test's own, and clients that
// keep enqueueing into every session. Twice over: a worker is killed (SIGKILL) and restarted
// (at once, then after its leases expired),
// another is frozen (SIGSTOP) past its leases and resumed, nats-server is killed and restarted,
// PostgreSQL is stopped and restarted. Every acknowledged item is found in its session at the
// end, and the time until each session whose owner died is served again (acknowledges a new
// item) is printed as percentiles, with the time until every session is served again after
// each server restart.
//
// The goal the issue sets, p99 <= TTL + 2 s, is measured here and printed (docs/operations.md
// has the figures and where the time goes); the test asserts only a bound far above it (every
// orphan served within 4 TTL), so that a slow machine (the AddressSanitizer build on 2 cores)
// does not fail a correct fleet, while a session left unserved still does. The regression
// tests of what this run found are in fleet_proctest.cpp (`…ForwardedTo…`): a forward to an
// owner that died or froze was lost until its client's timeout.
#include "client/client.hpp"
#include "ownership/postgres_lease.hpp"
#include "tests/support/own_postgres.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

constexpr int ttl_ms = 2000;
constexpr int sessions = 12;

std::string sid(int i) { return "ch" + std::to_string(i); }

double ms_between(steady::time_point a, steady::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// One client per session: enqueues an item, and again with the same id until it is
// acknowledged (a retry is idempotent), then the next; each request waits at most 1 s (a
// client's own timeout: a request lost with a worker that died or froze after it took it, or
// with nats-server, costs its client that much whatever the fleet does). Records every
// acknowledged id and when each acknowledged request was sent and answered.
class prober {
  public:
    struct ack {
        steady::time_point sent;
        steady::time_point answered;
    };

    prober(nats::connection& nc, std::string subject, std::string session)
        : nc_(nc), subject_(std::move(subject)), session_(std::move(session)) {}

    void start() {
        thread_ = std::thread([this] { run(); });
    }
    void stop() {
        stop_ = true;
        if (thread_.joinable()) {
            thread_.join();
        }
    }
    // The first acknowledgement of a request sent at or after `t`.
    std::optional<steady::time_point> served_after(steady::time_point t) const {
        std::lock_guard lock(mu_);
        for (const auto& a : acks_) {
            if (a.sent >= t) {
                return a.answered;
            }
        }
        return std::nullopt;
    }
    std::set<std::string> acknowledged() const {
        std::lock_guard lock(mu_);
        return acknowledged_;
    }
    int unanswered() const { return unanswered_; }

  private:
    void run() {
        int n = 0;
        while (!stop_) {
            const std::string id = session_ + "-" + std::to_string(n);
            const auto body =
                R"({"lane":"followUp","id":")" + id + R"(","content":"item )" + id + "\"}";
            const auto sent = steady::now();
            auto r = nc_.request(subject_, body, 1s);
            const auto answered = steady::now();
            bool acked = false;
            if (r) {
                try {
                    auto v = json::parse(*r);
                    acked = v.is_object() && v.as_object().contains("ok") && v.at("ok") == true;
                } catch (const std::exception&) {
                }
            } else {
                ++unanswered_;
            }
            if (acked) {
                std::lock_guard lock(mu_);
                acks_.push_back({sent, answered});
                acknowledged_.insert(id);
                ++n;
            }
            std::this_thread::sleep_for(acked ? 150ms : 50ms);
        }
    }

    nats::connection& nc_;
    std::string subject_;
    std::string session_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<int> unanswered_{0};
    mutable std::mutex mu_;
    std::vector<ack> acks_;
    std::set<std::string> acknowledged_;
};

// Which worker holds each session's live lease (read from PostgreSQL; empty if it is down).
std::map<std::string, std::string> owners(const std::string& dsn) {
    std::map<std::string, std::string> out;
    try {
        ownership::postgres_lease leases({.dsn = dsn, .schema = "wuhu", .test_clock = {}});
        if (auto live = leases.live({})) {
            for (const auto& l : *live) {
                out[l.id.str()] = l.owner;
            }
        }
    } catch (const std::exception&) {
    }
    return out;
}

// A fault that took an owner away: when, which kind, the sessions it owned.
struct orphaning {
    std::string kind;  // "kill" or "freeze"
    steady::time_point at;
    std::vector<std::string> orphans;
};

// A server restart: when it was back; every session is measured from then.
struct restart {
    std::string kind;  // "nats" or "postgres"
    steady::time_point back;
    double down_ms;
};

}  // namespace

TEST(Chaos, KillsFreezesAndServerRestartsLoseNothingAndOrphansAreServedWithinTheLease) {
    own_postgres pg("chaos-Pg-pw1");
    ASSERT_TRUE(pg.up()) << "PostgreSQL did not start: " << pg.log();
    own_nats nats;
    ASSERT_TRUE(nats.up()) << "nats-server did not start";
    const std::string script = R"({"responses":[{"text":"ok","delay_ms":100}]})";
    std::map<std::string, std::unique_ptr<worker_process>> workers;
    for (const char* id : {"ca", "cb", "cc"}) {
        worker_process::config c;
        c.store = pg.url();
        c.worker_id = id;
        c.prefix = "wuhu_chaos" + std::to_string(getpid());
        c.args = {"--lease-ttl-ms", std::to_string(ttl_ms)};
        workers[id] = std::make_unique<worker_process>(id, script, c);
        workers[id]->start(nats.url());
    }
    const std::string prefix = workers.begin()->second->prefix();
    nats::connection nc(nats.url(), "chaos-client");
    ASSERT_EQ(answer_when_up(nc, prefix + ".session.warmup.subscribe").at("ok"), true);
    std::vector<std::unique_ptr<prober>> probers;
    for (int i = 0; i < sessions; ++i) {
        probers.push_back(
            std::make_unique<prober>(nc, prefix + ".session." + sid(i) + ".enqueue", sid(i)));
        probers.back()->start();
    }
    std::this_thread::sleep_for(2s);  // every session made and owned

    // The owner of most sessions, and the sessions it owns.
    auto busiest = [&](std::vector<std::string>& orphans) {
        const auto now = owners(pg.url());
        std::map<std::string, int> held;
        for (const auto& [s, o] : now) {
            held[o] += s.starts_with("ch");
        }
        std::string victim;
        for (const auto& [o, n] : held) {
            if (workers.contains(o) && (victim.empty() || n > held[victim])) {
                victim = o;
            }
        }
        orphans.clear();
        for (const auto& [s, o] : now) {
            if (o == victim && s.starts_with("ch")) {
                orphans.push_back(s);
            }
        }
        return victim;
    };
    std::vector<orphaning> faults;
    std::vector<restart> restarts;
    for (int round = 0; round < 2; ++round) {
        {  // A worker killed, and started again (same id): at once, then after its leases
           // expired (the other workers take its sessions over first).
            orphaning f{"kill", {}, {}};
            const auto victim = busiest(f.orphans);
            ASSERT_FALSE(victim.empty()) << "no lease found";
            f.at = steady::now();
            workers[victim]->crash();
            faults.push_back(f);
            std::this_thread::sleep_for(round == 0 ? 500ms : 4s);
            workers[victim]->start(nats.url());
            std::this_thread::sleep_for(round == 0 ? 5s : 2s);
        }
        {  // A worker frozen past its leases (3 s), then resumed.
            orphaning f{"freeze", {}, {}};
            const auto victim = busiest(f.orphans);
            ASSERT_FALSE(victim.empty()) << "no lease found";
            f.at = steady::now();
            workers[victim]->signal(SIGSTOP);
            faults.push_back(f);
            std::this_thread::sleep_for(3s);
            workers[victim]->signal(SIGCONT);
            std::this_thread::sleep_for(4s);
        }
        {  // nats-server killed, and started again on its port a second later.
            const auto down = steady::now();
            nats.kill_now();
            std::this_thread::sleep_for(1s);
            ASSERT_TRUE(nats.start()) << "nats-server did not start again";
            restarts.push_back({"nats", steady::now(), ms_between(down, steady::now())});
            std::this_thread::sleep_for(5s);
        }
        {  // PostgreSQL stopped (fast) and started again two seconds later.
            const auto down = steady::now();
            ASSERT_TRUE(pg.stop()) << "PostgreSQL did not stop";
            std::this_thread::sleep_for(2s);
            ASSERT_TRUE(pg.start()) << "PostgreSQL did not start again: " << pg.log();
            restarts.push_back({"postgres", steady::now(), ms_between(down, steady::now())});
            std::this_thread::sleep_for(6s);
        }
    }
    for (auto& p : probers) {
        p->stop();
    }

    // Failover: each orphan, from the fault to its first acknowledgement of a request sent
    // after it.
    std::map<std::string, std::vector<double>> by_kind;
    std::vector<double> all;
    for (const auto& f : faults) {
        for (const auto& s : f.orphans) {
            const int i = std::stoi(s.substr(2));
            const auto served = probers[static_cast<std::size_t>(i)]->served_after(f.at);
            ASSERT_TRUE(served.has_value()) << s << " was never served again after a " << f.kind;
            const double ms = ms_between(f.at, *served);
            by_kind[f.kind].push_back(ms);
            all.push_back(ms);
        }
    }
    ASSERT_FALSE(all.empty());
    std::cout << "chaos failover (postgres leases, ttl " << ttl_ms << " ms): " << all.size()
              << " orphaned sessions, p50 " << percentile(all, 0.5) << " ms, p99 "
              << percentile(all, 0.99) << " ms, max " << percentile(all, 1.0)
              << " ms (goal p99 <= ttl + 2 s = " << ttl_ms + 2000 << " ms)\n";
    for (const auto& [kind, v] : by_kind) {
        std::cout << "  after a " << kind << ": " << v.size() << " sessions, p50 "
                  << percentile(v, 0.5) << " ms, p99 " << percentile(v, 0.99) << " ms\n";
    }
    for (const auto& r : restarts) {
        std::vector<double> v;
        for (const auto& p : probers) {
            const auto served = p->served_after(r.back);
            ASSERT_TRUE(served.has_value()) << "a session was never served after " << r.kind;
            v.push_back(ms_between(r.back, *served));
        }
        std::cout << "  " << r.kind << " down " << r.down_ms << " ms; then every session served "
                  << "again: p50 " << percentile(v, 0.5) << " ms, max " << percentile(v, 1.0)
                  << " ms\n";
        EXPECT_LE(percentile(v, 1.0), 4.0 * ttl_ms) << "after the " << r.kind << " restart";
    }
    EXPECT_LE(percentile(all, 1.0), 4.0 * ttl_ms) << "an orphan served late";

    // Nothing acknowledged is lost.
    for (int i = 0; i < sessions; ++i) {
        json::value done;
        for (int tries = 0; tries < 100; ++tries) {
            auto r = nc.request(prefix + ".session." + sid(i) + ".subscribe", "{}", 5s);
            done = r ? json::parse(*r) : json::value();
            if (done.is_object() && done.as_object().contains("ok")) {
                break;
            }
            std::this_thread::sleep_for(100ms);
        }
        ASSERT_TRUE(done.is_object() && done.at("ok") == true) << sid(i) << json::serialize(done);
        const auto stored = item_ids(done);
        const auto acked = probers[static_cast<std::size_t>(i)]->acknowledged();
        EXPECT_GT(acked.size(), 10u) << sid(i);
        std::size_t lost = 0;
        for (const auto& id : acked) {
            lost += !stored.contains(id);
        }
        EXPECT_EQ(lost, 0u) << sid(i) << ": " << lost << " of " << acked.size()
                            << " acknowledged items lost";
    }
    for (auto& [id, w] : workers) {
        EXPECT_EQ(w->stop(), 0) << id;
    }
}

}  // namespace wuhu::testing
