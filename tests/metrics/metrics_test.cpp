// The worker's metrics (metrics/metrics.hpp) without a worker: series whose labels come from
// outside stay a bounded set.
#include "metrics/metrics.hpp"

#include <gtest/gtest.h>

#include <regex>

namespace wuhu::testing {

namespace {

double sample(const std::string& text, const std::string& series) {
    const auto at = text.find("\n" + series + " ");
    if (at == std::string::npos) {
        return -1;
    }
    return std::stod(text.substr(at + series.size() + 2));
}

}  // namespace

// Issue 33: a model's name comes from its provider; the first 16 a worker sees get series of
// their own, and the others share "other".
TEST(Metrics, TokensAndCostByModelStayABoundedSetOfSeries) {
    metrics::worker_metrics m("memory");
    const auto empty = m.text();
    EXPECT_EQ(sample(empty, R"(wuhu_inference_tokens_total{kind="input",model="other"})"), 0)
        << "exported from the start";
    for (int i = 0; i < 20; ++i) {
        m.inference_usage("model-" + std::to_string(i), session::token_usage{100, 0, 10, 0, 3},
                          2'500'000'000);
    }
    m.inference_usage("model-3", session::token_usage{1, 0, 0, 0, 0}, 0);
    const auto text = m.text();
    EXPECT_EQ(sample(text, R"(wuhu_inference_tokens_total{kind="input",model="model-3"})"), 101);
    EXPECT_EQ(sample(text, R"(wuhu_inference_tokens_total{kind="reasoning",model="model-0"})"), 3);
    EXPECT_EQ(sample(text, R"(wuhu_cost_total{model="model-15"})"), 2.5);
    EXPECT_EQ(text.find(R"(model="model-16")"), std::string::npos) << text;
    EXPECT_EQ(sample(text, R"(wuhu_inference_tokens_total{kind="input",model="other"})"), 400);
    EXPECT_EQ(sample(text, R"(wuhu_cost_total{model="other"})"), 10);
    // A name no model has (empty, or too long) counts as "other" too.
    m.inference_usage("", session::token_usage{1, 0, 0, 0, 0}, 0);
    m.inference_usage(std::string(200, 'x'), session::token_usage{1, 0, 0, 0, 0}, 0);
    EXPECT_EQ(sample(m.text(), R"(wuhu_inference_tokens_total{kind="input",model="other"})"), 402);
}

}  // namespace wuhu::testing
