// The NATS contract's subjects, the bad-input table of whole requests, replies and event
// payloads.
#include "protocol/events.hpp"
#include "protocol/replies.hpp"
#include "protocol/requests.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace json = boost::json;
using protocol::verb;

TEST(Subjects, ParseSessionAndVerb) {
    const protocol::subject_layout wuhu;
    auto r = wuhu.parse_request("wuhu.session.abc-1_X.enqueue").value();
    EXPECT_EQ(r.sid.str(), "abc-1_X");
    EXPECT_EQ(r.what, verb::enqueue);
    EXPECT_EQ(protocol::subject_layout("acme.wuhu").parse_request("acme.wuhu.session.s.delete")
                  .value()
                  .what,
              verb::remove);
    EXPECT_EQ(wuhu.request(r.sid, verb::cancel), "wuhu.session.abc-1_X.cancel");
    EXPECT_EQ(wuhu.patch(r.sid), "wuhu.events.abc-1_X.patch");
    EXPECT_EQ(wuhu.delta(r.sid), "wuhu.events.abc-1_X.delta");
    EXPECT_EQ(wuhu.events(r.sid), "wuhu.events.abc-1_X.>");
    EXPECT_EQ(wuhu.requests(), "wuhu.session.>");
    EXPECT_EQ(wuhu.views(), "wuhu.admin.sessions");
    EXPECT_FALSE(wuhu.fleet_view().has_value());
    EXPECT_EQ(wuhu.forwarded_requests("w1"), "wuhu.worker.w1.session.>");
    EXPECT_EQ(wuhu.forward("w1", r.sid, verb::pause).value(),
              "wuhu.worker.w1.session.abc-1_X.pause");
    EXPECT_EQ(wuhu.parse_forwarded("wuhu.worker.w1.session.abc-1_X.pause", "w1").value().sid,
              r.sid);
    EXPECT_EQ(wuhu.local_sessions("w1").value(), "wuhu.worker.w1.admin.local");
    EXPECT_EQ(wuhu.tool(r.sid, "lookup").value(), "wuhu.tools.lookup");
    EXPECT_EQ(wuhu.parse_view("wuhu.admin.sessions").value(), std::nullopt);
}

// Issue 31, defect 16: an owner acknowledges a forward on the subject its header names, and
// on no other: only `<prefix>.worker.<valid id>.ack.<1-19 digits>` is one, read by length.
TEST(Subjects, AForwardIsAcknowledgedOnlyOnAForwardAcknowledgementSubject) {
    const protocol::subject_layout wuhu;
    EXPECT_EQ(wuhu.forward_acks("w1"), "wuhu.worker.w1.ack.*");
    EXPECT_EQ(wuhu.forward_ack("w1", 42), "wuhu.worker.w1.ack.42");
    EXPECT_EQ(wuhu.parse_forward_ack("wuhu.worker.w1.ack.42", "w1"), 42u);
    EXPECT_EQ(wuhu.parse_forward_ack("wuhu.worker.w1.ack.18446744073709551615", "w1"),
              std::nullopt)
        << "20 digits";
    EXPECT_EQ(wuhu.parse_forward_ack("wuhu.worker.w1.ack.9999999999999999999", "w1"),
              9999999999999999999u);
    EXPECT_EQ(wuhu.parse_forward_ack("wuhu.worker.w2.ack.42", "w1"), std::nullopt);
    EXPECT_TRUE(wuhu.is_forward_ack("wuhu.worker.w2.ack.0"));
    for (const std::string& bad : std::vector<std::string>{
             "wuhu.worker.w1.ack.", "wuhu.worker.w1.ack.4a", "wuhu.worker.w1.ack.4.2",
          "wuhu.worker.w1.ack.*", "wuhu.worker.w1.ack.>", "wuhu.worker.w1.session.s.enqueue",
          "wuhu.worker.w1.ack", "wuhu.worker.w 1.ack.1", "wuhu.worker..ack.1",
          "wuhu.session.s.enqueue", "_INBOX.abc", "wuhux.worker.w1.ack.1", "wuhu.events.s.patch",
          std::string("wuhu.worker.w1.ack.1\0", 21), std::string("wuhu.worker.w1\0.ack.1", 21)}) {
        EXPECT_FALSE(wuhu.is_forward_ack(bad)) << bad;
    }
    const protocol::subject_layout tenants("wuhu", {.on = true, .default_tenant = ""});
    EXPECT_TRUE(tenants.is_forward_ack("wuhu.worker.w1.ack.7"));
    EXPECT_FALSE(tenants.is_forward_ack("wuhu.worker.session.ack.7")) << "a layout word";
}

