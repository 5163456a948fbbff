// The request side against a real nats-server (see server_natstest.cpp). Here: the stop
// sequence (requests taken are answered, new sessions refused, forwards answered until the
// leases go), the fleet view at every page size, chunked replies, deletions told to watchers,
// the client library's watch.
#include "tests/broker/worker_fixture.hpp"

namespace wuhu::testing {

namespace {

// Blocks a node's executor until released, so that requests queue up behind it.
class executor_hold {
  public:
    explicit executor_hold(worker_node& n) : released_(release_.get_future().share()) {
        boost::asio::post(n.node().executor(), [f = released_] { f.wait(); });
    }
    ~executor_hold() { release(); }
    void release() {
        if (!done_) {
            done_ = true;
            release_.set_value();
        }
    }

  private:
    std::promise<void> release_;
    std::shared_future<void> released_;
    bool done_ = false;
};

// Waits (at most 10 s) until the node has taken `n` requests it has not answered yet.
bool wait_in_flight(worker_node& n, std::size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (n.node().requests().in_flight() != count) {
        if (std::chrono::steady_clock::now() > deadline) {
            return false;
        }
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

}  // namespace

TEST_F(worker_fixture, AStoppingWorkerAnswersTheRequestsItTookAndRefusesNewSessions) {
    ASSERT_EQ(request("drain", "configure", "{}").at("ok"), true);  // loaded here,
    ASSERT_EQ(request("drain", "pause", "{}").at("ok"), true);      // never inferring
    executor_hold hold(*node_);
    node_->store().hold_commits();  // the disk stalls: the next commit is still running at the stop
    // Taken before the stop.
    auto taken = std::async(std::launch::async, [&] {
        return request("drain", "enqueue", R"({"lane":"steer","id":"s1","content":"kept"})");
    });
    ASSERT_TRUE(wait_in_flight(*node_, 1));
    node_->node().stop();
    // Taken after the stop began, for a session this worker does not have.
    auto refused = std::async(std::launch::async, [&] {
        return request("fresh", "enqueue", R"({"lane":"steer","id":"s1","content":"lost?"})");
    });
    ASSERT_TRUE(wait_in_flight(*node_, 2));
    hold.release();
    auto no = refused.get();
    ASSERT_EQ(no.at("ok"), false) << json::serialize(no);
    EXPECT_EQ(no.at("error").at("code"), "worker_stopping");
    node_->store().release_commits();
    auto ok = taken.get();
    EXPECT_EQ(ok.at("ok"), true) << json::serialize(ok);
    node_.reset();
    // The next worker has what was acknowledged, and nothing of what was refused.
    node_ = start_node("w2");
    auto kept = request("drain", "subscribe", "{}");
    EXPECT_EQ(kept.at("patch").at("to").at("steer"), 1) << json::serialize(kept);
    auto fresh = request("fresh", "subscribe", "{}");
    EXPECT_EQ(fresh.at("patch").at("to").at("steer"), 0) << json::serialize(fresh);
}

TEST_F(worker_fixture, AStopThatOutlastsTheDrainTimeoutHandsTheSessionsOverAndStillAnswers) {
    node_.reset();
    node_ = start_node("w1", 0, 100ms);
    ASSERT_EQ(request("stuck", "configure", "{}").at("ok"), true);
    ASSERT_EQ(request("stuck", "pause", "{}").at("ok"), true);
    node_->store().hold_commits();
    auto taken = std::async(std::launch::async, [&] {
        return request("stuck", "enqueue", R"({"lane":"steer","id":"s1","content":"late"})");
    });
    ASSERT_TRUE(wait_held(*node_, 1));
    node_->node().stop();
    // The commit cannot finish, so after 100 ms the lease is released while the request waits.
    const auto sid = session::session_id::parse("stuck").value();
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (node_->leases().owner_of(sid).value().has_value() &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(5ms);
    }
    EXPECT_FALSE(node_->leases().owner_of(sid).value().has_value());
    EXPECT_EQ(taken.wait_for(0s), std::future_status::timeout);
    node_->store().release_commits();
    auto r = taken.get();
    EXPECT_EQ(r.at("ok"), true) << json::serialize(r);
}

// Defect: a stopping owner unsubscribed its forwarding subject at once while it still held its
// leases, so requests another worker forwarded to it got no answer at all. It keeps answering
// what is forwarded to it until its leases are released (and worker_stopping for a moment
// after, which clients retry).
TEST_F(worker_fixture, AStoppingOwnerAnswersWhatIsForwardedToItUntilItsLeasesAreReleased) {
    ASSERT_EQ(request("leaving", "configure", "{}").at("ok"), true);  // w1 owns it
    ASSERT_EQ(request("leaving", "pause", "{}").at("ok"), true);
    auto second = start_node("w2");
    node_->store().hold_commits();  // the stop lasts while this enqueue's commit is held
    auto taken = std::async(std::launch::async, [&] {
        return request("leaving", "enqueue", R"({"lane":"steer","id":"s1","content":"kept"})");
    });
    ASSERT_TRUE(wait_held(*node_, 1));
    node_->node().stop();
    // w1 takes nothing from the queue group any more: w2 gets these and forwards them to w1,
    // which still holds the lease and has the session loaded.
    for (int i = 0; i < 200 && second->forwarded() < 5; ++i) {
        auto r = client_->request(prefix_ + ".session.leaving.subscribe", "{}", 5s);
        ASSERT_TRUE(r.has_value()) << "no answer to a request forwarded to a stopping owner";
        auto v = json::parse(*r);
        EXPECT_EQ(v.at("ok"), true) << *r;
    }
    EXPECT_GE(second->forwarded(), 5u);
    node_->store().release_commits();
    auto ok = taken.get();
    EXPECT_EQ(ok.at("ok"), true) << json::serialize(ok);
    node_.reset();
    // Once w1 has released its lease, w2 owns the session and has what w1 acknowledged.
    auto now = request("leaving", "subscribe", "{}");
    EXPECT_EQ(now.at("patch").at("to").at("steer"), 1) << json::serialize(now);
    node_ = std::move(second);
}

TEST_F(worker_fixture, TheClientLibraryRetriesWhatAStoppingWorkerRefused) {
    nats::connection nc(nats_url(), "retry-client");
    client::client c(nc, client::options{prefix_, 30s, {}});
    executor_hold hold(*node_);
    node_->node().stop();  // runs once released: w1 then refuses sessions it has not loaded
    auto sent = std::async(std::launch::async, [&] {
        return c.enqueue("moving", "followUp", "hello", std::nullopt, "f1");
    });
    ASSERT_TRUE(wait_in_flight(*node_, 1));  // taken by w1, the only worker so far
    auto second = start_node("w2");
    hold.release();
    auto id = sent.get();
    ASSERT_TRUE(id) << id.error().code << ": " << id.error().message;
    EXPECT_EQ(*id, "f1");
    EXPECT_TRUE(second->has_loaded("moving"));
    node_ = std::move(second);
}

// Every page of the fleet view, with a page larger than either owner's share.
TEST_F(worker_fixture, TheFleetViewListsEverySessionOnceWhateverThePageSize) {
    auto second = start_node("w2");
    nats::connection nc(nats_url(), "pages-client");
    std::set<std::string> created;
    for (const auto& [w, n] : {std::pair{"w1", 70}, std::pair{"w2", 50}}) {
        std::vector<std::string> subjects;
        for (int i = 0; i < n; ++i) {
            const std::string sid = std::string("pg-") + w + "-" + std::to_string(i);
            created.insert(sid);
            subjects.push_back(prefix_ + ".worker." + w + ".session." + sid + ".configure");
        }
        for (const auto& r : nc.request_all(subjects, "{}", 30s)) {
            ASSERT_TRUE(r && r->find("\"ok\":true") != std::string::npos) << r.value_or("none");
        }
    }
    client::client c(nc, client::options{prefix_, 30s, {}});
    for (std::size_t limit : {7u, 49u, 60u, 100u, 1000u}) {
        std::vector<std::string> seen;
        json::object q{{"limit", limit}};
        for (int guard = 0; guard < 100; ++guard) {
            auto page = c.sessions(q);
            ASSERT_TRUE(page) << page.error().message;
            EXPECT_LE(page->at("sessions").as_array().size(), limit);
            for (const auto& r : page->at("sessions").as_array()) {
                seen.push_back(json::value_to<std::string>(r.at("id")));
            }
            if (!page->contains("next")) {
                break;
            }
            q["after"] = page->at("next");
        }
        EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end())) << limit;
        EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()), created) << "limit " << limit;
        EXPECT_EQ(seen.size(), created.size()) << "limit " << limit;
    }
    // In order of cost (all 0 here: then by id), paged by the (next_cost, next) cursor.
    for (std::size_t limit : {7u, 60u}) {
        std::vector<std::string> seen;
        json::object q{{"limit", limit}, {"order", "cost"}};
        for (int guard = 0; guard < 100; ++guard) {
            auto page = c.sessions(q);
            ASSERT_TRUE(page) << page.error().message;
            for (const auto& r : page->at("sessions").as_array()) {
                seen.push_back(json::value_to<std::string>(r.at("id")));
                EXPECT_EQ(r.at("cost"), 0);
            }
            if (!page->contains("next")) {
                break;
            }
            ASSERT_TRUE(page->contains("next_cost")) << *page;
            q["after"] = page->at("next");
            q["after_cost"] = page->at("next_cost");
        }
        EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()), created) << "limit " << limit;
        EXPECT_EQ(seen.size(), created.size()) << "limit " << limit;
    }
    auto refused = c.sessions(json::object{{"order", "cost"}, {"owner", "w1"}});
    EXPECT_FALSE(refused) << "the cost order is the index's";
}

