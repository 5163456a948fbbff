// The worker's request side against a real nats-server (scripts/test starts it and sets
// WUHU_TEST_NATS_URL): requests in, replies after commit, patches and deltas out.
#include "client/client.hpp"
#include "tests/broker/worker_node.hpp"
#include "tests/support/builders.hpp"
#include "tests/support/env.hpp"
#include "tests/support/raw_nats.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <boost/asio/post.hpp>

#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr const char* default_script = R"({"responses":[
    {"chunks":["Hel","lo"],"chunk_delay_ms":5},
    {"text":"second answer"},
    {"text":"third answer"}]})";

// A worker (SQLite store and lease in a temp dir, scripted model) on its own thread, and a
// client.
class worker_fixture : public ::testing::Test {
  protected:
    void SetUp() override {
        client_ = std::make_unique<nats::connection>(nats_url(), "test-client");
        node_ = start_node("w1");
    }
    void TearDown() override {
        node_.reset();
        client_.reset();  // its handlers use the members below
    }

    std::unique_ptr<worker_node> start_node(
        const std::string& id, std::size_t max_reply_bytes = 0,
        std::chrono::milliseconds drain_timeout = std::chrono::seconds(10)) {
        node_options o{nats_url(), prefix_, dir_.path(), id, script_, max_reply_bytes};
        o.drain_timeout = drain_timeout;
        return std::make_unique<worker_node>(std::move(o));
    }

    json::value request(const std::string& sid, const std::string& verb, const std::string& body) {
        return request_raw(prefix_ + ".session." + sid + "." + verb, body);
    }
    json::value request_raw(const std::string& subject, const std::string& body) {
        // Bounded, but generous: under the full parallel run the crash tests saturate the disk.
        auto r = client_->request(subject, body, 30s);
        if (!r) {
            ADD_FAILURE() << "no reply to " << subject;
            return json::object{};
        }
        return json::parse(*r);
    }

    // Collects events of one session.
    void watch(const std::string& sid) {
        client_->subscribe(prefix_ + ".events." + sid + ".>", [this](nats::message m) {
            std::lock_guard lock(mu_);
            events_.push_back({m.subject, json::parse(m.data)});
            cv_.notify_all();
        });
        client_->flush();
    }
    // Waits (at most 10 s) until `pred` holds over the events.
    bool wait_for(
        const std::function<bool(const std::vector<std::pair<std::string, json::value>>&)>& pred) {
        std::unique_lock lock(mu_);
        return cv_.wait_for(lock, 30s, [&] { return pred(events_); });
    }

    std::string script_ = default_script;
    temp_dir dir_;
    // Each test process has its own prefix: ctest runs them in parallel on one nats-server, and
    // a shared prefix would load-balance one test's requests to another test's worker.
    std::string prefix_ = "wuhu_t" + std::to_string(getpid());
    std::unique_ptr<nats::connection> client_;
    std::unique_ptr<worker_node> node_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::pair<std::string, json::value>> events_;
};

// Waits (at most 10 s) until `count` commits are held by the node's stalled disk.
bool wait_held(worker_node& n, int count) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (n.store().held_commits() < count && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
    return n.store().held_commits() == count;
}

// The transcript entries of every patch, in order.
std::vector<json::value> entries_of(
    const std::vector<std::pair<std::string, json::value>>& events) {
    std::vector<json::value> out;
    for (const auto& [subject, v] : events) {
        if (subject.ends_with(".patch")) {
            for (const auto& e : v.at("transcript").as_array()) {
                out.push_back(e);
            }
        }
    }
    return out;
}

bool has_entry(const std::vector<std::pair<std::string, json::value>>& events, const char* type) {
    for (const auto& e : entries_of(events)) {
        if (e.at("type") == type) {
            return true;
        }
    }
    return false;
}

bool has_assistant(const std::vector<std::pair<std::string, json::value>>& events,
                   const std::string& text) {
    for (const auto& [subject, v] : events) {
        if (subject.ends_with(".patch")) {
            for (const auto& e : v.at("transcript").as_array()) {
                if (e.at("type") == "assistant_message" && e.at("text").as_string() == text) {
                    return true;
                }
            }
        }
    }
    return false;
}

}  // namespace