TEST(Subjects, BadSessionIdsAreInvalidSessionId) {
    const protocol::subject_layout wuhu;
    for (const char* bad :
         {"wuhu.session.a.b.enqueue", "wuhu.session.*.enqueue", "wuhu.session.>.enqueue",
          "wuhu.session.a b.enqueue", "wuhu.session.enqueue", "wuhu.session..enqueue"}) {
        auto r = wuhu.parse_request(bad);
        ASSERT_FALSE(r.has_value()) << bad;
        EXPECT_EQ(r.error(), make_error_code(errc::invalid_session_id)) << bad;
    }
    EXPECT_EQ(wuhu.parse_request("wuhu.session.s.explode").error(),
              make_error_code(errc::unknown_command));
    EXPECT_EQ(wuhu.parse_request("wuhux.session.s.enqueue").error(),
              make_error_code(errc::unknown_command));
}

// With tenancy the tenant is the token after the prefix, and part of the session's identity:
// equal ids of two tenants are two sessions, and every subject of a session names its tenant.
TEST(Subjects, WithTenancyTheTenantIsInEverySubjectAndInTheSessionsKey) {
    const protocol::subject_layout t("wuhu", protocol::tenancy{true, ""});
    auto acme = t.parse_request("wuhu.acme.session.s1.enqueue").value();
    auto globex = t.parse_request("wuhu.globex.session.s1.enqueue").value();
    EXPECT_EQ(acme.sid.str(), "acme.s1");
    EXPECT_EQ(acme.sid.tenant(), "acme");
    EXPECT_EQ(acme.sid.local(), "s1");
    EXPECT_NE(acme.sid, globex.sid);
    EXPECT_EQ(t.request(acme.sid, verb::enqueue), "wuhu.acme.session.s1.enqueue");
    EXPECT_EQ(t.patch(acme.sid), "wuhu.acme.events.s1.patch");
    EXPECT_EQ(t.delta(globex.sid), "wuhu.globex.events.s1.delta");
    EXPECT_EQ(t.events(acme.sid), "wuhu.acme.events.s1.>");
    EXPECT_EQ(t.tool(acme.sid, "lookup").value(), "wuhu.acme.tools.lookup");
    EXPECT_EQ(t.requests(), "wuhu.*.session.>");
    EXPECT_EQ(t.views(), "wuhu.*.admin.sessions");
    EXPECT_EQ(t.fleet_view(), std::optional<std::string>("wuhu.admin.sessions"));
    EXPECT_EQ(t.forwarded_requests("w1"), "wuhu.worker.w1.*.session.>");
    const auto fwd = t.forward("w1", acme.sid, verb::remove).value();
    EXPECT_EQ(fwd, "wuhu.worker.w1.acme.session.s1.delete");
    EXPECT_TRUE(t.for_worker(fwd, "w1"));
    EXPECT_FALSE(t.for_worker(fwd, "w2"));
    EXPECT_EQ(t.parse_forwarded(fwd, "w1").value().sid, acme.sid);
    EXPECT_EQ(t.parse_view("wuhu.acme.admin.sessions").value(), std::optional<std::string>("acme"));
    EXPECT_EQ(t.parse_view("wuhu.admin.sessions").value(), std::nullopt);
    // The plain layout is not served with tenancy: a tenant's clients reach the fleet through
    // their account's imports, which add the tenant.
    EXPECT_FALSE(t.parse_request("wuhu.session.s1.enqueue").has_value());
    // The layout's own words are no tenants.
    for (const char* word : {"session", "admin", "events", "tools", "worker"}) {
        const auto subject = "wuhu." + std::string(word) + ".session.s1.enqueue";
        EXPECT_EQ(t.parse_request(subject).error(), make_error_code(errc::invalid_tenant))
            << subject;
        EXPECT_FALSE(protocol::valid_tenant(word)) << word;
    }
    for (const char* word : {"session", "admin", "events", "tools", "worker"}) {
        EXPECT_FALSE(t.valid_worker(word)) << word;
        EXPECT_TRUE(protocol::subject_layout().valid_worker(word)) << word;
        EXPECT_FALSE(t.local_sessions(word).has_value()) << word;
    }
}

