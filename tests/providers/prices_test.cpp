// The providers file's prices (providers/prices.hpp, issue 33).
#include "providers/prices.hpp"
#include "providers/providers_config.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

using providers::parse_prices;
using providers::price_for;

TEST(Prices, AreDollarsPerMillionTokensOfEachKind) {
    auto t = parse_prices(R"({"endpoints": {}, "prices": {
        "gpt-4o-mini": {"input": 0.15, "cached_input": 0.075, "output": 0.6},
        "claude-sonnet-4": {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15}}})");
    ASSERT_TRUE(t) << t.error();
    ASSERT_EQ(t->size(), 2u);
    EXPECT_EQ(t->at("gpt-4o-mini"),
              (session::model_prices{150'000'000, 75'000'000, 0, 600'000'000}));
    EXPECT_EQ(t->at("claude-sonnet-4"),
              (session::model_prices{3'000'000'000, 300'000'000, 3'750'000'000, 15'000'000'000}));
    // No prices: an empty table.
    auto none = parse_prices(R"({"endpoints": {}})");
    ASSERT_TRUE(none);
    EXPECT_TRUE(none->empty());
}

TEST(Prices, AModelIsPricedByItsNameOrTheLongestKeyThatIsItsPrefixBeforeADash) {
    auto t = parse_prices(R"({"endpoints": {}, "prices": {
        "gpt-4o": {"input": 2.5}, "gpt-4o-mini": {"input": 0.15}}})");
    ASSERT_TRUE(t);
    EXPECT_EQ(price_for(*t, "gpt-4o")->input, 2'500'000'000u);
    EXPECT_EQ(price_for(*t, "gpt-4o-2024-08-06")->input, 2'500'000'000u);
    EXPECT_EQ(price_for(*t, "gpt-4o-mini-2024-07-18")->input, 150'000'000u);
    EXPECT_EQ(price_for(*t, "gpt-4"), nullptr);
    EXPECT_EQ(price_for(*t, "gpt-4omni"), nullptr) << "a prefix counts only before a dash";
}

TEST(Prices, AnAnswerIsPricedByTheModelItsProviderReported) {
    auto t = parse_prices(R"({"endpoints": {}, "prices": {
        "gpt-4o": {"input": 2.5, "output": 10}, "gpt-4o-mini": {"input": 0.15, "output": 0.6}}})");
    ASSERT_TRUE(t);
    session::assistant_message m;
    m.model = "gpt-4o-mini-2024-07-18";  // configured gpt-4o, answered by the mini
    m.usage = session::token_usage{1'000, 0, 100};
    providers::price(m, *t);
    EXPECT_EQ(m.cost, 150'000u + 60'000u);
    m.model = "unpriced";
    providers::price(m, *t);
    EXPECT_EQ(m.cost, 0u);
    // A name nobody priced is priced as the model the session asked for.
    providers::price(m, *t, "gpt-4o");
    EXPECT_EQ(m.cost, 2'500'000u + 1'000'000u);
}

TEST(Prices, BadPricesAreRefusedWithAMessageNamingWhatIsWrong) {
    for (const char* bad : {
             R"({"endpoints": {}, "prices": []})",
             R"({"endpoints": {}, "prices": {"m": {}}})",
             R"({"endpoints": {}, "prices": {"m": {"input": -1}}})",
             R"({"endpoints": {}, "prices": {"m": {"input": "2.5"}}})",
             R"({"endpoints": {}, "prices": {"m": {"tokens": 1}}})",
             R"({"endpoints": {}, "prices": {"m": {"output": 1e7}}})",
             R"({"endpoints": {}, "prices": {"": {"output": 1}}})",
         }) {
        auto t = parse_prices(bad);
        EXPECT_FALSE(t) << bad;
    }
    auto t = parse_prices(R"({"endpoints": {}, "prices": {"m": {"tokens": 1}}})");
    ASSERT_FALSE(t);
    EXPECT_NE(t.error().find("tokens"), std::string::npos) << t.error();
    // The endpoints' parser takes a file with prices, and nothing else beside the endpoints.
    auto env = [](std::string_view) -> std::optional<std::string> { return std::nullopt; };
    EXPECT_TRUE(providers::parse_providers(R"({"endpoints": {}, "prices": {}})", env, env));
    EXPECT_FALSE(providers::parse_providers(R"({"endpoints": {}, "costs": {}})", env, env));
}

}  // namespace wuhu::testing
