// The worker's log lines are JSON objects whatever the message holds.
#include "runtime/log.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <boost/json.hpp>

#include <sstream>

namespace wuhu::testing {

namespace json = boost::json;

TEST(JsonLog, EveryLineIsAJsonObjectWithTheMessageIntact) {
    std::ostringstream out;
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    spdlog::logger log("test", sink);
    const std::string worker = R"(w"1%n\)";  // escaped too, and not an spdlog flag
    log.set_formatter(runtime::json_log_formatter(worker));
    const std::vector<std::string> messages = {
        "plain",
        R"(fatal: CREATE TABLE x (id TEXT): table "x" already exists)",
        "two\nlines\tand a tab",
        R"(back\slash and %v %n 100%)",
        std::string("control \x01 and \x1f"),
        "caf\xC3\xA9 \xE2\x9C\x93",
    };
    for (const auto& m : messages) {
        log.warn("{}", m);
    }
    std::istringstream lines(out.str());
    std::string line;
    std::size_t i = 0;
    while (std::getline(lines, line)) {
        ASSERT_LT(i, messages.size()) << line;
        boost::system::error_code ec;
        auto v = json::parse(line, ec);
        ASSERT_FALSE(ec) << line;
        ASSERT_TRUE(v.is_object()) << line;
        EXPECT_EQ(v.at("msg").as_string(), messages[i]) << line;
        EXPECT_EQ(v.at("worker").as_string(), worker) << line;
        EXPECT_EQ(v.at("level").as_string(), "warning") << line;
        const std::string time(v.at("time").as_string());
        EXPECT_EQ(time.size(), std::string("2026-11-23T02:15:23.364Z").size()) << time;
        EXPECT_EQ(time.back(), 'Z') << time;
        ++i;
    }
    EXPECT_EQ(i, messages.size());
}

}  // namespace wuhu::testing