// ---- chunked subscribe replies and the client library

TEST_F(worker_fixture, ALargeSubscribeReplyArrivesInOrderedChunks) {
    node_.reset();
    node_ = start_node("w1", 4096);
    nats::connection nc(nats_url(), "chunk-client");
    client::client c(nc, client::options{prefix_, 30s, {}});
    const std::string content(1500, 'y');
    for (int i = 0; i < 6; ++i) {
        ASSERT_TRUE(c.system("big", "asyncTaskNotification", content + std::to_string(i),
                             "cb-" + std::to_string(i)));
    }
    // Every message of the reply is a chunk within the limit, numbered 0..n-1 in order, and
    // the parts concatenated are one subscribe reply.
    std::vector<json::object> chunks;
    ASSERT_TRUE(
        client_->request_many(prefix_ + ".session.big.subscribe", "{}", 30s, [&](std::string m) {
            EXPECT_LE(m.size(), 4096u);
            chunks.push_back(json::parse(m).as_object());
            return chunks.size() < chunks.front().at("chunks").to_number<std::size_t>();
        }));
    ASSERT_GE(chunks.size(), 2u) << "a reply this size is chunked";
    std::string text;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
        EXPECT_EQ(chunks[i].at("chunk").to_number<std::size_t>(), i) << "in order";
        EXPECT_EQ(chunks[i].at("chunks").to_number<std::size_t>(), chunks.size());
        text += chunks[i].at("part").as_string();
    }
    const auto reassembled = json::parse(text);
    EXPECT_EQ(reassembled.at("ok"), true);
    EXPECT_GE(reassembled.at("patch").at("to").at("system").to_number<int>(), 6);
    auto whole = c.subscribe("big");
    ASSERT_TRUE(whole) << whole.error().message;
    const auto& journal = whole->at("patch").at("journal").at("system").as_array();
    std::size_t with_content = 0;
    for (const auto& f : journal) {
        if (f.as_object().contains("item")) {
            with_content += f.at("item").at("content").as_string().size() > 1500;
        }
    }
    const auto& transcript = whole->at("patch").at("transcript").as_array();
    for (const auto& e : transcript) {
        with_content += e.at("type") == "system_message";
    }
    EXPECT_GE(with_content, 6u) << json::serialize(*whole).substr(0, 400);
}

