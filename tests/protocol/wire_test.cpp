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
    auto r = protocol::parse_subject("wuhu.session.abc-1_X.enqueue", "wuhu").value();
    EXPECT_EQ(r.sid.str(), "abc-1_X");
    EXPECT_EQ(r.what, verb::enqueue);
    EXPECT_EQ(protocol::parse_subject("acme.wuhu.session.s.delete", "acme.wuhu").value().what,
              verb::remove);
    EXPECT_EQ(protocol::request_subject("wuhu", r.sid, verb::cancel),
              "wuhu.session.abc-1_X.cancel");
    EXPECT_EQ(protocol::patch_subject("wuhu", r.sid), "wuhu.events.abc-1_X.patch");
    EXPECT_EQ(protocol::delta_subject("wuhu", r.sid), "wuhu.events.abc-1_X.delta");
}

TEST(Subjects, BadSessionIdsAreInvalidSessionId) {
    for (const char* bad :
         {"wuhu.session.a.b.enqueue", "wuhu.session.*.enqueue", "wuhu.session.>.enqueue",
          "wuhu.session.a b.enqueue", "wuhu.session.enqueue", "wuhu.session..enqueue"}) {
        auto r = protocol::parse_subject(bad, "wuhu");
        ASSERT_FALSE(r.has_value()) << bad;
        EXPECT_EQ(r.error(), make_error_code(errc::invalid_session_id)) << bad;
    }
    EXPECT_EQ(protocol::parse_subject("wuhu.session.s.explode", "wuhu").error(),
              make_error_code(errc::unknown_command));
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
                                    "wuhu", body, limits, [] { return item("generated"); });
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
        "wuhu.session.s.enqueue", "wuhu", R"({"lane":"steer","id":"mine","content":"x"})", {},
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
    auto bad_id = protocol::decode_request("wuhu.session.a*.enqueue", "wuhu", "not json", limits,
                                           [] { return item("g"); });
    EXPECT_EQ(bad_id.error().code, errc::invalid_session_id);
    auto bad_verb = protocol::decode_request("wuhu.session.a.explode", "wuhu", "not json", limits,
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
    EXPECT_EQ(protocol::message_start(3), json::parse(R"({"type":"message.start","step":3})"));
    EXPECT_EQ(protocol::text_delta(3, 2, "Hi"),
              json::parse(R"({"type":"text.delta","step":3,"seq":2,"text":"Hi"})"));
    EXPECT_EQ(
        protocol::tool_call_delta(3, 4, "c1", "echo", "{}"),
        json::parse(
            R"({"type":"tool_call.delta","step":3,"seq":4,"id":"c1","name":"echo","arguments":"{}"})"));
    EXPECT_EQ(protocol::message_discard(3), json::parse(R"({"type":"message.discard","step":3})"));
    session_state s = enqueued({}, user_in(lane::steer, "a", "x"), 1);
    auto p = since(s, {}).value();
    EXPECT_EQ(patch_from_json(json::parse(protocol::patch_event(p))).value(), p);
    EXPECT_EQ(protocol::read_count(json::object{{"n", -1}, {"m", "x"}, {"k", 7}}, "n"), 0U);
    EXPECT_EQ(protocol::read_count(json::object{{"m", "x"}}, "m"), 0U);
    EXPECT_EQ(protocol::read_count(json::object{{"k", 7}}, "k"), 7U);
}

}  // namespace wuhu::testing
