// The MCP messages (mcp/messages.hpp) against exchanges as the official TypeScript SDK's server
// sends them over Streamable HTTP: JSON answers, SSE answers split at every byte boundary,
// progress notifications, and malformed messages (clear errors, no crash).
#include "mcp/messages.hpp"
#include "mcp/tools.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <fstream>

namespace wuhu::testing {

namespace json = boost::json;

namespace {

// A tools/call answered as an event stream: a priming event with no data, two progress
// notifications, then the result (as the SDK's StreamableHTTPServerTransport writes them).
const std::string call_stream =
    "id: 1\r\nevent: message\r\ndata: \r\n\r\n"
    "event: message\ndata: {\"method\":\"notifications/progress\",\"params\":{\"progress\":1,"
    "\"total\":3,\"progressToken\":\"c1\"},\"jsonrpc\":\"2.0\"}\n\n"
    "event: message\ndata: {\"method\":\"notifications/progress\",\"params\":{\"progress\":2,"
    "\"total\":3,\"message\":\"halfway\",\"progressToken\":\"c1\"},\"jsonrpc\":\"2.0\"}\n\n"
    "event: message\ndata: {\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"sunny, "
    "21°C\"}]},\"jsonrpc\":\"2.0\",\"id\":7}\n\n";

std::vector<mcp::message> read_all(mcp::reader& r, std::string_view body, std::size_t piece) {
    std::vector<mcp::message> out;
    auto keep = [&](mcp::message m) { out.push_back(std::move(m)); };
    for (std::size_t at = 0; at < body.size(); at += piece) {
        EXPECT_TRUE(r.feed(body.substr(at, piece), keep)) << r.error();
    }
    EXPECT_TRUE(r.finish(keep)) << r.error();
    return out;
}

}  // namespace

TEST(Mcp, TheClientsRequestsAreJsonRpcWithTheProgressTokenInMeta) {
    auto init = json::parse(mcp::initialize_request(1, "0.9"));
    EXPECT_EQ(init.at("jsonrpc"), "2.0");
    EXPECT_EQ(init.at("method"), "initialize");
    EXPECT_EQ(init.at("params").at("protocolVersion"), "2025-11-25");
    EXPECT_EQ(init.at("params").at("clientInfo").at("name"), "wuhu");
    auto call =
        json::parse(mcp::tools_call_request(7, "weather", json::parse(R"({"city":"Oslo"})"), "c1"));
    EXPECT_EQ(call.at("id"), 7);
    EXPECT_EQ(call.at("params").at("name"), "weather");
    EXPECT_EQ(call.at("params").at("arguments").at("city"), "Oslo");
    EXPECT_EQ(call.at("params").at("_meta").at("progressToken"), "c1");
    auto cancel = json::parse(mcp::cancelled_notification(7, "aborted"));
    EXPECT_FALSE(cancel.as_object().contains("id")) << "a notification";
    EXPECT_EQ(cancel.at("params").at("requestId"), 7);
    auto page2 = json::parse(mcp::tools_list_request(3, "next-page"));
    EXPECT_EQ(page2.at("params").at("cursor"), "next-page");
    EXPECT_FALSE(
        json::parse(mcp::tools_list_request(2, "")).at("params").as_object().contains("cursor"));
    auto ping = json::parse(mcp::answer_to_server_request(json::value("p1"), "ping"));
    EXPECT_TRUE(ping.at("result").as_object().empty());
    auto other =
        json::parse(mcp::answer_to_server_request(json::value(4), "sampling/createMessage"));
    EXPECT_EQ(other.at("error").at("code"), -32601);
}

TEST(Mcp, AnEventStreamAnswerSplitAtEveryByteBoundaryGivesTheSameMessages) {
    for (std::size_t piece = 1; piece <= call_stream.size(); ++piece) {
        SCOPED_TRACE("pieces of " + std::to_string(piece) + " bytes");
        mcp::reader r(true);
        const auto got = read_all(r, call_stream, piece);
        ASSERT_EQ(got.size(), 3u);
        EXPECT_EQ(got[0].kind, mcp::message::notification);
        EXPECT_EQ(got[0].method, "notifications/progress");
        const auto p = mcp::parse_progress(got[1].params);
        ASSERT_TRUE(p);
        EXPECT_EQ(p->token, "c1");
        EXPECT_EQ(p->value, 2);
        EXPECT_EQ(got[2].kind, mcp::message::response);
        EXPECT_EQ(got[2].id, 7);
        EXPECT_EQ(mcp::render_call_result(got[2].result).text, "sunny, 21°C");
    }
}

TEST(Mcp, AJsonAnswerIsOneMessageHandedOverAtItsEnd) {
    const std::string body =
        R"({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18",)"
        R"("capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"weather","version":"1"}}})";
    mcp::reader r(false);
    const auto got = read_all(r, body, 5);
    ASSERT_EQ(got.size(), 1u);
    const auto info = mcp::parse_initialize(got[0].result);
    ASSERT_TRUE(info) << info.error();
    EXPECT_EQ(info->protocol_version, "2025-06-18");
    EXPECT_EQ(info->name, "weather");
    EXPECT_TRUE(info->tools_list_changed);
}