TEST_F(worker_fixture, EnqueueIsAckedThenMaterializedAndAnsweredInChainedPatches) {
    watch("s1");
    auto reply = request(
        "s1", "enqueue",
        R"({"lane":"followUp","id":"f1","author":{"id":"u1","name":"Ann","kind":"human"},"content":"hi"})");
    EXPECT_EQ(reply.at("ok"), true);
    EXPECT_EQ(reply.at("id"), "f1");
    ASSERT_TRUE(wait_for([](const auto& ev) { return has_assistant(ev, "Hello"); }));
    std::lock_guard lock(mu_);
    json::value last_to;
    bool saw_start = false;
    int text_deltas = 0;
    for (const auto& [subject, v] : events_) {
        if (subject.ends_with(".patch")) {
            if (!last_to.is_null()) {
                EXPECT_EQ(v.at("from"), last_to) << "patches chain without gaps";
            }
            last_to = v.at("to");
        } else {
            saw_start |= v.at("type") == "message.start";
            text_deltas += v.at("type") == "text.delta";
        }
    }
    EXPECT_TRUE(saw_start);
    EXPECT_EQ(text_deltas, 2);
}

TEST_F(worker_fixture, AnIdRetriedGetsTheSameReplyAndChangesNothing) {
    auto first =
        request("s2", "system", R"({"id":"cb-1","source":"asyncBashCallback","content":"done"})");
    auto again =
        request("s2", "system", R"({"id":"cb-1","source":"asyncBashCallback","content":"done"})");
    EXPECT_EQ(first, again);
    EXPECT_EQ(first.at("id"), "cb-1");
    // The item exists exactly once: either still pending (its enqueued fact) or materialized
    // (one system message), and the lane's journal holds one enqueue and at most one
    // materialization, never a second enqueue (a backfill since version 0 coalesces an
    // enqueue with its materialization, so the facts are read since a version that keeps them).
    auto sub = request("s2", "subscribe", "{}");
    int copies = 0;
    for (const auto& f : sub.at("patch").at("journal").at("system").as_array()) {
        copies += f.at("fact") == "enqueued" && f.at("item").at("id") == "cb-1";
    }
    for (const auto& e : sub.at("patch").at("transcript").as_array()) {
        copies += e.at("type") == "system_message" && e.at("item") == "cb-1";
    }
    EXPECT_EQ(copies, 1) << json::serialize(sub.at("patch"));
    const auto system_facts = sub.at("patch").at("to").at("system").to_number<int>();
    EXPECT_GE(system_facts, 1);
    EXPECT_LE(system_facts, 2) << "enqueued, then perhaps materialized: nothing more";
}

