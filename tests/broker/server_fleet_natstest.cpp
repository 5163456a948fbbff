// The request side of two workers on one store against a real nats-server (see
// server_natstest.cpp). Here: forwarding to the owner, a subscribe answered from the store,
// settings checked by the owner, the fleet view's filters and listing, reply subjects never
// answered.
#include "tests/broker/worker_fixture.hpp"

namespace wuhu::testing {

TEST_F(worker_fixture, TwoWorkersForwardToTheOwnerAndTheOwnerAnswersDirectly) {
    auto second = start_node("w2");
    watch("fw");
    // The queue group spreads these over both workers; whichever does not own the session
    // forwards to the one that does, and every reply still reaches the client.
    constexpr int n = 24;
    for (int i = 0; i < n; ++i) {
        auto r = request("fw", "system",
                         R"({"id":"cb-)" + std::to_string(i) +
                             R"(","source":"asyncTaskNotification","content":"tick"})");
        ASSERT_EQ(r.at("ok"), true) << json::serialize(r);
        EXPECT_EQ(r.at("id").as_string(), "cb-" + std::to_string(i));
    }
    EXPECT_GT(node_->forwarded() + second->forwarded(), 0u)
        << "with " << n << " requests over two workers, some must have been forwarded";
    EXPECT_NE(node_->has_loaded("fw"), second->has_loaded("fw")) << "exactly one owner";
    // Subscribe is routed the same way: every item is there, once.
    auto sub = request("fw", "subscribe", "{}");
    ASSERT_EQ(sub.at("ok"), true);
    EXPECT_EQ(sub.at("patch").at("to").at("system").to_number<int>() >= n, true);
    // Only the owner publishes, so the patches chain.
    ASSERT_TRUE(wait_for([&](const auto& ev) {
        int systems = 0;
        for (const auto& e : entries_of(ev)) {
            systems += e.at("type") == "system_message";
        }
        return systems == n;
    }));
    std::lock_guard lock(mu_);
    json::value last_to;
    for (const auto& [subject, v] : events_) {
        if (subject.ends_with(".patch")) {
            if (!last_to.is_null()) {
                EXPECT_EQ(v.at("from"), last_to);
            }
            last_to = v.at("to");
        }
    }
}

TEST_F(worker_fixture, AWorkerThatStopsReleasesItsSessionsAndAnotherTakesThemOver) {
    auto second = start_node("w2");
    // Make w1 the owner: address it directly.
    auto r = request_raw(prefix_ + ".worker.w1.session.handover.enqueue",
                         R"({"lane":"followUp","id":"f1","content":"one"})");
    ASSERT_EQ(r.at("ok"), true) << json::serialize(r);
    ASSERT_TRUE(node_->has_loaded("handover"));
    auto before = request("handover", "subscribe", "{}");
    node_.reset();  // graceful: loops stopped, leases released
    // w2 takes the session at once (no lease to wait out) and continues from the store.
    auto after = request("handover", "enqueue", R"({"lane":"followUp","id":"f2","content":"two"})");
    ASSERT_EQ(after.at("ok"), true) << json::serialize(after);
    EXPECT_TRUE(second->has_loaded("handover"));
    auto sub = request("handover", "subscribe", "{}");
    EXPECT_GE(sub.at("patch").at("to").at("followUp").to_number<int>(),
              before.at("patch").at("to").at("followUp").to_number<int>() + 1);
    node_ = std::move(second);
}

