// The edge: every command body is decoded strictly, and each bad input gets its stable code.
#include "protocol/requests.hpp"

#include <gtest/gtest.h>

namespace wuhu::protocol {

using namespace wuhu::session;

namespace json = boost::json;

namespace {

request_limits small_limits() {
    request_limits l;
    l.max_content_bytes = 16;
    l.max_request_bytes = 512;
    return l;
}

// decode_sessions_query naming sessions by their ids (a tenant's view).
decoded<sessions_query> sessions_query_of(const json::value& body) {
    return decode_sessions_query(body);
}

template <class F>
decode_error error_of(std::string_view raw, F decode) {
    auto body = parse_body(raw, small_limits());
    if (!body) {
        return body.error();
    }
    auto r = decode(*body);
    EXPECT_FALSE(r.has_value()) << raw;
    return r ? decode_error{errc::ok, ""} : r.error();
}

auto enqueue = [](const json::value& v) { return decode_enqueue(v, small_limits()); };
auto system = [](const json::value& v) { return decode_system(v, small_limits()); };

}  // namespace

TEST(EnqueueRequest, DecodesTheDesignPayload) {
    auto body = parse_body(
        R"({"lane":"steer","id":"k-1","author":{"id":"u1","name":"Ann","kind":"human"},"content":"stop"})",
        small_limits());
    auto r = decode_enqueue(body.value(), small_limits()).value();
    EXPECT_EQ(r.in, lane::steer);
    EXPECT_EQ(r.id->str(), "k-1");
    EXPECT_EQ(std::get<participant>(r.from).name, "Ann");
    EXPECT_EQ(r.content, "stop");
    auto minimal =
        decode_enqueue(parse_body(R"({"lane":"followUp","content":"hi"})", small_limits()).value(),
                       small_limits())
            .value();
    EXPECT_FALSE(minimal.id.has_value());
    EXPECT_TRUE(std::holds_alternative<unknown_author>(minimal.from));
}

struct bad_case {
    const char* body;
    errc code;
};

TEST(EnqueueRequest, BadInputTable) {
    const bad_case cases[] = {
        {"not json", errc::invalid_json},
        {"[1]", errc::invalid_type},
        {"{\"lane\":\"steer\",\"content\":\"\xFF\"}", errc::invalid_utf8},
        {R"({"lane":"steer"})", errc::missing_field},
        {R"({"lane":"steer","content":5})", errc::invalid_type},
        {R"({"lane":"sideways","content":"x"})", errc::invalid_lane},
        {R"({"lane":"system","content":"x"})", errc::invalid_lane},
        {R"({"lane":7,"content":"x"})", errc::invalid_type},
        {R"({"lane":"steer","content":"x","colour":"red"})", errc::unknown_field},
        {R"({"lane":"steer","content":"0123456789abcdefg"})", errc::content_too_large},
        {R"({"lane":"steer","content":"a\u0000b"})", errc::invalid_content},
        {R"({"lane":"steer","id":"","content":"x"})", errc::invalid_item_id},
        {R"({"lane":"steer","id":5,"content":"x"})", errc::invalid_type},
        {R"({"lane":"steer","author":{"id":"u","name":"A","kind":"robot"},"content":"x"})",
         errc::invalid_author},
        {R"({"lane":"steer","author":{"kind":"system"},"content":"x"})", errc::invalid_author},
        {R"({"lane":"steer","author":{"id":"u","name":"A\nB","kind":"bot"},"content":"x"})",
         errc::invalid_author},
    };
    for (const auto& c : cases) {
        EXPECT_EQ(error_of(c.body, enqueue).code, c.code) << c.body;
    }
    std::string huge = R"({"lane":"steer","content":")" + std::string(600, 'x') + "\"}";
    EXPECT_EQ(error_of(huge, enqueue).code, errc::content_too_large);
}

TEST(CancelRequest, NeedsALaneAndAnId) {
    auto ok = decode_cancel(json::parse(R"({"lane":"followUp","id":"a"})")).value();
    EXPECT_EQ(ok.in, lane::follow_up);
    EXPECT_EQ(error_of(R"({"lane":"followUp"})", decode_cancel).code, errc::missing_field);
    EXPECT_EQ(error_of(R"({"lane":"x","id":"a"})", decode_cancel).code, errc::invalid_lane);
    // The system lane: a scheduled callback can be canceled (its items cannot: the rule).
    EXPECT_EQ(decode_cancel(json::parse(R"({"lane":"system","id":"timer-a"})")).value().in,
              lane::system);
}

TEST(SystemRequest, TakesASourceAndContent) {
    auto ok = decode_system(json::parse(R"({"source":"asyncBashCallback","content":"done"})"),
                            small_limits())
                  .value();
    EXPECT_EQ(ok.source.str(), "asyncBashCallback");
    EXPECT_EQ(error_of(R"({"source":"a b","content":"x"})", system).code, errc::invalid_source);
    EXPECT_EQ(error_of(R"({"content":"x"})", system).code, errc::missing_field);
}