TEST(Mcp, MalformedMessagesAreClearErrors) {
    auto why = [](std::string_view text) {
        auto m = mcp::parse_message(text);
        return m ? std::string("accepted") : m.error();
    };
    EXPECT_EQ(why("{"), "not JSON: incomplete JSON");
    EXPECT_EQ(why("[]"), "a JSON-RPC batch (not sent by this revision)");
    EXPECT_EQ(why(R"({"id":1,"result":{}})"),
              "not a JSON-RPC 2.0 message (no \"jsonrpc\":\"2.0\")");
    EXPECT_EQ(why(R"({"jsonrpc":"2.0","result":{}})"), "a JSON-RPC response without an id");
    EXPECT_EQ(why(R"({"jsonrpc":"2.0","id":{},"result":{}})"),
              "a JSON-RPC id must be a string or an integer");
    EXPECT_EQ(why(R"({"jsonrpc":"2.0","id":1})"),
              "a JSON-RPC response with neither a result nor an error");
    EXPECT_EQ(why(R"({"jsonrpc":"2.0","method":7})"),
              "a JSON-RPC \"method\" must be a non-empty string");
    auto err = mcp::parse_message(
        R"({"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Unknown tool: x"}})");
    ASSERT_TRUE(err);
    EXPECT_EQ(err->error_code, -32602);
    EXPECT_EQ(err->error_message, "Unknown tool: x");
    // In a stream: the reader stops at the first bad event and says why.
    mcp::reader r(true);
    int seen = 0;
    EXPECT_FALSE(r.feed("data: {\"jsonrpc\":\"2.0\",\"result\":{}}\n\ndata: 1\n\n",
                        [&](mcp::message) { ++seen; }));
    EXPECT_EQ(seen, 0);
    EXPECT_EQ(r.error(), "an event of the stream: a JSON-RPC response without an id");
    // A JSON body past the limit.
    mcp::reader small(false, 16);
    EXPECT_FALSE(small.feed(std::string(17, ' '), [](mcp::message) {}));
    EXPECT_EQ(small.error(), "the answer is larger than 16 bytes");
    // Not a message at all.
    mcp::reader html(false);
    EXPECT_TRUE(html.feed("<html>", [](mcp::message) {}));
    EXPECT_FALSE(html.finish([](mcp::message) {}));
}

TEST(Mcp, ToolsArePagedAndTheirAnnotationsAndUnusableOnesSaid) {
    const auto page = json::parse(R"({"tools":[
        {"name":"get_weather","description":"Weather now","inputSchema":{"type":"object"},
         "annotations":{"readOnlyHint":true,"idempotentHint":true}},
        {"name":"bad name!","inputSchema":{"type":"object"}},
        {"name":"no_schema"},
        {"name":"charge","inputSchema":{"type":"object","properties":{"cents":{"type":"integer"}}}}],
        "nextCursor":"p2"})");
    std::vector<std::string> skipped;
    auto got = mcp::parse_tools_page(page, &skipped);
    ASSERT_TRUE(got) << got.error();
    ASSERT_EQ(got->tools.size(), 2u);
    EXPECT_EQ(got->tools[0].name, "get_weather");
    EXPECT_EQ(got->tools[0].idempotent_hint, true);
    EXPECT_EQ(got->tools[0].read_only_hint, true);
    EXPECT_EQ(got->tools[1].name, "charge");
    EXPECT_FALSE(got->tools[1].idempotent_hint);
    EXPECT_EQ(got->next_cursor, "p2");
    EXPECT_EQ(skipped.size(), 2u);
    EXPECT_FALSE(mcp::parse_tools_page(json::parse("{}"), nullptr));
    EXPECT_FALSE(mcp::parse_initialize(
        json::parse(R"({"protocolVersion":"1999-01-01","capabilities":{"tools":{}}})")));
    EXPECT_FALSE(
        mcp::parse_initialize(json::parse(R"({"protocolVersion":"2025-06-18","capabilities":{}})")))
        << "a server without tools";
}