// The sessions stored without a tenant (before tenancy) belong to the default tenant, whose
// sessions keep being stored without one; without a default tenant they have no tenant's
// subjects (the plain layout, which no tenant can reach).
TEST(Subjects, TheDefaultTenantsSessionsKeepTheirKeys) {
    const protocol::subject_layout t("wuhu", protocol::tenancy{true, "legacy"});
    auto r = t.parse_request("wuhu.legacy.session.s1.enqueue").value();
    EXPECT_EQ(r.sid.str(), "s1");
    EXPECT_EQ(t.tenant_of(r.sid), "legacy");
    EXPECT_EQ(t.patch(r.sid), "wuhu.legacy.events.s1.patch");
    EXPECT_EQ(t.session_of("legacy", "s1").value().str(), "s1");
    EXPECT_EQ(t.session_of("acme", "s1").value().str(), "acme.s1");
    EXPECT_EQ(t.scope_of("legacy"), "");
    EXPECT_EQ(t.scope_of("acme"), "acme");
    const protocol::subject_layout none("wuhu", protocol::tenancy{true, ""});
    EXPECT_EQ(none.patch(session_id::parse("s1").value()), "wuhu.events.s1.patch");
    EXPECT_THROW(protocol::subject_layout("wuhu", protocol::tenancy{false, "legacy"}),
                 std::invalid_argument);
    EXPECT_THROW(protocol::subject_layout("wuhu", protocol::tenancy{true, "worker"}),
                 std::invalid_argument);
    EXPECT_THROW(protocol::subject_layout("wuhu.>"), std::invalid_argument);
}

// Issue 29: every value that reaches a subject is checked as a token first. The builders
// refuse what is not one, and a session id or tenant cannot be made of anything else.
TEST(Subjects, EveryTokenABuilderTakesIsCheckedWhole) {
    const protocol::subject_layout t("wuhu", protocol::tenancy{true, ""});
    const auto sid = session_id::parse("s1").value();
    const std::vector<std::string> bad{
        "w1\r\nPUB x 0", "w 1", "w\t1", std::string("w1\0x", 4), "*", ">", "w.1",
        "w\xc3\xa9", std::string(65, 'w'), "", "\x7f"};
    for (const auto& token : bad) {
        EXPECT_FALSE(t.forward(token, sid, verb::enqueue).has_value()) << token;
        EXPECT_FALSE(t.local_sessions(token).has_value()) << token;
        EXPECT_FALSE(t.tool(sid, token).has_value()) << token;
        EXPECT_FALSE(session_id::parse(token).has_value()) << token;
        EXPECT_FALSE(session_id::of_tenant(token, "s1").has_value()) << token;
        EXPECT_FALSE(session_id::of_tenant("acme", token).has_value()) << token;
        EXPECT_FALSE(t.session_of(token, "s1").has_value()) << token;
        EXPECT_FALSE(protocol::valid_tenant(token)) << token;
        EXPECT_FALSE(protocol::valid_worker_id(token)) << token;
        const auto subject = "wuhu." + token + ".session.s1.enqueue";
        EXPECT_FALSE(t.parse_request(subject).has_value()) << token;
    }
}

