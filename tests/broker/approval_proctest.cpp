// Issue 33, approvals with real processes: a worker on PostgreSQL and nats-server, a tool
// served over NATS by this test (it counts each call's requests), and decisions sent as any
// client sends them. A call waiting across a SIGKILL of its owner is approved on the next
// owner and runs exactly once; parallel calls are decided in reverse order, reject and respond
// reach the model; edited arguments that fail the schema are refused; a deadline decides on
// time with no request, also for a session its owner passivated meanwhile.
#include "tests/broker/fleet.hpp"
#include "tests/support/pg_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// `charge` (not idempotent, its calls wait for approval, rejected after `deadline_ms` when
// not 0) served by this test over NATS: it counts the requests of each call id.
class charge_service {
  public:
    explicit charge_service(const std::string& prefix) : nc_(nats_url(), "charge-service") {
        nc_.subscribe(prefix + ".tools.charge", [this](nats::message m) {
            std::string call;
            for (const auto& [k, v] : m.headers) {
                call = k == "Wuhu-Tool-Call" ? v : call;
            }
            {
                std::lock_guard lock(mu_);
                ++calls_[call];
            }
            nc_.publish(m.reply, json::serialize(json::object{{"output", "charged " + m.data}}));
        });
        nc_.flush();
    }
    std::map<std::string, int> calls() {
        std::lock_guard lock(mu_);
        return calls_;
    }

  private:
    nats::connection nc_;
    std::mutex mu_;
    std::map<std::string, int> calls_;
};

std::filesystem::path tools_file(const std::filesystem::path& dir, int deadline_ms) {
    const auto path = dir / "tools.json";
    std::ofstream(path) << R"({"tools": {"charge": {"description": "Charges a card",
        "schema": {"type": "object", "properties": {"cents": {"type": "integer"}}},
        "approval": "always")"
                        << (deadline_ms > 0
                                ? R"(, "approval_deadline_ms": )" + std::to_string(deadline_ms)
                                : std::string())
                        << "}}}";
    return path;
}

json::value state_of(nats::connection& nc, const std::string& s) {
    return answer_when_up(nc, s + "subscribe", "{}");
}

// Waits (bounded) until the session's status is `state`.
json::value until_state(nats::connection& nc, const std::string& s, std::string_view state,
                        std::chrono::milliseconds limit = 20s) {
    json::value st;
    const auto give_up = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < give_up) {
        st = state_of(nc, s);
        const auto& status = st.at("status");
        if (status.at("state") == json::string(state) &&
            (state != "idle" || status.at("has_work") == false)) {
            return st;
        }
        std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << "the session is not " << state << ": " << st;
    return st;
}

// The transcript's entries as "type" or "type:tool" lines.
std::vector<std::string> kinds(const json::value& st) {
    std::vector<std::string> out;
    for (const auto& e : st.at("patch").at("transcript").as_array()) {
        std::string line(e.at("type").as_string());
        if (const auto* d = e.as_object().if_contains("decision")) {
            line += ":" + std::string(d->as_string());
        }
        out.push_back(line);
    }
    return out;
}

const json::object* entry_of(const json::value& st, std::string_view type, std::string_view call) {
    for (const auto& e : st.at("patch").at("transcript").as_array()) {
        if (e.at("type") == json::string(type) && e.as_object().contains("call") &&
            e.at("call") == json::string(call)) {
            return &e.as_object();
        }
    }
    return nullptr;
}

std::string decide(nats::connection& nc, const std::string& s, const std::string& verb,
                   const std::string& body) {
    return json::serialize(answer_when_up(nc, s + verb, body));
}

}  // namespace