TEST(Mcp, CallResultsAreRenderedForTheModelAndIsErrorIsAnErrorResult) {
    auto out = mcp::render_call_result(json::parse(R"({"content":[
        {"type":"text","text":"one"},
        {"type":"image","data":"aGVsbG8=","mimeType":"image/png"},
        {"type":"resource_link","uri":"file:///a.txt","name":"a"},
        {"type":"resource","resource":{"uri":"file:///b.txt","text":"bee"}},
        {"type":"resource","resource":{"uri":"file:///c.bin","blob":"AAAA"}}],
        "structuredContent":{"ignored":"there is text"}})"));
    EXPECT_EQ(out.text,
              "one\n\n[image: image/png, 8 bytes of base64]\n\n[resource: file:///a.txt]\n\nbee\n\n"
              "[resource: file:///c.bin, binary]");
    EXPECT_FALSE(out.is_error);
    auto structured =
        mcp::render_call_result(json::parse(R"({"content":[],"structuredContent":{"t":21}})"));
    EXPECT_EQ(structured.text, R"({"t":21})");
    auto failed = mcp::render_call_result(
        json::parse(R"({"content":[{"type":"text","text":"no such city"}],"isError":true})"));
    EXPECT_TRUE(failed.is_error);
    EXPECT_EQ(failed.text, "no such city");
    EXPECT_TRUE(mcp::render_call_result(json::parse("[]")).is_error);
    EXPECT_FALSE(mcp::parse_progress(json::parse(R"({"progress":1})")));
    EXPECT_EQ(mcp::parse_progress(json::parse(R"({"progressToken":5,"progress":0.5})"))->token,
              "5");
}

TEST(McpConfig, TheToolsFileNamesEachServerAndItsToolsAllowedRenamedAndOverridden) {
    temp_dir dir;
    const auto secrets = dir.path() / "headers.json";
    std::ofstream(secrets) << R"({"Authorization": "Bearer s3cret"})";
    const auto servers = mcp::parse_servers(R"({"mcp_servers": {"files": {
        "url": "https://files.example:8931/mcp", "headers": {"X-Team": "blue"},
        "headers_file": ")" + secrets.string() +
                                            R"(",
        "timeout_ms": 5000, "idle_timeout_ms": 1000, "allow": ["read_file", "write_file"],
        "rename": {"read_file": "files_read"},
        "overrides": {"files_read": {"idempotent": false},
                      "write_file": {"approval": "always", "approval_deadline_ms": 60000}}}}})");
    ASSERT_TRUE(servers) << servers.error();
    ASSERT_EQ(servers->size(), 1u);
    const auto& c = servers->front();
    EXPECT_EQ(c.where.name, "files");
    EXPECT_TRUE(c.where.url.tls);
    EXPECT_EQ(c.where.url.path, "/mcp");
    EXPECT_EQ(c.where.headers.size(), 2u);
    EXPECT_EQ(c.where.headers[1].second, "Bearer s3cret") << "from the headers file";
    EXPECT_EQ(c.timeout, std::chrono::milliseconds(5000));
    EXPECT_EQ(c.idle_timeout, std::chrono::milliseconds(1000));
    EXPECT_EQ(c.approval.at("write_file").mode, session::approval_mode::always);
    // What the server lists becomes: the allowed tools, renamed, their idempotence from the
    // annotations unless overridden.
    std::vector<mcp::tool_info> listed{
        {"read_file", "Reads", R"({"type":"object"})", std::nullopt, true},
        {"write_file", "Writes", R"({"type":"object"})", true, std::nullopt},
        {"delete_all", "Deletes", R"({"type":"object"})", std::nullopt, std::nullopt}};
    const auto tools = mcp::tools_of(nullptr, c, listed);
    ASSERT_EQ(tools.size(), 2u) << "delete_all is not allowed";
    EXPECT_EQ(tools[0]->spec().name, "files_read");
    EXPECT_FALSE(tools[0]->idempotent()) << "read-only, but the file says otherwise";
    EXPECT_EQ(tools[1]->spec().name, "write_file");
    EXPECT_TRUE(tools[1]->idempotent()) << "its idempotentHint";
    EXPECT_EQ(tools[1]->timeout(), std::chrono::milliseconds(5000));
    const auto none = mcp::parse_servers(R"({"tools": {}})");
    ASSERT_TRUE(none);
    EXPECT_TRUE(none->empty());
}

