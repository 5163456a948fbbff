// The NATS contract's payloads: subjects, the bad-input table, replies, events; URLs in logs.
#include "broker/protocol.hpp"
#include "nats/connection.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace json = boost::json;
using broker::verb;

TEST(Subjects, ParseSessionAndVerb) {
    auto r = broker::parse_subject("wuhu.session.abc-1_X.enqueue", "wuhu").value();
    EXPECT_EQ(r.sid.str(), "abc-1_X");
    EXPECT_EQ(r.what, verb::enqueue);
    EXPECT_EQ(broker::parse_subject("acme.wuhu.session.s.delete", "acme.wuhu").value().what,
              verb::remove);
    EXPECT_EQ(broker::request_subject("wuhu", r.sid, verb::cancel), "wuhu.session.abc-1_X.cancel");
    EXPECT_EQ(broker::patch_subject("wuhu", r.sid), "wuhu.events.abc-1_X.patch");
    EXPECT_EQ(broker::delta_subject("wuhu", r.sid), "wuhu.events.abc-1_X.delta");
}

TEST(Subjects, BadSessionIdsAreInvalidSessionId) {
    for (const char* bad :
         {"wuhu.session.a.b.enqueue", "wuhu.session.*.enqueue", "wuhu.session.>.enqueue",
          "wuhu.session.a b.enqueue", "wuhu.session.enqueue", "wuhu.session..enqueue"}) {
        auto r = broker::parse_subject(bad, "wuhu");
        ASSERT_FALSE(r.has_value()) << bad;
        EXPECT_EQ(r.error(), make_error_code(errc::invalid_session_id)) << bad;
    }
    EXPECT_EQ(broker::parse_subject("wuhu.session.s.explode", "wuhu").error(),
              make_error_code(errc::unknown_command));
}

TEST(Replies, ErrorsHaveAStableCodeAndAReadableMessage) {
    auto v = json::parse(broker::error_reply(make_error_code(errc::not_cancelable)));
    EXPECT_EQ(v.at("ok"), false);
    EXPECT_EQ(v.at("error").at("code"), "not_cancelable");
    EXPECT_FALSE(v.at("error").at("message").as_string().empty());
    auto l = json::parse(broker::error_reply(make_error_code(storage::errc::lease_lost)));
    EXPECT_EQ(l.at("error").at("code"), "lease_lost");
    auto d = json::parse(broker::error_reply(decode_error{errc::invalid_type, "author.kind"}));
    EXPECT_EQ(d.at("error").at("code"), "invalid_type");
    EXPECT_NE(d.at("error").at("message").as_string().find("author.kind"), json::string::npos);
}

TEST(Commands, EnqueueWithoutAnIdGetsTheGeneratedOne) {
    request_limits limits;
    auto c =
        broker::decode_command(verb::enqueue, json::parse(R"({"lane":"steer","content":"stop"})"),
                               limits, item("generated"))
            .value();
    const auto& e = std::get<worker::enqueue_command>(c);
    EXPECT_EQ(e.in.id.str(), "generated");
    EXPECT_EQ(e.in.in, lane::steer);
    auto k =
        broker::decode_command(
            verb::system, json::parse(R"({"id":"k","source":"asyncBashCallback","content":"x"})"),
            limits, item("generated"))
            .value();
    EXPECT_EQ(std::get<worker::enqueue_command>(k).in.id.str(), "k");
    EXPECT_EQ(std::get<worker::enqueue_command>(k).in.in, lane::system);
}

TEST(Commands, EveryVerbDecodesAndBadBodiesGetTheirCode) {
    request_limits limits;
    auto decode = [&](verb v, const char* body) {
        return broker::decode_command(v, json::parse(body), limits, item("g"));
    };
    EXPECT_TRUE(std::holds_alternative<worker::cancel_command>(
        decode(verb::cancel, R"({"lane":"followUp","id":"a"})").value()));
    EXPECT_TRUE(std::holds_alternative<worker::configure_command>(
        decode(verb::configure, R"({"model":"m"})").value()));
    EXPECT_EQ(
        std::get<worker::abort_command>(decode(verb::abort, R"({"reason":"r"})").value()).reason,
        "r");
    EXPECT_TRUE(std::holds_alternative<worker::pause_command>(decode(verb::pause, "{}").value()));
    EXPECT_TRUE(std::holds_alternative<worker::resume_command>(decode(verb::resume, "{}").value()));
    EXPECT_EQ(decode(verb::pause, R"({"x":1})").error().code, errc::unknown_field);
    EXPECT_EQ(decode(verb::enqueue, R"({"lane":"system","content":"x"})").error().code,
              errc::invalid_lane);
    EXPECT_EQ(decode(verb::system, R"({"source":"a.b","content":"x"})").error().code,
              errc::invalid_source);
}

TEST(Replies, OkRepliesCarryWhatTheCommandReturns) {
    worker::command_reply r;
    r.id = item("abc");
    EXPECT_EQ(json::parse(broker::ok_reply(verb::enqueue, r)),
              json::parse(R"({"ok":true,"id":"abc"})"));
    worker::command_reply c;
    c.canceled = false;
    EXPECT_EQ(json::parse(broker::ok_reply(verb::cancel, c)),
              json::parse(R"({"ok":true,"canceled":false})"));
    EXPECT_EQ(json::parse(broker::ok_reply(verb::pause, {})), json::parse(R"({"ok":true})"));
}

TEST(Events, DeltasAndPatchesHaveTheDocumentedShape) {
    EXPECT_EQ(json::parse(*broker::delta_event(worker::stream_began_event{3})),
              json::parse(R"({"type":"message.start","step":3})"));
    EXPECT_EQ(
        json::parse(*broker::delta_event(worker::stream_delta_event{3, 2, "Hi", std::nullopt})),
        json::parse(R"({"type":"text.delta","step":3,"seq":2,"text":"Hi"})"));
    EXPECT_EQ(
        json::parse(*broker::delta_event(
            worker::stream_delta_event{3, 4, "", worker::tool_call_delta{"c1", "echo", "{}"}})),
        json::parse(
            R"({"type":"tool_call.delta","step":3,"seq":4,"id":"c1","name":"echo","arguments":"{}"})"));
    EXPECT_EQ(json::parse(*broker::delta_event(worker::stream_ended_event{3, false})),
              json::parse(R"({"type":"message.discard","step":3})"));
    EXPECT_FALSE(broker::delta_event(worker::stream_ended_event{3, true}).has_value());
    session_state s = enqueued({}, user_in(lane::steer, "a", "x"), 1);
    auto p = since(s, {}).value();
    EXPECT_EQ(patch_from_json(json::parse(broker::patch_event(p))).value(), p);
}

TEST(RedactedUrl, CredentialsNeverReachALogLine) {
    EXPECT_EQ(nats::redacted_url("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    EXPECT_EQ(nats::redacted_url("nats://ann:s3cr@t@nats.internal:4222"),
              "nats://***@nats.internal:4222");
    EXPECT_EQ(nats::redacted_url("nats://tok3n@a:4222,tls://b:4222,nats://u:p@c"),
              "nats://***@a:4222,tls://b:4222,nats://***@c");
    EXPECT_EQ(nats::redacted_url("u:p@host:4222"), "***@host:4222");
    EXPECT_EQ(nats::redacted_url(""), "");
}

}  // namespace wuhu::testing