TEST(Subjects, WorkerIdsAndPrefixesFollowTheSessionIdRule) {
    EXPECT_TRUE(protocol::valid_worker_id("worker-1_A"));
    for (const char* bad : {"", "a.b", "a*", ">", "a b"}) {
        EXPECT_FALSE(protocol::valid_worker_id(bad)) << bad;
    }
    EXPECT_FALSE(protocol::valid_worker_id(std::string(65, 'w')));
    EXPECT_TRUE(protocol::valid_prefix("wuhu"));
    EXPECT_TRUE(protocol::valid_prefix("acme.wuhu"));
    for (const char* bad : {"", ".wuhu", "wuhu.", "a..b", "a.*", "a.>"}) {
        EXPECT_FALSE(protocol::valid_prefix(bad)) << bad;
    }
}

TEST(Replies, ErrorsHaveAStableCodeAndAReadableMessage) {
    auto v = json::parse(protocol::error_reply(make_error_code(errc::not_cancelable)));
    EXPECT_EQ(v.at("ok"), false);
    EXPECT_EQ(v.at("error").at("code"), "not_cancelable");
    EXPECT_FALSE(v.at("error").at("message").as_string().empty());
    auto d = json::parse(protocol::error_reply(decode_error{errc::invalid_type, "author.kind"}));
    EXPECT_EQ(d.at("error").at("code"), "invalid_type");
    EXPECT_NE(d.at("error").at("message").as_string().find("author.kind"), json::string::npos);
}

namespace {

session::decoded<protocol::request> decode(verb v, const char* body,
                                           const protocol::request_limits& limits = {}) {
    return protocol::decode_request("wuhu.session.s." + std::string(protocol::verb_name(v)),
                                    protocol::subject_layout(), body, limits,
                                    [] { return item("generated"); });
}

}  // namespace

TEST(Requests, EnqueueWithoutAnIdGetsTheGeneratedOne) {
    auto c = decode(verb::enqueue, R"({"lane":"steer","content":"stop"})").value();
    const auto& e = std::get<enqueue_input>(c.body);
    EXPECT_EQ(e.id.str(), "generated");
    EXPECT_EQ(e.in, lane::steer);
    auto k = decode(verb::system, R"({"id":"k","source":"asyncBashCallback","content":"x"})")
                 .value();
    EXPECT_EQ(std::get<enqueue_input>(k.body).id.str(), "k");
    EXPECT_EQ(std::get<enqueue_input>(k.body).in, lane::system);
    // An id the request brings costs no generated one.
    auto given = protocol::decode_request(
        "wuhu.session.s.enqueue", protocol::subject_layout(),
        R"({"lane":"steer","id":"mine","content":"x"})", {},
        []() -> queue_item_id {
            ADD_FAILURE() << "an id was generated for a request that had one";
            return item("unused");
        });
    EXPECT_EQ(std::get<enqueue_input>(given.value().body).id.str(), "mine");
}

TEST(Requests, EveryVerbDecodesAndBadBodiesGetTheirCode) {
    EXPECT_TRUE(std::holds_alternative<protocol::cancel_request>(
        decode(verb::cancel, R"({"lane":"followUp","id":"a"})").value().body));
    EXPECT_TRUE(std::holds_alternative<session::settings_update>(
        decode(verb::configure, R"({"model":"m"})").value().body));
    EXPECT_EQ(
        std::get<protocol::abort_request>(decode(verb::abort, R"({"reason":"r"})").value().body)
            .reason,
        "r");
    EXPECT_TRUE(std::holds_alternative<protocol::pause_request>(
        decode(verb::pause, "{}").value().body));
    EXPECT_TRUE(std::holds_alternative<protocol::resume_request>(
        decode(verb::resume, "{}").value().body));
    EXPECT_TRUE(std::holds_alternative<protocol::remove_request>(
        decode(verb::remove, "").value().body));
    EXPECT_TRUE(std::holds_alternative<protocol::subscribe_request>(
        decode(verb::subscribe, "{}").value().body));
    EXPECT_EQ(decode(verb::pause, R"({"x":1})").error().code, errc::unknown_field);
    EXPECT_EQ(decode(verb::remove, R"({"x":1})").error().code, errc::unknown_field);
    EXPECT_EQ(decode(verb::enqueue, R"({"lane":"system","content":"x"})").error().code,
              errc::invalid_lane);
    EXPECT_EQ(decode(verb::system, R"({"source":"a.b","content":"x"})").error().code,
              errc::invalid_source);
}