TEST(ApprovalProcess, AWaitingCallSurvivesASigkillAndRunsOnceOnTheNextOwner) {
    scratch_database db("wuhu_approval");
    temp_dir dir;
    worker_process::config c;
    c.store = db.url();
    // A short lease: the next owner takes the session soon after the SIGKILL.
    c.args = {"--tools", tools_file(dir.path(), 0).string(), "--lease-ttl-ms", "2000"};
    worker_process w("approval", R"({"responses":[
        {"tool_calls":[{"id":"k1","name":"charge","arguments":{"cents":500}}]},
        {"text":"charged, thanks"}]})",
                     c);
    charge_service charge(w.prefix());
    w.start();
    nats::connection nc(nats_url(), "approval-client");
    const std::string s = w.prefix() + ".session.a1.";
    ASSERT_EQ(answer_when_up(nc, s + "enqueue", R"({"lane":"followUp","content":"pay"})").at("ok"),
              true);
    auto st = until_state(nc, s, "awaiting_approval");
    ASSERT_NE(entry_of(st, "approval_requested", "k1"), nullptr) << st;
    EXPECT_TRUE(charge.calls().empty()) << "nothing runs before a decision";

    w.crash();  // SIGKILL, with the call waiting
    worker_process next("approval", R"({"responses":[
        {"tool_calls":[{"id":"k1","name":"charge","arguments":{"cents":500}}]},
        {"text":"charged, thanks"}]})",
                        [&] {
                            auto cn = c;
                            cn.worker_id = "proc-2";
                            cn.prefix = w.prefix();
                            return cn;
                        }());
    next.start();
    // Edited arguments the schema refuses are refused, and the call waits on.
    const auto bad = decide(nc, s, "approve", R"({"call":"k1","arguments":{"cents":"lots"}})");
    EXPECT_NE(bad.find("invalid_arguments"), std::string::npos) << bad;
    const auto ok = decide(nc, s, "approve",
                           R"({"call":"k1","arguments":{"cents":300},
                               "author":{"id":"u2","name":"Bea","kind":"human"}})");
    EXPECT_NE(ok.find(R"("decision":"approve")"), std::string::npos) << ok;
    st = until_state(nc, s, "idle");
    EXPECT_EQ(charge.calls(), (std::map<std::string, int>{{"k1", 1}})) << "exactly once";
    const auto* result = entry_of(st, "tool_result", "k1");
    ASSERT_NE(result, nullptr) << st;
    EXPECT_EQ(result->at("output"), R"(charged {"cents":300})") << "the edited arguments ran";
    EXPECT_EQ(kinds(st).back(), "assistant_message");
    // The same decision again is a duplicate; another one is refused.
    EXPECT_NE(decide(nc, s, "approve", R"({"call":"k1"})").find(R"("duplicate":true)"),
              std::string::npos);
    EXPECT_NE(decide(nc, s, "reject", R"({"call":"k1"})").find("already_decided"),
              std::string::npos);
    EXPECT_EQ(charge.calls().at("k1"), 1);
}

TEST(ApprovalProcess, ParallelCallsDecidedInReverseOrderRejectAndRespondReachTheModel) {
    temp_dir dir;
    worker_process::config c;
    c.args = {"--tools", tools_file(dir.path(), 0).string()};
    worker_process w("approvals", R"({"responses":[
        {"tool_calls":[{"id":"p1","name":"charge","arguments":{"cents":1}},
                       {"id":"p2","name":"charge","arguments":{"cents":2}},
                       {"id":"p3","name":"charge","arguments":{"cents":3}}]},
        {"text":"done"}]})",
                     c);
    charge_service charge(w.prefix());
    w.start();
    nats::connection nc(nats_url(), "approvals-client");
    const std::string s = w.prefix() + ".session.a2.";
    ASSERT_EQ(answer_when_up(nc, s + "enqueue", R"({"lane":"followUp","content":"pay"})").at("ok"),
              true);
    until_state(nc, s, "awaiting_approval");
    EXPECT_NE(decide(nc, s, "respond", R"({"call":"p3","output":"paid in cash"})")
                  .find(R"("decision":"respond")"),
              std::string::npos);
    EXPECT_NE(decide(nc, s, "approve", R"({"call":"p2"})").find(R"("ok":true)"), std::string::npos);
    EXPECT_NE(decide(nc, s, "reject", R"({"call":"p1","message":"too small"})")
                  .find(R"("decision":"reject")"),
              std::string::npos);
    auto st = until_state(nc, s, "idle");
    EXPECT_EQ(charge.calls(), (std::map<std::string, int>{{"p2", 1}}));
    EXPECT_EQ(entry_of(st, "tool_result", "p3")->at("output"), "paid in cash");
    EXPECT_EQ(entry_of(st, "tool_result", "p1")->at("is_error"), true);
    EXPECT_NE(json::serialize(entry_of(st, "tool_result", "p1")->at("output")).find("too small"),
              std::string::npos);
    EXPECT_EQ(kinds(st).back(), "assistant_message");
}

