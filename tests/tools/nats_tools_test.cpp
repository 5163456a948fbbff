// The tools file (tools/nats_tools.hpp): what it accepts, and a message naming the field
// for what it does not.
#include "tools/nats_tools.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

using std::chrono::milliseconds;

TEST(ToolsFile, ReadsEveryFieldAndFillsTheDefaults) {
    auto tools = tools::parse_tools(R"({"tools": {
        "get_weather": {"description": "The weather now",
                        "schema": {"type": "object", "required": ["city"],
                                   "properties": {"city": {"type": "string"}}},
                        "idempotent": true, "timeout_ms": 9000},
        "start_build": {"description": "Starts a build", "schema": {"type": "object"},
                        "subject": "ci.builds.start", "timeout_ms": 500},
        "plain": {"description": "Defaults", "schema": {"type": "object"}}}})");
    ASSERT_TRUE(tools) << tools.error();
    ASSERT_EQ(tools->size(), 3u);
    const auto& w = (*tools)[0];
    EXPECT_EQ(w.spec.name, "get_weather");
    EXPECT_EQ(w.spec.description, "The weather now");
    EXPECT_NE(w.spec.schema.find("\"required\":[\"city\"]"), std::string::npos) << w.spec.schema;
    EXPECT_TRUE(w.idempotent);
    EXPECT_EQ(w.timeout, milliseconds(9000));
    EXPECT_EQ(w.attempt_timeout, milliseconds(3000)) << "a third of the timeout";
    EXPECT_EQ(w.subject, "") << "the worker's prefix fills it in";
    const auto& b = (*tools)[1];
    EXPECT_EQ(b.subject, "ci.builds.start");
    EXPECT_FALSE(b.idempotent);
    EXPECT_EQ(b.timeout, milliseconds(500));
    const auto& p = (*tools)[2];
    EXPECT_EQ(p.timeout, milliseconds(30000));
    EXPECT_FALSE(p.idempotent);
}

TEST(ToolsFile, TheDefaultSubjectIsThePrefixsToolsSubject) {
    auto tools = tools::parse_tools(
        R"({"tools": {"lookup": {"description": "d", "schema": {"type": "object"}},
                      "other": {"description": "d", "schema": {"type": "object"}, "subject": "x.y"}}})");
    ASSERT_TRUE(tools) << tools.error();
    EXPECT_EQ(tools::subject_of((*tools)[0], protocol::subject_layout("acme.wuhu")), "acme.wuhu.tools.lookup");
    EXPECT_EQ(tools::subject_of((*tools)[1], protocol::subject_layout("acme.wuhu")), "x.y");
}

TEST(ToolsFile, BadFilesAreRefusedWithTheFieldNamed) {
    const std::pair<const char*, const char*> cases[] = {
        {"not json", "not JSON"},
        {R"({"tool": {}})", "must be {\"tools\""},
        {R"({"tools": [], "x": 1})", "must be {\"tools\""},
        {R"({"tools": {"a b": {"description": "d", "schema": {"type": "object"}}}})",
         "tool \"a b\": a name is 1-64 of [A-Za-z0-9_-]"},
        {R"({"tools": {"a\r\nPUB x 0": {"description": "d", "schema": {"type": "object"}}}})",
         "a name is 1-64 of [A-Za-z0-9_-]"},
        {R"({"tools": {"a.b": {"description": "d", "schema": {"type": "object"}}}})",
         "a name is 1-64 of [A-Za-z0-9_-]"},
        {R"({"tools": {"t": {"description": "d", "schema": {"type": "object"}, "subject": "a\r\nPUB x"}}})",
         "\"subject\" must be tokens"},
        {R"({"tools": {"t": {"description": "d", "schema": {"type": "object"}, "retries": 3}}})",
         "tool \"t\": unknown field \"retries\""},
        {R"({"tools": {"t": {"schema": {"type": "object"}}}})", "tool \"t\": \"description\" must be"},
        {R"({"tools": {"t": {"description": "", "schema": {"type": "object"}}}})", "\"description\" must be"},
        {R"({"tools": {"t": {"description": "d"}}})", "\"schema\" must be a JSON Schema object"},
        {R"({"tools": {"t": {"description": "d", "schema": "object"}}})",
         "\"schema\" must be a JSON Schema object"},
        {R"({"tools": {"t": {"description": "d", "schema": {}}}})",
         "\"schema\" must have \"type\": \"object\""},
        {R"({"tools": {"t": {"description": "d", "schema": {"type": "array"}}}})",
         "\"schema\" must have \"type\": \"object\""},
        {R"({"tools": {"t": {"description": "d", "schema": {"type": "object"}, "subject": "a..b"}}})",
         "\"subject\" must be tokens"},
        {R"({"tools": {"t": {"description": "d", "schema": {"type": "object"}, "subject": "a.>"}}})",
         "\"subject\" must be tokens"},
        {R"({"tools": {"t": {"description": "d", "schema": {"type": "object"}, "idempotent": "yes"}}})",
         "\"idempotent\" must be true or false"},
        {R"({"tools": {"t": {"description": "d", "schema": {"type": "object"}, "timeout_ms": 0}}})",
         "\"timeout_ms\" must be 1-86400000 ms"},
        {R"({"tools": {"t": {"description": "d", "schema": {"type": "object"}, "timeout_ms": 1.5}}})",
         "\"timeout_ms\" must be 1-86400000 ms"},
        {R"({"tools": {"t": {"description": "d", "schema": {"type": "object"}, "attempt_timeout_ms": 10}}})",
         "\"attempt_timeout_ms\" is for idempotent tools"},
    };
    for (const auto& [file, says] : cases) {
        auto r = tools::parse_tools(file);
        ASSERT_FALSE(r) << file;
        EXPECT_NE(r.error().find(says), std::string::npos) << file << " -> " << r.error();
    }
}

TEST(ToolsFile, ApprovalTermsForAnyToolBuiltInsToo) {
    const std::string file = R"({"tools": {
        "deploy": {"description": "Deploys", "schema": {"type": "object"},
                   "approval": "always", "approval_deadline_ms": 600000,
                   "approval_default": "approve"},
        "echo": {"approval": "always"},
        "plain": {"description": "Defaults", "schema": {"type": "object"}}}})";
    auto services = tools::parse_tools(file);
    ASSERT_TRUE(services) << services.error();
    EXPECT_EQ(services->size(), 2u) << "a built-in's entry is no service";
    auto terms = tools::parse_approvals(file);
    ASSERT_TRUE(terms) << terms.error();
    ASSERT_EQ(terms->size(), 2u) << "plain needs none";
    EXPECT_EQ(terms->at("deploy"), (session::tool_approval{session::approval_mode::always, 600000,
                                                           session::decision::approve}));
    EXPECT_EQ(terms->at("echo"), (session::tool_approval{session::approval_mode::always, 0,
                                                         session::decision::reject}));
    for (const char* bad : {
             R"({"tools": {"echo": {"approval": "sometimes"}}})",
             R"({"tools": {"echo": {"approval_default": "respond"}}})",
             R"({"tools": {"echo": {"approval_deadline_ms": 0}}})",
             R"({"tools": {"echo": {"description": "mine"}}})",
         }) {
        EXPECT_FALSE(tools::parse_approvals(bad)) << bad;
        EXPECT_FALSE(tools::parse_tools(bad)) << bad;
    }
}

}  // namespace wuhu::testing
