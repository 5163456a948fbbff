// Bounds seen from a client (DESIGN.md "Bounds", issue 30), against the nats-server scripts/test
// starts: a worker past its requests in flight answers `overloaded` at once with a retry hint,
// a tenant past its rates is `rate_limited` while the others are served, a tenant at its
// sessions quota gets `quota_exceeded` for a new session while its sessions are served, and a
// full lane answers `lane_full`. Every refusal changes nothing.
#include "client/client.hpp"
#include "tests/broker/worker_node.hpp"
#include "tests/support/env.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <future>
#include <mutex>
#include <thread>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr const char* script = R"({"responses":[{"text":"one"},{"text":"two"}]})";

std::string item(const std::string& id, const std::string& content = "hi") {
    return R"({"lane":"followUp","id":")" + id +
           R"(","author":{"id":"u1","name":"Ann","kind":"human"},"content":")" + content + R"("})";
}

class bounds_fixture : public ::testing::Test {
  protected:
    void SetUp() override { client_ = std::make_unique<nats::connection>(nats_url(), "bounds"); }
    void TearDown() override {
        node_.reset();
        client_.reset();
    }

    void start(std::function<void(app::node_options&)> tune, bool tenancy = false) {
        node_options o{nats_url(), prefix_, dir_.path(), "w1", script};
        o.tenancy = protocol::tenancy{tenancy, ""};
        o.tune = std::move(tune);
        node_ = std::make_unique<worker_node>(std::move(o));
    }
    json::value ask(const std::string& subject, const std::string& body) {
        auto r = client_->request(subject, body, 30s);
        if (!r) {
            ADD_FAILURE() << "no reply to " << subject;
            return json::object{};
        }
        return json::parse(*r);
    }
    json::value on(const std::string& sid, const std::string& verb, const std::string& body) {
        return ask(prefix_ + ".session." + sid + "." + verb, body);
    }
    json::value on(const std::string& tenant, const std::string& sid, const std::string& verb,
                   const std::string& body) {
        return ask(prefix_ + "." + tenant + ".session." + sid + "." + verb, body);
    }
    static std::string code_of(const json::value& reply) {
        const auto* e = reply.as_object().if_contains("error");
        return e != nullptr ? std::string(e->at("code").as_string()) : std::string("ok");
    }
    static std::int64_t retry_hint(const json::value& reply) {
        return reply.at("error").at("retry_after_ms").as_int64();
    }
    // Waits (bounded) until the worker holds `n` requests taken and not answered.
    bool wait_in_flight(std::size_t n) {
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (node_->node().requests().in_flight() < n &&
               std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(1ms);
        }
        return node_->node().requests().in_flight() == n;
    }
    // The follow-up items pending, from the fleet view.
    std::size_t pending(const std::string& sid) {
        auto r = ask(prefix_ + ".admin.sessions", R"({"ids":[")" + sid + R"("]})");
        return static_cast<std::size_t>(
            r.at("sessions").at(0).at("lanes").at("followUp").as_int64());
    }

    temp_dir dir_;
    std::string prefix_ = "wuhu_b" + std::to_string(getpid());
    std::unique_ptr<nats::connection> client_;
    std::unique_ptr<worker_node> node_;
};

}  // namespace