TEST(Requests, TheSubjectIsReadBeforeTheBody) {
    const protocol::request_limits limits;
    const protocol::subject_layout wuhu;
    auto bad_id = protocol::decode_request("wuhu.session.a*.enqueue", wuhu, "not json", limits,
                                           [] { return item("g"); });
    EXPECT_EQ(bad_id.error().code, errc::invalid_session_id);
    auto bad_verb = protocol::decode_request("wuhu.session.a.explode", wuhu, "not json", limits,
                                             [] { return item("g"); });
    EXPECT_EQ(bad_verb.error().code, errc::unknown_command);
    EXPECT_EQ(decode(verb::enqueue, "not json").error().code, errc::invalid_json);
}

TEST(Replies, OkRepliesCarryWhatTheCommandReturns) {
    protocol::command_result r;
    r.id = item("abc");
    EXPECT_EQ(json::parse(protocol::ok_reply(verb::enqueue, r)),
              json::parse(R"({"ok":true,"id":"abc"})"));
    protocol::command_result c;
    c.canceled = false;
    EXPECT_EQ(json::parse(protocol::ok_reply(verb::cancel, c)),
              json::parse(R"({"ok":true,"canceled":false})"));
    EXPECT_EQ(json::parse(protocol::ok_reply(verb::pause, {})), json::parse(R"({"ok":true})"));
    EXPECT_EQ(json::parse(protocol::ok_reply(verb::abort, {})),
              json::parse(R"({"ok":true,"stopped":"nothing"})"));
    protocol::command_result a;
    a.stopped = session::abort_stage::backoff;
    a.entry = session::entry_seq{9};
    a.duplicate = true;
    EXPECT_EQ(json::parse(protocol::ok_reply(verb::abort, a)),
              json::parse(R"({"ok":true,"stopped":"backoff","entry":9,"duplicate":true})"));
}

TEST(Replies, TheClientReadsOkAndErrorRepliesAndRefusesOthers) {
    EXPECT_EQ(protocol::read_reply(R"({"ok":true,"id":"a"})").value().at("id"), "a");
    auto refused = protocol::read_reply(protocol::error_reply(errc::item_not_found));
    EXPECT_EQ(refused.error().code, "item_not_found");
    for (const char* bad : {"", "[]", R"({"id":"a"})", R"({"ok":false})", "nope"}) {
        EXPECT_EQ(protocol::read_reply(bad).error().code, "bad_reply") << bad;
    }
}

TEST(Replies, ChunksReassembleToTheReplyAndOutOfOrderChunksAreBad) {
    std::string reply = protocol::error_reply("code", std::string(3000, 'x') + "\xc3\xa9");
    auto parts = protocol::chunked(reply, 512);
    ASSERT_GT(parts.size(), 1U);
    protocol::reply_assembler whole;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        ASSERT_LE(parts[i].size(), 512U);
        EXPECT_EQ(whole.take(parts[i]), i + 1 < parts.size()
                                            ? protocol::reply_assembler::progress::more
                                            : protocol::reply_assembler::progress::done);
    }
    EXPECT_EQ(whole.text(), reply);
    protocol::reply_assembler skipped;
    EXPECT_EQ(skipped.take(parts[1]), protocol::reply_assembler::progress::bad);
    protocol::reply_assembler single;
    EXPECT_EQ(single.take(reply), protocol::reply_assembler::progress::done);
    EXPECT_EQ(single.text(), reply);
}