// Issue 31, defect 4: a subscribe of a session nobody owned took its lease and loaded it, so a
// dashboard polling it kept it loaded (and owned) for --passivate-after. It is answered from
// the store now: the same reply, and the session stays unowned and unloaded.
TEST_F(worker_fixture, ASubscribeOfASessionNobodyOwnsIsAnsweredFromTheStoreWithoutItsLease) {
    auto second = start_node("w2");
    auto r = request_raw(prefix_ + ".worker.w1.session.dash.enqueue",
                         R"({"lane":"followUp","id":"f1","content":"one"})");
    ASSERT_EQ(r.at("ok"), true) << json::serialize(r);
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    json::value before;
    do {
        before = request("dash", "subscribe", "{}");
    } while (before.at("status").at("has_work") == true &&
             std::chrono::steady_clock::now() < deadline);
    ASSERT_EQ(before.at("status").at("has_work"), false) << before;
    node_.reset();  // graceful: its lease is released; the session is only in the store
    const auto sid = session::session_id::parse("dash").value();
    for (int i = 0; i < 3; ++i) {
        auto sub = request("dash", "subscribe", "{}");
        ASSERT_EQ(sub.at("ok"), true) << sub;
        auto patch = sub.at("patch").as_object();
        auto owned = before.at("patch").as_object();
        EXPECT_EQ(patch.at("status").at("state"), "idle");
        EXPECT_EQ(patch.at("status").at("has_work"), false);
        patch.erase("status");  // the owner's was stamped (epoch, seq)
        owned.erase("status");
        EXPECT_EQ(patch, owned) << "the stored session, whole";
        EXPECT_EQ(sub.at("settings"), before.at("settings"));
        EXPECT_EQ(sub.at("step"), before.at("step"));
        EXPECT_EQ(sub.at("status").at("state"), "idle");
        EXPECT_FALSE(sub.at("status").as_object().contains("seq"))
            << "unstamped: older than any status an owner publishes";
        auto part = request("dash", "subscribe",
                            R"({"since":{"transcript":1,"system":0,"steer":0,"followUp":0}})");
        EXPECT_EQ(part.at("patch").at("transcript").as_array().size(),
                  before.at("patch").at("transcript").as_array().size() - 1);
    }
    EXPECT_FALSE(second->has_loaded("dash")) << "a read loads nothing";
    EXPECT_FALSE(second->leases().owner_of(sid).value().has_value()) << "nor takes the lease";
    // A command still takes it, and goes on from the store.
    auto more = request("dash", "enqueue", R"({"lane":"followUp","id":"f2","content":"two"})");
    ASSERT_EQ(more.at("ok"), true) << more;
    EXPECT_TRUE(second->has_loaded("dash"));
    node_ = std::move(second);
}

// Issue 31, defect 7: a configure was checked by the worker that took it, not by the session's
// owner. During a rollout that adds an endpoint (here w1 has "openai", w2 only "claude"), the
// same configure of w1's session was accepted or refused depending on which worker the queue
// group gave it to. Now the owner decides, whoever took it.
TEST_F(worker_fixture, AConfigureIsCheckedByTheSessionsOwnerWhicheverWorkerTookIt) {
    auto with_endpoint = [&](const std::string& id, const std::string& endpoint) {
        node_options o{nats_url(), prefix_, dir_.path(), id, script_};
        o.tune = [endpoint](app::node_options& n) {
            providers::endpoint_config e;
            e.name = endpoint;
            e.default_model = "m";
            e.base = providers::http::base_url{false, "127.0.0.1", "1", "/v1"};
            n.endpoints.push_back(e);
        };
        return std::make_unique<worker_node>(std::move(o));
    };
    node_.reset();
    node_ = with_endpoint("w1", "openai");
    auto second = with_endpoint("w2", "claude");
    ASSERT_EQ(request_raw(prefix_ + ".worker.w1.session.rollout.configure", "{}").at("ok"), true);
    int refused = 0;
    for (int i = 0; i < 12; ++i) {  // each taken by w1 or w2, as the queue group picks
        auto r = request("rollout", "configure", R"({"model":"openai/gpt-4o"})");
        refused += r.at("ok") != true;
    }
    EXPECT_EQ(refused, 0) << "the owner (w1) has the endpoint";
    auto r = request("rollout", "configure", R"({"model":"claude/sonnet"})");
    EXPECT_EQ(r.at("ok"), false) << "the owner has no such endpoint, whoever took it";
    EXPECT_GT(second->forwarded(), 0u) << "w2 took some and forwarded them to w1";
}