TEST_F(bounds_fixture, RequestsPastTheWorkersInFlightLimitAreRefusedOverloadedAtOnce) {
    start([](app::node_options& o) {
        o.server.max_in_flight = 2;
        o.server.retry_after = 250ms;
    });
    ASSERT_EQ(code_of(on("warm", "configure", "{}")), "ok");
    ASSERT_EQ(code_of(on("warm", "pause", "{}")), "ok");  // its items stay pending
    ASSERT_EQ(code_of(on("warm", "enqueue", item("w1"))), "ok");
    // Two requests for new sessions wait for their leases: the worker holds two in flight.
    node_->lease_gate().hold();
    auto cold1 = std::async(std::launch::async, [&] { return on("cold1", "enqueue", item("c1")); });
    auto cold2 = std::async(std::launch::async, [&] { return on("cold2", "enqueue", item("c2")); });
    ASSERT_TRUE(wait_in_flight(2));
    const auto asked = std::chrono::steady_clock::now();
    const auto refused = on("warm", "enqueue", item("w2"));
    EXPECT_LT(std::chrono::steady_clock::now() - asked, 5s) << "refused at once, not queued";
    EXPECT_EQ(code_of(refused), "overloaded");
    EXPECT_EQ(retry_hint(refused), 250);
    node_->lease_gate().let_go();
    EXPECT_EQ(code_of(cold1.get()), "ok");
    EXPECT_EQ(code_of(cold2.get()), "ok");
    EXPECT_EQ(pending("warm"), 1u) << "the refused item was not kept";
    EXPECT_EQ(code_of(on("warm", "enqueue", item("w2"))), "ok") << "a retry gets in";

    // The client library waits as the hint says and retries until it gets in.
    node_->lease_gate().hold();
    auto cold3 = std::async(std::launch::async, [&] { return on("cold3", "enqueue", item("c3")); });
    auto cold4 = std::async(std::launch::async, [&] { return on("cold4", "enqueue", item("c4")); });
    ASSERT_TRUE(wait_in_flight(2));
    client::options co;
    co.prefix = prefix_;
    co.timeout = 20s;
    client::client c(*client_, co);
    std::thread release([&] {
        std::this_thread::sleep_for(300ms);
        node_->lease_gate().let_go();
    });
    auto sent = c.call("warm", "enqueue", json::parse(item("w3")).as_object());
    release.join();
    EXPECT_TRUE(sent) << (sent ? "" : sent.error().code);
    EXPECT_EQ(code_of(cold3.get()), "ok");
    EXPECT_EQ(code_of(cold4.get()), "ok");
}

// One session's requests past its limit are refused at the door (before they are read), while
// the worker serves the other sessions.
TEST_F(bounds_fixture, OneSessionsRequestsPastItsLimitAreRefusedAtTheDoorAndOthersServed) {
    start([](app::node_options& o) { o.server.max_per_session = 2; });
    ASSERT_EQ(code_of(on("warm", "configure", "{}")), "ok");
    node_->lease_gate().hold();  // the cold session's requests wait for its lease
    auto first = std::async(std::launch::async, [&] { return on("cold", "enqueue", item("c1")); });
    auto second = std::async(std::launch::async, [&] { return on("cold", "enqueue", item("c2")); });
    ASSERT_TRUE(wait_in_flight(2));
    const auto third = on("cold", "enqueue", item("c3"));
    EXPECT_EQ(code_of(third), "overloaded");
    EXPECT_GT(retry_hint(third), 0);
    EXPECT_EQ(code_of(on("warm", "subscribe", "{}")), "ok") << "another session is served";
    node_->lease_gate().let_go();
    EXPECT_EQ(code_of(first.get()), "ok");
    EXPECT_EQ(code_of(second.get()), "ok");
    EXPECT_EQ(code_of(on("cold", "enqueue", item("c3"))), "ok") << "room again once answered";
}

// Requests are started one session at a time in turn (broker/door.hpp): a request of another
// session that arrives behind a burst of one session's requests is started second, not after
// the whole burst. The executor is held while the burst and the other request arrive. The
// burst's requests are bad ones (answered as they are decoded, when they start) and the other
// is a read, answered a few steps of the executor after it starts: in arrival order it would be
// answered last.
TEST_F(bounds_fixture, AFloodedSessionsRequestsWaitBehindEachOtherNotInFrontOfAnotherSession) {
    start([](app::node_options& o) { o.server.max_per_session = 100; });
    ASSERT_EQ(code_of(on("calm", "configure", "{}")), "ok");
    const std::string inbox = "_DOOR." + prefix_;
    std::mutex mu;
    std::vector<std::string> answered;  // the inbox token of each reply, in arrival order
    const auto token = client_->subscribe(inbox + ".*", [&](nats::message m) {
        std::lock_guard lock(mu);
        answered.push_back(m.subject.substr(inbox.size() + 1));
    });
    client_->flush();
    std::promise<void> release;
    std::promise<void> held;
    boost::asio::post(node_->node().executor(), [&held, done = release.get_future()]() mutable {
        held.set_value();
        done.wait();
    });
    held.get_future().wait();
    constexpr int burst = 50;
    const std::string big(100 * 1024, 'x');  // decoded on the executor
    for (int i = 0; i < burst; ++i) {
        const std::string bad = R"({"lane":"sideways","id":"f)" + std::to_string(i) +
                                R"(","author":{"id":"u1","name":"Ann","kind":"human"},"content":")" +
                                big + R"("})";
        client_->publish_request(prefix_ + ".session.flooded.enqueue",
                                 inbox + ".f" + std::to_string(i), bad);
    }
    client_->publish_request(prefix_ + ".session.calm.subscribe", inbox + ".calm", "{}");
    client_->flush();
    const bool all_taken = wait_in_flight(burst + 1);
    release.set_value();
    ASSERT_TRUE(all_taken);
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
        {
            std::lock_guard lock(mu);
            if (answered.size() == burst + 1) {
                break;
            }
        }
        std::this_thread::sleep_for(5ms);
    }
    client_->unsubscribe(token);
    std::lock_guard lock(mu);
    ASSERT_EQ(answered.size(), static_cast<std::size_t>(burst + 1));
    const auto at = std::find(answered.begin(), answered.end(), "calm") - answered.begin();
    EXPECT_LE(at, 10) << "the other session's read was answered after " << at
                      << " of the flooded session's requests";
}