TEST_F(worker_fixture, BadInputGetsItsErrorCodeAndChangesNothing) {
    struct bad {
        std::string subject;
        std::string body;
        const char* code;
    };
    const std::string big(300 * 1024, 'x');
    const std::vector<bad> table = {
        {prefix_ + ".session.a.b.enqueue", R"({"lane":"steer","content":"x"})",
         "invalid_session_id"},
        {prefix_ + ".session.*.enqueue", R"({"lane":"steer","content":"x"})", "invalid_session_id"},
        {prefix_ + ".session.>.enqueue", R"({"lane":"steer","content":"x"})", "invalid_session_id"},
        {prefix_ + ".session.clean.enqueue", "{not json", "invalid_json"},
        {prefix_ + ".session.clean.enqueue", R"({"lane":"steer","content":5})", "invalid_type"},
        {prefix_ + ".session.clean.enqueue", R"({"lane":"sideways","content":"x"})",
         "invalid_lane"},
        {prefix_ + ".session.clean.cancel", R"({"lane":"system"})", "missing_field"},
        {prefix_ + ".session.clean.enqueue", R"({"lane":"steer","content":")" + big + "\"}",
         "content_too_large"},
        {prefix_ + ".session.clean.enqueue", "{\"lane\":\"steer\",\"content\":\"\xFF\"}",
         "invalid_utf8"},
        {prefix_ + ".session.clean.explode", "{}", "unknown_command"},
        // Contract gaps: a NUL in any text field, an unknown tool, a partial version, and the
        // owners' fleet-view subject, which answered `ok` to anything.
        {prefix_ + ".session.clean.configure", R"({"model":"a\u0000b"})", "invalid_content"},
        {prefix_ + ".session.clean.configure", R"({"tools":["echo","nosuchtool"]})",
         "invalid_settings"},
        {prefix_ + ".session.clean.subscribe", R"({"since":{"transcript":0}})", "invalid_version"},
        {prefix_ + ".worker.w1.admin.local", "{not json", "invalid_json"},
        {prefix_ + ".worker.w1.admin.local", R"({"state":"sleeping"})", "invalid_query"},
        {prefix_ + ".admin.sessions", R"({"limit":0})", "invalid_query"},
    };
    for (const auto& b : table) {
        auto r = request_raw(b.subject, b.body);
        ASSERT_TRUE(r.is_object()) << b.subject;
        EXPECT_EQ(r.at("ok"), false) << b.subject << " " << b.body.substr(0, 60);
        EXPECT_EQ(r.at("error").at("code"), b.code) << b.subject << " " << b.body.substr(0, 60);
        EXPECT_FALSE(r.at("error").at("message").as_string().empty());
    }
    // A space cannot be in a subject: nats-server refuses the publish as a protocol error (and
    // drops that connection), so no worker sees it. (The client library refuses such ids
    // before sending: TheClientLibraryEnqueuesAndWatchesWithoutGaps.)
    {
        nats::connection raw(nats_url(), "space-client");
        EXPECT_FALSE(raw.request(prefix_ + ".session.clean x.enqueue",
                                 R"({"lane":"steer","content":"x"})", 1s)
                         .has_value());
    }
    // Bytes a C string hides: over a raw connection, a subject with a NUL reached `victim` as if
    // it ended at the NUL (bypassing a permission that denies wuhu.session.*.delete). Read by
    // length, it is malformed; and a reply subject with a NUL is never answered (the answer
    // would go to the inbox its prefix names).
    ASSERT_EQ(
        request("victim2", "enqueue", R"({"lane":"steer","id":"keep","content":"x"})").at("ok"),
        true);
    {
        raw_nats raw(nats_url());
        using namespace std::string_literals;
        for (const std::string& subject :
             {prefix_ + ".session.victim.enqueue\0zz"s, prefix_ + ".session.victim.configure\0"s,
              prefix_ + ".session.victim2.delete\0.x"s, prefix_ + ".session.vic\0tim.enqueue"s}) {
            const std::string body =
                subject.find("enqueue") != std::string::npos
                    ? R"({"lane":"steer","content":"x"})"
                    : (subject.find("configure") != std::string::npos ? R"({"model":"evil"})"
                                                                      : "{}");
            auto r = raw.request(subject, body, 10s);
            ASSERT_TRUE(r.has_value()) << "no reply to a subject with a NUL byte";
            auto v = json::parse(*r);
            EXPECT_EQ(v.at("ok"), false) << *r;
            EXPECT_EQ(v.at("error").at("code"), "invalid_session_id") << *r;
        }
        const std::string inbox = "_RAW.inbox.nul";
        EXPECT_FALSE(raw.request_to(prefix_ + ".session.victim.enqueue", inbox + "\0x"s, inbox,
                                    R"({"lane":"steer","content":"x"})", 1s)
                         .has_value())
            << "a reply subject with a NUL must not be answered at its prefix";
    }
    EXPECT_GE(
        request("victim2", "subscribe", "{}").at("patch").at("to").at("steer").to_number<int>(), 1)
        << "victim2 must not be deleted";
    const auto zero = json::parse(R"({"transcript":0,"system":0,"steer":0,"followUp":0})");
    for (const char* sid : {"clean", "a", "b", "victim", "vic"}) {
        auto r = request(sid, "subscribe", "{}");
        EXPECT_EQ(r.at("patch").at("to"), zero) << sid;
        EXPECT_EQ(r.at("settings").at("model"), "scripted") << sid;
    }
}