TEST(McpConfig, WithTenancyEachServerNamesItsTenantOrEveryTenant) {
    auto read = [](const std::string& servers, bool tenancy) {
        return mcp::parse_servers(R"({"mcp_servers": )" + servers + "}", tenancy);
    };
    auto acme = read(R"({"f": {"url": "http://x/mcp", "tenant": "acme"},
                         "g": {"url": "http://y/mcp", "tenant": "*"}})",
                     true);
    ASSERT_TRUE(acme) << acme.error();
    EXPECT_EQ((*acme)[0].tenant, "acme");
    EXPECT_EQ((*acme)[1].tenant, "") << "every tenant's sessions";
    const std::string required =
        "mcp_servers.f.tenant is required with tenancy: the tenant whose sessions call the "
        "server (a tenant id), or \"*\" for every tenant's";
    EXPECT_EQ(read(R"({"f": {"url": "http://x/mcp"}})", true).error(), required);
    EXPECT_EQ(read(R"({"f": {"url": "http://x/mcp", "tenant": "a.b"}})", true).error(), required);
    EXPECT_EQ(read(R"({"f": {"url": "http://x/mcp", "tenant": "session"}})", true).error(),
              required)
        << "a word of the subject layout";
    EXPECT_EQ(read(R"({"f": {"url": "http://x/mcp", "tenant": 7}})", true).error(), required);
    EXPECT_EQ(read(R"({"f": {"url": "http://x/mcp", "tenant": "acme"}})", false).error(),
              "mcp_servers.f.tenant needs a fleet with tenancy (--tenancy)");
}

TEST(McpConfig, ABadServerEntryIsAClearErrorAndNoSecretIsInIt) {
    auto why = [](const std::string& servers) {
        auto r = mcp::parse_servers(R"({"mcp_servers": )" + servers + "}");
        return r ? std::string("accepted") : r.error();
    };
    EXPECT_EQ(why(R"({"f": {}})"),
              "mcp_servers.f.url is required (the server's Streamable HTTP endpoint)");
    EXPECT_EQ(why(R"({"f": {"url": "ftp://x"}})").substr(0, 19), "mcp_servers.f.url: ");
    EXPECT_EQ(why(R"({"f": {"url": "http://x/mcp", "colour": 1}})"),
              "mcp_servers.f: unknown field \"colour\"");
    EXPECT_EQ(why(R"({"f": {"url": "http://x/mcp", "idle_timeout_ms": 0}})"),
              "mcp_servers.f.idle_timeout_ms must be 1 to 604800000 (7 days)");
    EXPECT_EQ(why(R"({"f": {"url": "http://x/mcp", "headers": {"X": "a\r\nB: c"}}})"),
              "mcp_servers.f.headers: header \"X\" must be a name and a one-line string");
    EXPECT_EQ(why(R"({"f": {"url": "http://x/mcp", "headers_file": "/nonexistent/h.json"}})"),
              "mcp_servers.f.headers_file: cannot read a JSON object of headers from "
              "/nonexistent/h.json");
    EXPECT_EQ(why(R"({"bad name": {"url": "http://x/mcp"}})"),
              "an MCP server's name is 1-64 of A-Z a-z 0-9 _ -");
    EXPECT_EQ(why(R"({"f": {"url": "http://x/mcp", "overrides": {"t": {"approval": "maybe"}}}})"),
              "mcp_servers.f.overrides.t: \"approval\" must be \"always\" or \"never\"");
}

}  // namespace wuhu::testing