TEST_F(bounds_fixture, AFullLaneAnswersLaneFullAndKeepsWhatItHolds) {
    start([](app::node_options& o) { o.loop.lanes = session::lane_limits{3, 0}; });
    ASSERT_EQ(code_of(on("s", "pause", "{}")), "session_not_found");
    ASSERT_EQ(code_of(on("s", "configure", "{}")), "ok");
    ASSERT_EQ(code_of(on("s", "pause", "{}")), "ok");
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(code_of(on("s", "enqueue", item("f" + std::to_string(i)))), "ok");
    }
    const auto full = on("s", "enqueue", item("f3"));
    EXPECT_EQ(code_of(full), "lane_full");
    EXPECT_GT(retry_hint(full), 0);
    EXPECT_EQ(code_of(on("s", "enqueue", item("f0"))), "ok") << "a retried item is no new one";
    EXPECT_EQ(pending("s"), 3u);
    ASSERT_EQ(code_of(on("s", "resume", "{}")), "ok");
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (pending("s") > 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(code_of(on("s", "enqueue", item("f3"))), "ok") << "room again once taken";
}

TEST_F(bounds_fixture, ATenantPastItsRatesIsRateLimitedWhileOthersAreServed) {
    start(
        [](app::node_options& o) {
            o.server.tenants.requests_per_second = 4;
            o.server.tenants.new_sessions_per_second = 2;
        },
        true);
    // New sessions: two a second for acme (its burst), then rate_limited, not made.
    EXPECT_EQ(code_of(on("acme", "a1", "enqueue", item("i"))), "ok");
    EXPECT_EQ(code_of(on("acme", "a2", "enqueue", item("i"))), "ok");
    const auto third = on("acme", "a3", "enqueue", item("i"));
    EXPECT_EQ(code_of(third), "rate_limited");
    EXPECT_GT(retry_hint(third), 0);
    EXPECT_LE(retry_hint(third), 1000);
    EXPECT_EQ(code_of(on("acme", "a1", "subscribe", "{}")), "ok") << "acme's fourth request";
    EXPECT_EQ(code_of(on("acme", "a1", "subscribe", "{}")), "rate_limited")
        << "acme's requests: 4 a second";
    // Another tenant has rates of its own.
    EXPECT_EQ(code_of(on("globex", "g1", "enqueue", item("i"))), "ok");
    EXPECT_EQ(code_of(on("globex", "g1", "subscribe", "{}")), "ok");
    std::this_thread::sleep_for(1100ms);
    const auto a3 = on("acme", "a3", "subscribe", "{}");
    ASSERT_EQ(code_of(a3), "ok");
    EXPECT_EQ(a3.at("patch").at("transcript").as_array().size(), 0u)
        << "the refused creation made nothing";
    EXPECT_EQ(code_of(on("acme", "a3", "enqueue", item("i"))), "ok") << "within the rate again";
}