// Defect: a subscribe, status or cancel of an unknown id created the session (its file, a
// catalog row and a lease renewed forever), and it showed in the fleet view. Reads of a
// session that does not exist answer as such and create nothing; only enqueue, system and
// configure create a session.
TEST_F(worker_fixture, ReadsOfAnUnknownSessionCreateNothing) {
    const auto ghost = session::session_id::parse("ghost").value();
    const auto zero = json::parse(R"({"transcript":0,"system":0,"steer":0,"followUp":0})");
    auto sub = request("ghost", "subscribe", "{}");
    EXPECT_EQ(sub.at("ok"), true);
    EXPECT_EQ(sub.at("patch").at("to"), zero);
    EXPECT_EQ(sub.at("status").at("state"), "idle");
    EXPECT_EQ(request("ghost", "subscribe",
                      R"({"since":{"transcript":1,"system":0,"steer":0,"followUp":0}})")
                  .at("error")
                  .at("code"),
              "invalid_version");
    EXPECT_EQ(request("ghost", "cancel", R"({"lane":"steer","id":"x"})").at("error").at("code"),
              "item_not_found");
    EXPECT_EQ(request("ghost", "abort", "{}").at("stopped"), "nothing");
    EXPECT_EQ(request("ghost", "pause", "{}").at("error").at("code"), "session_not_found");
    EXPECT_EQ(request("ghost", "resume", "{}").at("error").at("code"), "session_not_found");
    EXPECT_EQ(request("ghost", "delete", "{}").at("ok"), true);
    EXPECT_FALSE(node_->has_loaded("ghost"));
    for (const char* suffix : {"", "-wal", "-shm"}) {
        EXPECT_FALSE(std::filesystem::exists(dir_.path() / "sessions" /
                                             (std::string("ghost.sqlite") + suffix)))
            << suffix;
    }
    EXPECT_FALSE(node_->leases().owner_of(ghost).value().has_value());
    nats::connection nc(nats_url(), "ghost-client");
    client::client c(nc, client::options{prefix_, 30s, {}});
    auto page = c.sessions();
    ASSERT_TRUE(page) << page.error().message;
    for (const auto& r : page->at("sessions").as_array()) {
        EXPECT_NE(r.at("id"), "ghost");
    }
    // A write creates it; the same reads then see it.
    ASSERT_EQ(request("ghost", "configure", R"({"model":"m2"})").at("ok"), true);
    EXPECT_EQ(request("ghost", "subscribe", "{}").at("settings").at("model"), "m2");
    EXPECT_EQ(request("ghost", "pause", "{}").at("ok"), true);
    EXPECT_TRUE(node_->leases().owner_of(ghost).value().has_value());
}

TEST_F(worker_fixture, SubscribeSinceAVersionGetsExactlyTheMissingChanges) {
    watch("s3");
    request("s3", "enqueue", R"({"lane":"followUp","id":"f1","content":"one"})");
    ASSERT_TRUE(wait_for([](const auto& ev) { return has_assistant(ev, "Hello"); }));
    auto mid = request("s3", "subscribe", "{}").at("patch").at("to");
    request("s3", "enqueue", R"({"lane":"followUp","id":"f2","content":"two"})");
    ASSERT_TRUE(wait_for([](const auto& ev) { return has_assistant(ev, "second answer"); }));
    auto sub = request("s3", "subscribe", R"({"since":)" + json::serialize(mid) + "}");
    ASSERT_EQ(sub.at("ok"), true);
    const auto& p = sub.at("patch");
    EXPECT_EQ(p.at("from"), mid);
    const auto& entries = p.at("transcript").as_array();
    ASSERT_EQ(entries.size(), 2u);  // the follow-up and its answer, nothing older
    EXPECT_EQ(entries[0].at("content"), "two");
    EXPECT_EQ(entries[1].at("text"), "second answer");
    // f2 was enqueued and materialized inside the window: coalesced away.
    EXPECT_TRUE(p.at("journal").at("followUp").as_array().empty());
    // The registers always come with the reply (their value races the loop's last step).
    EXPECT_TRUE(sub.at("status").as_object().contains("state"));
    EXPECT_TRUE(sub.at("settings").as_object().contains("model"));
}

