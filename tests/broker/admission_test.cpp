// Admission per tenant (broker/admission.hpp): token buckets for requests and new sessions per
// second, and the sessions quota, under a clock the test moves.
#include "broker/admission.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

using namespace std::chrono_literals;
using broker::admission;
using broker::tenant_limits;
using broker::token_bucket;

TEST(TokenBucket, AdmitsABurstThenTheRateAndSaysHowLongToWait) {
    const auto t0 = token_bucket::clock::time_point{} + 1h;
    token_bucket b(10, 10, t0);
    for (int i = 0; i < 10; ++i) {
        EXPECT_FALSE(b.take(t0)) << i;
    }
    auto wait = b.take(t0);
    ASSERT_TRUE(wait);
    EXPECT_EQ(*wait, 100ms) << "one token every 100 ms";
    EXPECT_TRUE(b.take(t0 + 50ms));
    EXPECT_FALSE(b.take(t0 + 100ms));
    EXPECT_FALSE(b.full(t0 + 100ms));
    EXPECT_TRUE(b.full(t0 + 2s)) << "it never holds more than its burst";
}

TEST(Admission, EachTenantHasItsOwnRateAndNoLimitAdmitsEverything) {
    const auto t0 = admission::clock::time_point{} + 1h;
    admission a(tenant_limits{2, 0, 0});
    EXPECT_FALSE(a.request("acme", t0));
    EXPECT_FALSE(a.request("acme", t0));
    EXPECT_TRUE(a.request("acme", t0)) << "the third in the same instant is rate limited";
    EXPECT_FALSE(a.request("globex", t0)) << "another tenant is not";
    EXPECT_FALSE(a.request("", t0)) << "nor the fleet's sessions of no tenant";
    EXPECT_FALSE(a.request("acme", t0 + 500ms));
    admission open(tenant_limits{});
    for (int i = 0; i < 1000; ++i) {
        ASSERT_FALSE(open.request("acme", t0));
        ASSERT_FALSE(open.new_session("acme", t0));
    }
    EXPECT_FALSE(open.count_needed("acme", t0)) << "no quota: nothing to count";
}

TEST(Admission, TheSessionsQuotaCountsFromTheStoreThenWhatThisWorkerCreates) {
    const auto t0 = admission::clock::time_point{} + 1h;
    tenant_limits limits;
    limits.max_sessions = 3;
    limits.count_ttl = 10s;
    admission a(limits);
    EXPECT_TRUE(a.count_needed("acme", t0));
    a.counted("acme", 2, t0);
    EXPECT_FALSE(a.count_needed("acme", t0 + 9s));
    EXPECT_FALSE(a.at_quota("acme"));
    a.created("acme");
    EXPECT_TRUE(a.at_quota("acme"));
    EXPECT_FALSE(a.at_quota("globex")) << "not counted yet";
    EXPECT_TRUE(a.count_needed("acme", t0 + 10s)) << "the count is read again after its ttl";
    a.counted("acme", 1, t0 + 10s);  // sessions were deleted meanwhile
    EXPECT_FALSE(a.at_quota("acme"));
}

}  // namespace wuhu::testing