TEST_F(bounds_fixture, ATenantAtItsSessionsQuotaCannotCreateOneButUsesItsOwn) {
    start(
        [](app::node_options& o) {
            o.server.tenants.max_sessions = 2;
            o.server.tenants.count_ttl = 200ms;
        },
        true);
    EXPECT_EQ(code_of(on("acme", "a1", "enqueue", item("i"))), "ok");
    EXPECT_EQ(code_of(on("acme", "a2", "configure", "{}")), "ok");
    const auto third = on("acme", "a3", "enqueue", item("i"));
    EXPECT_EQ(code_of(third), "quota_exceeded");
    EXPECT_FALSE(third.at("error").as_object().contains("retry_after_ms"))
        << "no wait helps: sessions have to go";
    EXPECT_EQ(code_of(on("acme", "a1", "enqueue", item("j"))), "ok") << "its own are served";
    EXPECT_EQ(code_of(on("globex", "g1", "enqueue", item("i"))), "ok") << "a quota per tenant";
    EXPECT_EQ(code_of(on("acme", "a2", "delete", "{}")), "ok");
    std::this_thread::sleep_for(300ms);  // the count is read again
    EXPECT_EQ(code_of(on("acme", "a3", "enqueue", item("i"))), "ok");
}

// A long backfill comes in pages (`more`, a patch to a version short of the current one); the
// client library follows them into one reply, and a watch from the start sees every entry
// once, in order.
TEST_F(bounds_fixture, ALongBackfillComesInPagesThatTheClientFollows) {
    start([](app::node_options& o) {
        o.server.subscribe_page_items = 7;
        o.server.subscribe_page_bytes = 1 << 20;
    });
    ASSERT_EQ(code_of(on("long", "configure", "{}")), "ok");
    ASSERT_EQ(code_of(on("long", "pause", "{}")), "ok");
    for (int i = 0; i < 30; ++i) {
        ASSERT_EQ(code_of(on("long", "enqueue", item("i" + std::to_string(i)))), "ok");
    }
    ASSERT_EQ(code_of(on("long", "resume", "{}")), "ok");
    client::options co;
    co.prefix = prefix_;
    client::client c(*client_, co);
    json::object whole;
    for (int i = 0; i < 200; ++i) {
        auto r = c.subscribe("long");
        ASSERT_TRUE(r) << r.error().code;
        if (r->at("status").at("has_work") == false && r->at("status").at("state") == "idle") {
            whole = *r;
            break;
        }
        std::this_thread::sleep_for(50ms);
    }
    ASSERT_FALSE(whole.empty()) << "the session did not settle";
    EXPECT_FALSE(whole.contains("more"));
    const auto& transcript = whole.at("patch").at("transcript").as_array();
    EXPECT_GE(transcript.size(), 31u) << "30 messages and at least one answer";
    for (std::size_t i = 0; i < transcript.size(); ++i) {
        EXPECT_EQ(transcript[i].at("id").as_int64(), static_cast<std::int64_t>(i + 1));
    }
    EXPECT_EQ(whole.at("patch").at("to").at("transcript").as_int64(),
              static_cast<std::int64_t>(transcript.size()));

    const auto first = on("long", "subscribe", "{}");
    ASSERT_EQ(code_of(first), "ok");
    EXPECT_EQ(first.at("more"), true);
    EXPECT_EQ(first.at("patch").at("transcript").as_array().size(), 7u);
    EXPECT_EQ(first.at("patch").at("to").at("transcript").as_int64(), 7);
    EXPECT_FALSE(first.as_object().contains("inflight"));

    auto w = client::watch::open(c, "long");
    ASSERT_TRUE(w) << w.error().code;
    std::vector<std::int64_t> seen;
    client::watch::handlers h;
    h.on_patch = [&](const json::object& p) {
        for (const auto& e : p.at("transcript").as_array()) {
            seen.push_back(e.at("id").as_int64());
        }
    };
    while (seen.size() < transcript.size()) {
        auto got = (*w)->next(std::chrono::steady_clock::now() + 5s, h);
        ASSERT_TRUE(got && *got) << "the watch stopped after " << seen.size() << " entries";
    }
    for (std::size_t i = 0; i < seen.size(); ++i) {
        EXPECT_EQ(seen[i], static_cast<std::int64_t>(i + 1));
    }
}

}  // namespace wuhu::testing