class tool_worker_fixture : public worker_fixture {
  protected:
    tool_worker_fixture() {
        script_ = R"({"responses":[
            {"text":"working","tool_calls":[{"name":"sleep","arguments":{"ms":1500}}]},
            {"text":"adjusted"},
            {"text":"follow-up answered"}]})";
    }
};

TEST_F(tool_worker_fixture, ASteerDuringAToolCallReachesTheNextInference) {
    watch("t1");
    request("t1", "enqueue", R"({"lane":"followUp","id":"f1","content":"go"})");
    ASSERT_TRUE(wait_for([](const auto& ev) { return has_entry(ev, "tool_started"); }));
    auto r = request("t1", "enqueue", R"({"lane":"steer","id":"s1","content":"use staging"})");
    EXPECT_EQ(r.at("ok"), true);
    ASSERT_TRUE(wait_for([](const auto& ev) { return has_assistant(ev, "adjusted"); }));
    std::lock_guard lock(mu_);
    std::vector<std::string> order;
    for (const auto& e : entries_of(events_)) {
        order.push_back(json::value_to<std::string>(e.at("type")));
    }
    EXPECT_EQ(order,
              (std::vector<std::string>{"party_message", "assistant_message", "tool_started",
                                        "tool_result", "party_message", "assistant_message"}));
}

TEST_F(tool_worker_fixture, CancelBeforeMaterializationAndASystemCallback) {
    watch("t2");
    request("t2", "enqueue", R"({"lane":"followUp","id":"f1","content":"go"})");
    ASSERT_TRUE(wait_for([](const auto& ev) { return has_entry(ev, "tool_started"); }));
    request("t2", "enqueue", R"({"lane":"followUp","id":"f2","content":"never mind"})");
    auto c = request("t2", "cancel", R"({"lane":"followUp","id":"f2"})");
    EXPECT_EQ(c.at("canceled"), true);
    auto sys = request("t2", "system",
                       R"({"id":"cb","source":"asyncTaskNotification","content":"task 7 done"})");
    EXPECT_EQ(sys.at("id"), "cb");
    ASSERT_TRUE(wait_for([](const auto& ev) { return has_assistant(ev, "adjusted"); }));
    std::lock_guard lock(mu_);
    bool system_seen = false;
    for (const auto& e : entries_of(events_)) {
        EXPECT_NE(e.as_object().contains("content") ? e.at("content") : json::value(),
                  "never mind");
        system_seen |= e.at("type") == "system_message" && e.at("content") == "task 7 done";
    }
    EXPECT_TRUE(system_seen);
    // A canceled item cannot be canceled into "not canceled": the retry gives the same reply.
    EXPECT_EQ(request("t2", "cancel", R"({"lane":"followUp","id":"f2"})"), c);
}

// A response whose usage crosses a small context's compaction threshold, with a tool call:
// the turn goes through every loop state, compacting included (its summary takes 300 ms).
class compacting_worker_fixture : public worker_fixture {
  protected:
    compacting_worker_fixture() {
        script_ = R"({"responses":[
            {"text":"working )" + std::string(120, '.') + R"(","usage":{"input":950},
             "tool_calls":[{"name":"sleep","arguments":{"ms":300}}]},
            {"text":"adjusted"}],
            "summary_delay_ms":300})";
    }
};