TEST(SubscribeRequest, SinceIsOptionalAndStrict) {
    EXPECT_EQ(decode_subscribe(json::parse("{}")).value().since, (version_vector{}));
    EXPECT_EQ(decode_subscribe(
                  json::parse(R"({"since":{"transcript":4,"system":0,"steer":0,"followUp":1}})"))
                  .value()
                  .since,
              (version_vector{4, 0, 0, 1}));
    EXPECT_EQ(error_of(R"({"since":{"transcript":-4}})", decode_subscribe).code,
              errc::invalid_version);
    // A version names every component (was: the lanes could be left out).
    EXPECT_EQ(error_of(R"({"since":{"transcript":0}})", decode_subscribe).code,
              errc::invalid_version);
    EXPECT_EQ(error_of(R"({"since":{"transcript":4,"followUp":1}})", decode_subscribe).code,
              errc::invalid_version);
    EXPECT_EQ(error_of(R"({"since":3})", decode_subscribe).code, errc::invalid_version);
}

TEST(ConfigureRequest, UpdatesOnlyTheGivenFieldsAndValidatesTheResult) {
    auto r =
        decode_configure(json::parse(R"({"model":"m2","tools":["echo","clock"]})"), small_limits())
            .value();
    settings s = r.applied_to(settings{}).value();
    EXPECT_EQ(s.model, "m2");
    EXPECT_EQ(s.tools, (std::vector<std::string>{"echo", "clock"}));
    EXPECT_EQ(s.context_limit, settings{}.context_limit);
    auto bad = decode_configure(json::parse(R"({"context_limit":10})"), small_limits()).value();
    EXPECT_EQ(bad.applied_to(settings{}).error(), make_error_code(errc::invalid_settings));
    auto cfg = [](const json::value& v) { return decode_configure(v, small_limits()); };
    EXPECT_EQ(error_of(R"({"tools":[1]})", cfg).code, errc::invalid_type);
    EXPECT_EQ(error_of(R"({"temperature":1})", cfg).code, errc::unknown_field);
    EXPECT_EQ(error_of(R"({"utc_offset_minutes":100000})", cfg).code, errc::invalid_settings);
}

// Defect: a NUL in a text field other than content was accepted (SQLite stored it; PostgreSQL
// then answered `corrupt`), and errors inside the author named the field without its path.
TEST(EveryTextField, RefusesNulAndNamesTheFieldByItsPath) {
    struct field_case {
        const char* body;
        errc code;
        const char* field;
    };
    auto cfg = [](const json::value& v) { return decode_configure(v, small_limits()); };
    const field_case configure_cases[] = {
        {R"({"model":"a\u0000b"})", errc::invalid_content, "model"},
        {R"({"tools":["echo\u0000x"]})", errc::invalid_content, "tools.0"},
    };
    for (const auto& c : configure_cases) {
        auto e = error_of(c.body, cfg);
        EXPECT_EQ(e.code, c.code) << c.body;
        EXPECT_EQ(e.field, c.field) << c.body;
    }
    const field_case enqueue_cases[] = {
        {R"({"lane":"steer","author":{"id":"u","name":"A\u0000","kind":"bot"},"content":"x"})",
         errc::invalid_content, "author.name"},
        {R"({"lane":"steer","author":{"id":"u","name":"A","email":"a\u0000@x","kind":"bot"},"content":"x"})",
         errc::invalid_content, "author.email"},
        {R"({"lane":"steer","author":{"id":"u","name":"A","email":5,"kind":"bot"},"content":"x"})",
         errc::invalid_type, "author.email"},
        {R"({"lane":"steer","author":{"id":"u\u0000","name":"A","kind":"bot"},"content":"x"})",
         errc::invalid_content, "author.id"},
    };
    for (const auto& c : enqueue_cases) {
        auto e = error_of(c.body, enqueue);
        EXPECT_EQ(e.code, c.code) << c.body;
        EXPECT_EQ(e.field, c.field) << c.body;
    }
    EXPECT_EQ(error_of(R"({"reason":"a\u0000"})", decode_abort).code, errc::invalid_content);
    EXPECT_EQ(error_of(R"({"source":"s\u0000","content":"x"})", system).code,
              errc::invalid_content);
    EXPECT_EQ(error_of(R"({"owner":"w\u0000"})", sessions_query_of).code,
              errc::invalid_content);
}