TEST_F(worker_fixture, AForwardedRequestIsNeverForwardedAgain) {
    auto second = start_node("w2");
    auto own = request_raw(prefix_ + ".worker.w1.session.once.configure", "{}");
    ASSERT_EQ(own.at("ok"), true);
    // w2 is addressed directly as if forwarded, but w1 owns the session: a clear error.
    auto r = request_raw(prefix_ + ".worker.w2.session.once.resume", "{}");
    EXPECT_EQ(r.at("ok"), false);
    EXPECT_EQ(r.at("error").at("code"), "owner_changed");
}

// Issue 29: the fleet view's `owner` filter went into the subject the owner is asked on
// unchecked, and libnats writes subjects into the protocol verbatim: CR LF in it made the
// worker publish anything under its own identity (here a delete of another session). Every
// owner that is no worker id is refused as invalid_query, and nothing is published.
TEST_F(worker_fixture, TheFleetViewsOwnerFilterCannotAddACommandToTheProtocol) {
    ASSERT_EQ(request("victim", "enqueue", R"({"lane":"followUp","content":"keep me"})").at("ok"),
              true);
    nats::connection probe(nats_url(), "probe");
    std::atomic<int> seen{0};
    probe.subscribe("probe.>", [&](nats::message) { ++seen; });
    probe.subscribe(prefix_ + ".session.victim.delete", [&](nats::message) { ++seen; });
    probe.subscribe(prefix_ + ".worker.*.session.victim.delete", [&](nats::message) { ++seen; });
    probe.flush();
    const std::string injected = "x 0\r\n\r\nPUB probe.injected 5\r\nhello\r\nPUB " +
                                 prefix_ + ".session.victim.delete 2\r\n{}\r\nPUB probe.tail";
    const std::vector<std::string> owners{
        injected, "w1\r\nPUB probe.x 0\r\n", "w 1", "w\t1", std::string("w1\0x", 4), "*", ">",
        "w1.admin", "wörker", std::string(65, 'w'), ""};
    for (const auto& owner : owners) {
        for (const char* state : {"idle", "unowned", ""}) {
            json::object q{{"owner", owner}};
            if (*state != '\0') {
                q["state"] = state;
            }
            auto r = request_raw(prefix_ + ".admin.sessions", json::serialize(q));
            EXPECT_EQ(r.at("ok"), false) << json::serialize(q);
            // (A NUL is refused by the text reader first, as in every field.)
            EXPECT_EQ(r.at("error").at("code"),
                      owner.find('\0') == std::string::npos ? "invalid_query" : "invalid_content")
                << json::serialize(r);
        }
    }
    probe.flush();
    client_->flush();
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(seen.load(), 0) << "a refused query published something";
    auto victim = request("victim", "subscribe", "{}");
    ASSERT_EQ(victim.at("ok"), true);
    EXPECT_FALSE(victim.at("patch").at("transcript").as_array().empty())
        << "the victim session must keep its transcript";
}

