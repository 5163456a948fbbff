// Issue 14: the saved provider streams (tests/data/providers/) are what real clients accept.
// tests/external/streams.mjs parses each with the official `openai` and `@anthropic-ai/sdk`
// npm packages (clients this project did not write); this test decodes the same bytes with
// Wuhu's decoders and compares: text, tool calls (arguments as JSON values), usage.
#include "providers/anthropic.hpp"
#include "providers/openai.hpp"
#include "tests/providers/provider_streams.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include <filesystem>
#include <fstream>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

template <class Decoder>
session::assistant_message wuhu_parse(const std::string& name) {
    recording_sink sink;
    Decoder d(sink, "m");
    feed_stream(d, saved_stream(name));
    EXPECT_TRUE(d.done()) << name;
    EXPECT_FALSE(d.error()) << name;
    return d.message();
}

void same(const std::string& name, const session::assistant_message& ours,
          const json::value& theirs) {
    SCOPED_TRACE(name);
    EXPECT_EQ(ours.text, theirs.at("text").as_string());
    const auto& calls = theirs.at("tool_calls").as_array();
    ASSERT_EQ(ours.tool_calls.size(), calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(ours.tool_calls[i].id.str(), calls[i].at("id").as_string());
        EXPECT_EQ(ours.tool_calls[i].name, calls[i].at("name").as_string());
        EXPECT_EQ(json::parse(ours.tool_calls[i].arguments),
                  json::parse(calls[i].at("arguments").as_string()))
            << "the arguments, as JSON values";
    }
    const auto& u = theirs.at("usage");
    EXPECT_EQ(ours.usage.input, u.at("input").to_number<std::uint64_t>());
    EXPECT_EQ(ours.usage.cached_input, u.at("cached_input").to_number<std::uint64_t>());
    EXPECT_EQ(ours.usage.output, u.at("output").to_number<std::uint64_t>());
    EXPECT_EQ(ours.usage.cache_write, u.at("cache_write").to_number<std::uint64_t>());
}

}  // namespace

TEST(SdkStreams, TheOfficialSdksParseTheSavedStreamsAsWuhuDoes) {
    const std::filesystem::path external =
        std::filesystem::path(WUHU_TEST_DATA) / ".." / "external";
    ASSERT_TRUE(std::filesystem::exists(external / "node_modules" / "openai") &&
                std::filesystem::exists(external / "node_modules" / "@anthropic-ai" / "sdk"))
        << "the npm packages openai and @anthropic-ai/sdk are not installed in tests/external: "
           "scripts/test installs them (npm install)";
    temp_dir dir;
    spawn_options o;
    o.out = (dir.path() / "parsed.json").string();
    o.log = (dir.path() / "node.log").string();
    pid_t p = spawn("node",
                    {(external / "streams.mjs").string(),
                     (std::filesystem::path(WUHU_TEST_DATA) / "providers").string()},
                    o);
    ASSERT_EQ(wait_exit(p, 60s), 0) << [&] {
        std::ifstream f(o.log);
        return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    }();
    std::ifstream f(o.out);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const auto theirs = json::parse(text);
    ASSERT_EQ(theirs.as_object().size(), 4u) << text;
    for (const char* name : {"openai_text.sse", "openai_tools.sse"}) {
        same(name, wuhu_parse<providers::openai_stream>(name), theirs.at(name));
    }
    for (const char* name : {"anthropic_text.sse", "anthropic_tools.sse"}) {
        same(name, wuhu_parse<providers::anthropic_stream>(name), theirs.at(name));
    }
}

}  // namespace wuhu::testing