// Defect: watchers never saw the loop state (a turn's patches carried no status, and the last
// one said "preparing" while subscribe said "idle"). Every loop state change reaches a watcher,
// and the last status it holds is what subscribe returns. (Issue 31: this test never reached
// `compacting`; now the turn compacts.)
TEST_F(compacting_worker_fixture, WatchersSeeEveryLoopStateAndEndWithTheStatusSubscribeReturns) {
    nats::connection nc(nats_url(), "status-client");
    client::client c(nc, client::options{prefix_, 30s, {}});
    ASSERT_TRUE(c.configure("st", json::object{{"context_limit", 1000},
                                               {"compaction_buffer", 100},
                                               {"keep_recent_tokens", 20}}));
    auto w = client::watch::open(c, "st");
    ASSERT_TRUE(w) << w.error().message;
    ASSERT_TRUE(c.enqueue("st", "followUp", std::string(200, 'a'), std::nullopt, "f1"));
    std::vector<std::string> states;
    json::object last_status;
    bool answered = false;
    client::watch::handlers h;
    h.on_patch = [&](const json::object& p) {
        for (const auto& e : p.at("transcript").as_array()) {
            answered |= e.at("type") == "assistant_message" && e.at("text") == "adjusted";
        }
        if (const auto* st = p.if_contains("status")) {
            last_status = st->as_object();
            auto state = json::value_to<std::string>(st->at("state"));
            if (states.empty() || states.back() != state) {
                states.push_back(state);
            }
        }
    };
    h.on_delta = [](const json::object&) {};
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!(answered && last_status.at("state") == "idle")) {
        auto got = (*w)->next(deadline, h);
        ASSERT_TRUE(got) << got.error().message;
        ASSERT_TRUE(*got) << "timed out; states so far: " << states.size();
    }
    for (const char* state : {"preparing", "inferring", "compacting", "executing_tools"}) {
        EXPECT_NE(std::find(states.begin(), states.end(), state), states.end()) << state;
    }
    auto now = c.subscribe("st");
    ASSERT_TRUE(now) << now.error().message;
    for (const char* k : {"state", "paused", "has_work"}) {
        EXPECT_EQ(last_status.at(k), now->at("status").at(k)) << k;
    }
    EXPECT_EQ(last_status.at("state"), "idle");
    EXPECT_EQ(last_status.at("has_work"), false);
}

class streaming_worker_fixture : public worker_fixture {
  protected:
    streaming_worker_fixture() {
        script_ = R"({"responses":[
            {"chunks":["one ","two ","three ","four"],"chunk_delay_ms":400}]})";
    }
};

TEST_F(streaming_worker_fixture, SubscribingMidStreamYieldsTheAccumulatedTextThenLiveDeltas) {
    watch("m1");
    request("m1", "enqueue", R"({"lane":"followUp","id":"f1","content":"count"})");
    ASSERT_TRUE(wait_for([](const auto& ev) {
        for (const auto& [subject, v] : ev) {
            if (v.as_object().contains("type") && v.at("type") == "text.delta" &&
                v.at("seq") == 2) {
                return true;
            }
        }
        return false;
    }));
    auto sub = request("m1", "subscribe", "{}");
    ASSERT_TRUE(sub.as_object().contains("inflight")) << json::serialize(sub);
    const auto inflight_text = json::value_to<std::string>(sub.at("inflight").at("text"));
    const auto inflight_seq = sub.at("inflight").at("seq").to_number<int>();
    EXPECT_TRUE(inflight_text.starts_with("one two")) << inflight_text;
    ASSERT_TRUE(wait_for([](const auto& ev) { return has_assistant(ev, "one two three four"); }));
    // Deltas after the subscribe continue the sequence: accumulated text + later deltas = all.
    std::lock_guard lock(mu_);
    std::string rest;
    for (const auto& [subject, v] : events_) {
        if (subject.ends_with(".delta") && v.at("type") == "text.delta" &&
            v.at("seq").to_number<int>() > inflight_seq) {
            rest += json::value_to<std::string>(v.at("text"));
        }
    }
    EXPECT_EQ(inflight_text + rest, "one two three four");
}

// ---- two workers