// Found in review (issue 29): nats-server does not check a reply subject against its sender's
// permissions, so a client allowed to request a session could name one of the fleet's own
// subjects as the reply subject (an event of another session, a worker's own subject) and make
// the worker publish there as the fleet. Such a request is served, and not answered.
TEST_F(worker_fixture, AReplySubjectAmongTheFleetsOwnIsNeverAnswered) {
    nats::connection probe(nats_url(), "reply-probe");
    std::atomic<int> seen{0};
    probe.subscribe(prefix_ + ".>", [&](nats::message m) {
        if (m.subject.starts_with(prefix_ + ".events.victim") ||
            m.subject.starts_with(prefix_ + ".worker.") || m.subject.ends_with(".forged")) {
            ++seen;
        }
    });
    probe.flush();
    raw_nats raw(nats_url());
    for (const auto& reply : {prefix_ + ".events.victim.patch", prefix_ + ".worker.w1.admin.local",
                              prefix_ + ".session.victim.forged"}) {
        EXPECT_FALSE(raw.request_to(prefix_ + ".session.mine.enqueue", reply, "_RAW.inbox.x",
                                    R"({"lane":"followUp","content":"x"})", 300ms)
                         .has_value());
        EXPECT_FALSE(
            raw.request_to(prefix_ + ".admin.sessions", reply, "_RAW.inbox.x", "{}", 300ms)
                .has_value());
    }
    probe.flush();
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(seen.load(), 0) << "the worker published a reply on one of the fleet's subjects";
    // The requests were served: the session holds them (their answers went nowhere).
    auto mine = request("mine", "subscribe", "{}");
    EXPECT_FALSE(mine.at("patch").at("transcript").as_array().empty()) << json::serialize(mine);
    EXPECT_EQ(request("victim", "subscribe", "{}").at("patch").at("transcript").as_array().size(),
              0u);
}

TEST_F(worker_fixture, AdminSessionsListsTheFleetWithOwnersStatesAndLanes) {
    auto second = start_node("w2");
    for (const auto& [w, sid] : {std::pair{"w1", "adm-a"}, std::pair{"w2", "adm-b"}}) {
        const std::string direct = prefix_ + ".worker." + w + ".session." + sid;
        ASSERT_EQ(request_raw(direct + ".configure", "{}").at("ok"), true);  // creates it
        ASSERT_EQ(request_raw(direct + ".pause", "{}").at("ok"), true);
    }
    // Paused sessions keep their queued input: lane depths show it.
    request("adm-b", "enqueue", R"({"lane":"steer","id":"s1","content":"wait"})");
    nats::connection nc(nats_url(), "admin-client");
    client::client c(nc, client::options{prefix_, 30s, {}});
    auto page = c.sessions();
    ASSERT_TRUE(page) << page.error().message;
    const auto& rows = page->at("sessions").as_array();
    ASSERT_EQ(rows.size(), 2u) << json::serialize(*page);
    EXPECT_EQ(rows[0].at("id"), "adm-a");
    EXPECT_EQ(rows[0].at("owner"), "w1");
    EXPECT_EQ(rows[0].at("state"), "idle");
    EXPECT_EQ(rows[0].at("paused"), true);
    EXPECT_EQ(rows[1].at("owner"), "w2");
    EXPECT_EQ(rows[1].at("lanes").at("steer"), 1);
    EXPECT_EQ(rows[1].at("has_work"), true);
    // Filters and pages.
    auto mine = c.sessions(json::object{{"owner", "w2"}}).value();
    ASSERT_EQ(mine.at("sessions").as_array().size(), 1u);
    EXPECT_EQ(mine.at("sessions").at(0).at("id"), "adm-b");
    auto working = c.sessions(json::object{{"has_work", true}}).value();
    ASSERT_EQ(working.at("sessions").as_array().size(), 1u) << json::serialize(working);
    EXPECT_EQ(working.at("sessions").at(0).at("id"), "adm-b");
    auto resting = c.sessions(json::object{{"has_work", false}}).value();
    ASSERT_EQ(resting.at("sessions").as_array().size(), 1u) << json::serialize(resting);
    EXPECT_EQ(resting.at("sessions").at(0).at("id"), "adm-a");
    auto first = c.sessions(json::object{{"limit", 1}}).value();
    ASSERT_EQ(first.at("sessions").as_array().size(), 1u);
    ASSERT_EQ(first.at("next"), "adm-a");
    auto rest = c.sessions(json::object{{"limit", 1}, {"after", "adm-a"}}).value();
    EXPECT_EQ(rest.at("sessions").at(0).at("id"), "adm-b");
    auto bad = c.sessions(json::object{{"limit", 0}});
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().code, "invalid_query");
}

// ---- stopping (the SIGTERM sequence of app/node.hpp)

}  // namespace wuhu::testing
