// What a worker publishes for each loop event, the codes of its own errors; URLs in logs.
#include "broker/server.hpp"
#include "nats/connection.hpp"
#include "storage/errc.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace json = boost::json;

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
}

TEST(Replies, StoreAndLeaseErrorsKeepTheirCode) {
    auto l = json::parse(protocol::error_reply(make_error_code(storage::errc::lease_lost)));
    EXPECT_EQ(l.at("error").at("code"), "lease_lost");
    auto o = json::parse(protocol::error_reply(make_error_code(ownership::errc::owner_changed)));
    EXPECT_EQ(o.at("error").at("code"), "owner_changed");
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