TEST(ApprovalProcess, TheDeadlineDecidesOnTimeAlsoForASessionPassivatedMeanwhile) {
    temp_dir dir;
    worker_process::config c;
    // The session is unloaded soon after it waits; the deadline brings it back.
    c.args = {"--tools",           tools_file(dir.path(), 3000).string(),
              "--passivate-after", "300ms",
              "--lease-ttl-ms",    "1000"};
    worker_process w("deadline", R"({"responses":[
        {"tool_calls":[{"id":"d1","name":"charge","arguments":{}}]},
        {"text":"nobody answered"}]})",
                     c);
    charge_service charge(w.prefix());
    w.start();
    nats::connection nc(nats_url(), "deadline-client");
    const std::string s = w.prefix() + ".session.a3.";
    ASSERT_EQ(answer_when_up(nc, s + "enqueue", R"({"lane":"followUp","content":"pay"})").at("ok"),
              true);
    auto st = until_state(nc, s, "awaiting_approval");
    const auto* asked = entry_of(st, "approval_requested", "d1");
    ASSERT_NE(asked, nullptr);
    const auto deadline = asked->at("deadline").to_number<std::int64_t>();
    EXPECT_EQ(deadline - asked->at("at").to_number<std::int64_t>(), 3000);
    // No request: wait past the deadline. Meanwhile the session is unloaded, and the fleet
    // view lists it among those awaiting approval, from the index (and wuhuctl with it).
    std::this_thread::sleep_for(1500ms);
    const auto page =
        answer_when_up(nc, w.prefix() + ".admin.sessions", R"({"awaiting_approval":true})");
    ASSERT_EQ(page.at("sessions").as_array().size(), 1u) << page;
    const auto& row = page.at("sessions").at(0);
    EXPECT_EQ(row.at("id"), "a3");
    EXPECT_EQ(row.at("state"), "unowned") << "passivated while it waits: " << page;
    EXPECT_EQ(row.at("approvals"), 1);
    const auto listed = json::parse(
        wuhuctl(nats_url(), w.prefix(), {"--json", "approvals"}, dir.path() / "approvals"));
    ASSERT_EQ(listed.at("approvals").as_array().size(), 1u) << listed;
    EXPECT_EQ(listed.at("approvals").at(0).at("call"), "d1");
    EXPECT_EQ(listed.at("approvals").at(0).at("session"), "a3");
    std::this_thread::sleep_for(2500ms);
    st = until_state(nc, s, "idle", 10s);
    const auto* decided = entry_of(st, "approval_decided", "d1");
    ASSERT_NE(decided, nullptr) << st;
    EXPECT_EQ(decided->at("by_deadline"), true);
    EXPECT_EQ(decided->at("decision"), "reject");
    const auto at =
        st.at("patch")
            .at("transcript")
            .as_array()[static_cast<std::size_t>(decided->at("id").to_number<std::int64_t>() - 1)]
            .at("at")
            .to_number<std::int64_t>();
    EXPECT_GE(at, deadline) << "not before its deadline";
    EXPECT_LT(at, deadline + 3000) << "and soon after it (the recovery sweep's period)";
    EXPECT_TRUE(charge.calls().empty());
    EXPECT_EQ(kinds(st).back(), "assistant_message");
}

}  // namespace wuhu::testing