// Issue 31, defect 6: `delete` published nothing, and a watcher never learned that the session
// was gone. Now `<prefix>.events.<sid>.deleted` says so once the deletion is durable, and the
// client library's watch delivers it and ends.
TEST_F(worker_fixture, DeletingASessionTellsItsWatchers) {
    ASSERT_EQ(request("gone", "configure", "{}").at("ok"), true);
    std::mutex mu;
    std::vector<std::string> subjects;
    client_->subscribe(prefix_ + ".events.gone.>", [&](nats::message m) {
        std::lock_guard lock(mu);
        subjects.push_back(m.subject + " " + m.data);
    });
    client_->flush();
    nats::connection nc(nats_url(), "deleted-client");
    client::client c(nc, client::options{prefix_, 30s, {}});
    auto w = client::watch::open(c, "gone");
    ASSERT_TRUE(w) << w.error().message;
    client::watch::handlers h;
    std::optional<json::object> deleted;
    h.on_deleted = [&](const json::object& d) { deleted = d; };
    ASSERT_EQ(request("gone", "delete", "{}").at("ok"), true);
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (!deleted && std::chrono::steady_clock::now() < until) {
        auto got = (*w)->next(std::chrono::steady_clock::now() + 100ms, h);
        ASSERT_TRUE(got) << got.error().message;
    }
    ASSERT_TRUE(deleted) << "the watch was told";
    EXPECT_EQ(deleted->at("type"), "session.deleted");
    EXPECT_GE(deleted->at("epoch").as_int64(), 1);
    EXPECT_TRUE((*w)->deleted());
    auto after = (*w)->next(std::chrono::steady_clock::now() + 10ms, h);
    ASSERT_TRUE(after);
    EXPECT_FALSE(*after) << "the watch has ended";
    // The other connection's subscriber gets it too, in its own time (bounded).
    for (int i = 0; i < 200; ++i) {
        {
            std::lock_guard lock(mu);
            if (!subjects.empty() && subjects.back().find(".deleted ") != std::string::npos) {
                break;
            }
        }
        std::this_thread::sleep_for(10ms);
    }
    std::lock_guard lock(mu);
    ASSERT_FALSE(subjects.empty());
    EXPECT_TRUE(subjects.back().starts_with(prefix_ + ".events.gone.deleted "))
        << subjects.back();
}