// Defect: lease acquisition ran on the executor that serves every session, so one slow
// acquisition (a busy catalog, a far database) stalled the sessions already loaded.
TEST_F(worker_fixture, ASlowLeaseAcquisitionStallsNoOtherSession) {
    const std::string item =
        R"({"lane":"followUp","id":"%","author":{"id":"u1","name":"Ann","kind":"human"},"content":"hi"})";
    auto with_id = [&](const std::string& id) {
        auto body = item;
        return body.replace(body.find('%'), 1, id);
    };
    ASSERT_EQ(request("warm", "enqueue", with_id("w1")).at("ok"), true);
    node_->lease_gate().hold();
    std::promise<json::value> cold_reply;
    std::thread cold([&] { cold_reply.set_value(request("cold", "enqueue", with_id("c1"))); });
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (node_->lease_gate().held() == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
    ASSERT_EQ(node_->lease_gate().held(), 1) << "the cold session's acquisition is held";
    // While it waits, the loaded session is served: a read, and a write that commits.
    auto read = client_->request(prefix_ + ".session.warm.subscribe", "{}", 5s);
    auto write = client_->request(prefix_ + ".session.warm.enqueue", with_id("w2"), 5s);
    node_->lease_gate().let_go();
    cold.join();
    ASSERT_TRUE(read) << "a loaded session was not served while another's lease was acquired";
    EXPECT_EQ(json::parse(*read).at("ok"), true);
    ASSERT_TRUE(write);
    EXPECT_EQ(json::parse(*write).at("ok"), true);
    EXPECT_EQ(cold_reply.get_future().get().at("ok"), true);
}

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

namespace {

// The test plays the worker on its own prefix: it keeps every request body it gets and answers
// (or not) as `answer` says, given the body and how many came before it.
class fake_worker {
  public:
    using policy =
        std::function<std::optional<std::string>(const json::object& body, std::size_t n)>;
    fake_worker(const std::string& tag, policy answer)
        : prefix_(tag + std::to_string(getpid())), answer_(std::move(answer)) {
        nc_.subscribe(prefix_ + ".session.>", [this](nats::message m) {
            auto body = json::parse(m.data).as_object();
            std::size_t n = 0;
            {
                std::lock_guard lock(mu_);
                n = bodies_.size();
                bodies_.push_back(body);
            }
            if (auto reply = answer_(body, n)) {
                nc_.publish(m.reply, *reply);
            }
        });
        nc_.flush();
    }
    const std::string& prefix() const { return prefix_; }
    std::vector<json::object> bodies() const {
        std::lock_guard lock(mu_);
        return bodies_;
    }

  private:
    std::string prefix_;
    policy answer_;
    mutable std::mutex mu_;
    std::vector<json::object> bodies_;
    nats::connection nc_{nats_url(), "fake-worker"};
};

// `{"ok":true, "stopped":"nothing", "id": <the body's id>}`: an answer to any command.
std::string ok_with_id(const json::object& body) {
    json::object ok{{"ok", true}, {"stopped", "nothing"}};
    if (const auto* id = body.if_contains("id")) {
        ok["id"] = *id;
    }
    return json::serialize(ok);
}

}  // namespace

// A request the client library sends again (after owner_changed, worker_stopping, overloaded
// or rate_limited) is the same request: an enqueue, a system message or an abort sent without
// an id gets one of the client's own, so that a copy refused by one worker and served by
// another is never applied twice (docs/protocol.md, Routing: a frozen owner that wakes up as
// its lease runs out may refuse a forward another worker served). The fake worker refuses
// every request once, then answers it with the id it carries.
TEST(ClientRetries, ARequestSentAgainCarriesTheIdOfItsFirstCopy) {
    fake_worker fake("wuhu_retry", [](const json::object& body, std::size_t n) {
        return n % 2 == 0
                   ? std::string(
                         R"({"ok":false,"error":{"code":"owner_changed","message":"retry"}})")
                   : ok_with_id(body);
    });
    nats::connection nc(nats_url(), "retry-client");
    client::client c(nc, client::options{fake.prefix(), 10s, {}});
    auto item = c.enqueue("s", "followUp", "hello");
    ASSERT_TRUE(item) << item.error().message;
    auto callback = c.system("s", "asyncTaskNotification", "done");
    ASSERT_TRUE(callback) << callback.error().message;
    auto aborted = c.abort("s");
    ASSERT_TRUE(aborted) << aborted.error().message;
    const auto bodies = fake.bodies();
    ASSERT_EQ(bodies.size(), 6u) << "each request refused once, then sent again";
    for (std::size_t i = 0; i < bodies.size(); i += 2) {
        ASSERT_TRUE(bodies[i].contains("id")) << json::serialize(bodies[i]);
        EXPECT_EQ(bodies[i].at("id"), bodies[i + 1].at("id")) << "copy " << i / 2;
        EXPECT_EQ(bodies[i].at("id").as_string().size(), 36u) << "a UUIDv7";
    }
    EXPECT_EQ(*item, bodies[0].at("id").as_string());
    EXPECT_EQ(*callback, bodies[2].at("id").as_string());
    EXPECT_NE(bodies[0].at("id"), bodies[2].at("id"));
}

// The same through call() with a body that has no id (as wuhuctl sends): the id is made once,
// before the first copy; one the caller gave is kept.
TEST(ClientRetries, ACallWithoutAnIdGetsOneKeptByEveryCopy) {
    fake_worker fake("wuhu_callid", [](const json::object& body, std::size_t n) {
        return n % 2 == 0
                   ? std::string(R"({"ok":false,"error":{"code":"owner_changed","message":"x"}})")
                   : ok_with_id(body);
    });
    nats::connection nc(nats_url(), "callid-client");
    client::client c(nc, client::options{fake.prefix(), 10s, {}});
    ASSERT_TRUE(c.call("s", "enqueue", json::object{{"lane", "steer"}, {"content", "hi"}}));
    ASSERT_TRUE(c.call("s", "enqueue", json::object{{"lane", "steer"}, {"content", "hi"},
                                                    {"id", "mine"}}));
    const auto bodies = fake.bodies();
    ASSERT_EQ(bodies.size(), 4u);
    ASSERT_TRUE(bodies[0].contains("id"));
    EXPECT_EQ(bodies[0].at("id"), bodies[1].at("id"));
    EXPECT_EQ(bodies[2].at("id"), "mine");
    EXPECT_EQ(bodies[3].at("id"), "mine");
}

// A command whose reply does not come within the client's attempt_timeout (a worker took it and
// died or froze) is sent again, as the same request, until the timeout: its caller waits for
// the lost copy that long, not its whole timeout. The fake worker drops every first copy.
TEST(ClientRetries, ACommandNotAnsweredInTimeIsSentAgainAsTheSameRequest) {
    fake_worker fake("wuhu_lost", [](const json::object& body, std::size_t n) {
        return n % 2 == 0 ? std::nullopt : std::optional<std::string>(ok_with_id(body));
    });
    nats::connection nc(nats_url(), "lost-client");
    client::client c(nc, client::options{.prefix = fake.prefix(),
                                         .timeout = 20s,
                                         .tenant = {},
                                         .attempt_timeout = 300ms});
    const auto began = std::chrono::steady_clock::now();
    auto item = c.enqueue("s", "followUp", "hello");
    const auto took = std::chrono::steady_clock::now() - began;
    ASSERT_TRUE(item) << item.error().message;
    EXPECT_LT(took, 5s) << "the lost copy cost the attempt's 300 ms, not the 20 s timeout";
    const auto bodies = fake.bodies();
    ASSERT_EQ(bodies.size(), 2u);
    EXPECT_EQ(bodies[0].at("id"), bodies[1].at("id"));
    EXPECT_EQ(*item, bodies[0].at("id").as_string());
}

// A command that could undo another client's later one if a copy came late (configure, pause,
// resume, delete) is sent once, and waited for the whole timeout.
TEST(ClientRetries, APauseWithALateReplyIsNotSentAgain) {
    fake_worker fake("wuhu_once", [](const json::object&, std::size_t) {
        return std::optional<std::string>();  // never answers
    });
    nats::connection nc(nats_url(), "once-client");
    client::client c(nc, client::options{.prefix = fake.prefix(),
                                         .timeout = 1500ms,
                                         .tenant = {},
                                         .attempt_timeout = 200ms});
    auto paused = c.pause("s");
    ASSERT_FALSE(paused);
    EXPECT_EQ(paused.error().code, "no_reply");
    EXPECT_EQ(fake.bodies().size(), 1u) << "sent once";
}

}  // namespace wuhu::testing
