// The worker's request side against a real nats-server (scripts/test starts it and sets
// WUHU_TEST_NATS_URL): requests in, replies after commit, patches and deltas out. Here: the
// contract, bad input, reads that create nothing, tools, loop states, streaming.
#include "tests/broker/worker_fixture.hpp"

namespace wuhu::testing {

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

}  // namespace wuhu::testing