TEST(Events, PayloadsHaveTheDocumentedShape) {
    EXPECT_EQ(protocol::message_start(3, 7),
              json::parse(R"({"type":"message.start","step":3,"epoch":7})"));
    EXPECT_EQ(protocol::text_delta(3, 7, 2, "Hi"),
              json::parse(R"({"type":"text.delta","step":3,"epoch":7,"seq":2,"text":"Hi"})"));
    EXPECT_EQ(
        protocol::tool_call_delta(3, 7, 4, "c1", "echo", "{}"),
        json::parse(
            R"({"type":"tool_call.delta","step":3,"epoch":7,"seq":4,"id":"c1","name":"echo","arguments":"{}"})"));
    EXPECT_EQ(protocol::message_discard(3, 7),
              json::parse(R"({"type":"message.discard","step":3,"epoch":7})"));
    session_state s = enqueued({}, user_in(lane::steer, "a", "x"), 1);
    auto p = since(s, {}).value();
    EXPECT_EQ(patch_from_json(json::parse(protocol::patch_event(p))).value(), p);
    EXPECT_EQ(protocol::read_count(json::object{{"n", -1}, {"m", "x"}, {"k", 7}}, "n"), 0U);
    EXPECT_EQ(protocol::read_count(json::object{{"m", "x"}}, "m"), 0U);
    EXPECT_EQ(protocol::read_count(json::object{{"k", 7}}, "k"), 7U);
}

}  // namespace wuhu::testing

namespace wuhu::testing {

// A subscribe's pages joined (protocol::append_page) carry the last page's registers: each
// page's patch holds the status (and settings) of its own moment, and a watcher that took the
// first page's would hold a status older than the one it noted, and drop the newer ones.
TEST(Replies, JoinedPagesCarryTheLastPagesStatusAndSettings) {
    auto page = [](int from, int to, const char* state, std::uint64_t seq, bool more,
                   const char* model) {
        json::object status{{"state", state}, {"epoch", 3}, {"seq", seq}};
        json::object patch{
            {"from",
             json::object{{"transcript", from}, {"system", 0}, {"steer", 0}, {"followUp", 0}}},
            {"to", json::object{{"transcript", to}, {"system", 0}, {"steer", 0}, {"followUp", 0}}},
            {"transcript", json::array{json::object{{"id", to}, {"type", "party_message"}}}},
            {"journal",
             json::object{
                 {"system", json::array{}}, {"steer", json::array{}}, {"followUp", json::array{}}}},
            {"status", status}};
        if (model != nullptr) {
            patch["settings"] = json::object{{"model", model}};
        }
        json::object reply{{"ok", true},
                           {"patch", patch},
                           {"status", status},
                           {"settings", json::object{{"model", model != nullptr ? model : "x"}}}};
        if (more) {
            reply["more"] = true;
        }
        return reply;
    };
    auto joined = page(0, 1000, "inferring", 10, true, "first");
    protocol::append_page(joined, page(1000, 1200, "idle", 20, false, nullptr));
    const auto& patch = joined.at("patch").as_object();
    EXPECT_EQ(patch.at("transcript").as_array().size(), 2u);
    EXPECT_EQ(patch.at("to").at("transcript"), 1200);
    EXPECT_EQ(patch.at("status").at("state"), "idle") << "the last page's status";
    EXPECT_EQ(patch.at("status").at("seq"), 20);
    EXPECT_FALSE(patch.contains("settings")) << "the reply's own (the last page's) stand";
    EXPECT_EQ(joined.at("settings").at("model"), "x");
    EXPECT_FALSE(joined.contains("more"));
}

}  // namespace wuhu::testing