TEST_F(worker_fixture, TheClientLibraryEnqueuesAndWatchesWithoutGaps) {
    nats::connection nc(nats_url(), "lib-client");
    client::client c(nc, client::options{prefix_, 30s, {}});
    auto w = client::watch::open(c, "lib");
    ASSERT_TRUE(w) << w.error().message;
    auto id = c.enqueue("lib", "followUp", "hi", client::author{"u1", "Ann", "", "human"}, "f1");
    ASSERT_TRUE(id) << id.error().message;
    EXPECT_EQ(*id, "f1");
    std::string streamed;
    std::vector<std::string> types;
    json::value last_to;
    bool chained = true, idle = false;
    client::watch::handlers h;
    h.on_patch = [&](const json::object& p) {
        if (!last_to.is_null()) {
            chained &= p.at("from") == last_to;
        }
        last_to = p.at("to");
        for (const auto& e : p.at("transcript").as_array()) {
            types.push_back(json::value_to<std::string>(e.at("type")));
        }
        if (const auto* st = p.if_contains("status")) {
            idle = !types.empty() && !st->at("has_work").as_bool();
        }
    };
    h.on_delta = [&](const json::object& d) {
        if (d.at("type") == "text.delta") {
            streamed += d.at("text").as_string();
        }
    };
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!idle) {
        auto got = (*w)->next(deadline, h);
        ASSERT_TRUE(got) << got.error().message;
        ASSERT_TRUE(*got) << "timed out";
    }
    EXPECT_TRUE(chained);
    EXPECT_EQ(streamed, "Hello");
    EXPECT_EQ(types, (std::vector<std::string>{"party_message", "assistant_message"}));
    EXPECT_EQ((*w)->resyncs(), 0u);
    // Commands of the library, each answered, each with its effect.
    EXPECT_FALSE(c.cancel("lib", "followUp", "f1").value());
    auto status = [&] { return c.subscribe("lib").value().at("status"); };
    EXPECT_TRUE(c.pause("lib"));
    EXPECT_EQ(status().at("paused"), true);
    EXPECT_TRUE(c.resume("lib"));
    EXPECT_EQ(status().at("paused"), false);
    EXPECT_EQ(c.configure("lib", json::object{{"model", "m2"}}).value().at("model"), "m2");
    EXPECT_EQ(c.subscribe("lib").value().at("settings").at("model"), "m2");
    // The session is idle: an abort stops nothing and says so (an abort that stops a turn:
    // Fleet.AnAbortAcrossTheFleetSaysWhatItStopped).
    auto aborted = c.abort("lib", "test", "stop-1");
    ASSERT_TRUE(aborted) << aborted.error().message;
    EXPECT_EQ(*aborted, (json::object{{"ok", true}, {"stopped", "nothing"}}));
    auto bad = c.cancel("lib", "system", "x");
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().code, "item_not_found") << "no scheduled callback x";
    const auto lib = session::session_id::parse("lib").value();
    ASSERT_TRUE(node_->leases().owner_of(lib).value().has_value());
    EXPECT_TRUE(c.remove("lib"));
    // Delete removed the data and the lease: nothing is left, and a read creates nothing.
    EXPECT_FALSE(std::filesystem::exists(dir_.path() / "sessions" / "lib.sqlite"));
    EXPECT_FALSE(node_->leases().owner_of(lib).value().has_value());
    auto gone = c.subscribe("lib");
    ASSERT_TRUE(gone) << gone.error().message;
    EXPECT_EQ(gone->at("patch").at("to").at("transcript"), 0);
    EXPECT_FALSE(std::filesystem::exists(dir_.path() / "sessions" / "lib.sqlite"));
    // Ids that would change the subject never leave the client.
    for (const char* bad : {"a b", "a.b", "*", ">", "a/b"}) {
        auto r = c.enqueue(bad, "steer", "x", client::author{});
        ASSERT_FALSE(r) << bad;
        EXPECT_EQ(r.error().code, "invalid_session_id") << bad;
        EXPECT_EQ(c.subscribe(bad).error().code, "invalid_session_id") << bad;
        EXPECT_EQ(client::watch::open(c, bad).error().code, "invalid_session_id") << bad;
    }
}

}  // namespace wuhu::testing