// Issue 29: the owner filter becomes a token of the subject the owner is asked on; anything
// that is no worker id (CR LF, spaces, wildcards, dots, non-ASCII, too long) is refused.
TEST(SessionsQuery, TheOwnerFilterIsAWorkerIdOrRefused) {
    for (const char* owner : {"x 0\r\n\r\nPUB probe.injected 5\r\nhello", "w 1", "w\t1", "*",
                              ">", "w1.admin", "w\u00f6rker", ""}) {
        const auto body = json::serialize(json::object{{"owner", owner}});
        auto e = error_of(body, sessions_query_of);
        EXPECT_EQ(e.code, errc::invalid_query) << body;
        EXPECT_EQ(e.field, "owner") << body;
    }
    const auto long_owner = json::serialize(json::object{{"owner", std::string(65, 'w')}});
    EXPECT_EQ(error_of(long_owner, sessions_query_of).code, errc::invalid_query);
    EXPECT_EQ(decode_sessions_query(json::parse(R"({"owner":"worker-7_b"})")).value().owner,
              "worker-7_b");
}

TEST(EmptyRequests, AcceptAnEmptyBodyOrEmptyObjectOnly) {
    EXPECT_TRUE(decode_empty(parse_body("", small_limits()).value()).has_value());
    EXPECT_TRUE(decode_empty(parse_body("{}", small_limits()).value()).has_value());
    EXPECT_EQ(error_of(R"({"x":1})", decode_empty).code, errc::unknown_field);
    EXPECT_EQ(decode_abort(json::parse("{}")).value().reason, "aborted");
    EXPECT_EQ(decode_abort(json::parse(R"({"reason":"user"})")).value().reason, "user");
    EXPECT_EQ(decode_abort(json::parse(R"({"id":"stop-1"})")).value().id, "stop-1");
    EXPECT_EQ(decode_abort(json::parse("{}")).value().id, "");
    EXPECT_EQ(error_of(R"({"id":""})", decode_abort).code, errc::invalid_item_id);
    EXPECT_EQ(error_of(R"({"id":"a\nb"})", decode_abort).code, errc::invalid_item_id);
    EXPECT_EQ(error_of(R"({"id":7})", decode_abort).code, errc::invalid_type);
}

}  // namespace wuhu::protocol

namespace wuhu::testing {

TEST(DecideRequest, ReadsTheThreeVerbsAndRefusesWhatIsNotOneOfThem) {
    const auto approve = protocol::decode_decide(
        session::decision::approve, boost::json::parse(R"({"call":"c1","arguments":{"cents":3},
                               "author":{"id":"u2","name":"Bea","kind":"human"}})"),
        {});
    ASSERT_TRUE(approve);
    EXPECT_EQ(approve->in.call.str(), "c1");
    EXPECT_EQ(approve->in.arguments, R"({"cents":3})");
    const auto respond = protocol::decode_decide(
        session::decision::respond, boost::json::parse(R"({"call":"c1","output":"42"})"), {});
    ASSERT_TRUE(respond);
    EXPECT_EQ(respond->in.message, "42");
    for (const auto& [what, body] : std::vector<std::pair<session::decision, std::string>>{
             {session::decision::approve, R"({})"},
             {session::decision::approve, R"({"call":"c1","arguments":"{}"})"},
             {session::decision::respond, R"({"call":"c1"})"},
             {session::decision::reject, R"({"call":"c1","author":{"kind":"system"}})"},
             {session::decision::reject, R"({"call":"c1","output":"x"})"},
         }) {
        EXPECT_FALSE(protocol::decode_decide(what, boost::json::parse(body), {})) << body;
    }
}

TEST(SessionsQuery, ApprovalsAndTheCostOrder) {
    auto q = protocol::decode_sessions_query(
        boost::json::parse(R"({"awaiting_approval":true,"order":"cost","after_cost":7})"));
    ASSERT_TRUE(q);
    EXPECT_EQ(q->awaiting_approval, true);
    EXPECT_TRUE(q->by_cost);
    EXPECT_EQ(q->after_cost, 7u);
    for (const char* bad :
         {R"({"order":"size"})", R"({"after_cost":7})", R"({"order":"cost","owner":"w1"})",
          R"({"order":"cost","state":"idle"})"}) {
        EXPECT_FALSE(protocol::decode_sessions_query(boost::json::parse(bad))) << bad;
    }
}

TEST(TenantBudgets, ABudgetPerTenant) {
    auto b = protocol::decode_tenant_budgets(
        boost::json::parse(R"({"acme":{"turns":5,"cost_usd":"2.5"},"globex":{}})"));
    ASSERT_TRUE(b);
    EXPECT_EQ(b->at("acme").turns, 5u);
    EXPECT_EQ(b->at("acme").cost, 2'500'000'000u);
    EXPECT_FALSE(protocol::decode_tenant_budgets(boost::json::parse(R"({"session":{}})")));
    EXPECT_FALSE(protocol::decode_tenant_budgets(boost::json::parse(R"({"acme":{"turns":-1}})")));
    EXPECT_FALSE(protocol::decode_tenant_budgets(boost::json::parse(R"([1])")));
}

}  // namespace wuhu::testing
