// Admission control per tenant (DESIGN.md "Bounds"): requests and new sessions per second, and
// the sessions a tenant may keep. Without tenancy every session is of the tenant "" (the fleet).
//
// The rates are kept per worker (token buckets: a burst of one second's worth, then the rate):
// a fleet of N workers admits up to N times the rate, shared out by the queue group. The count
// of a tenant's sessions is read from the store's index and kept for `count_ttl`, counting the
// sessions this worker creates meanwhile: workers creating at once may overshoot the limit by
// what they create within one `count_ttl`.
//
// Executor: the server's (not thread-safe).
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace wuhu::broker {

struct tenant_limits {
    double requests_per_second = 0;      // per worker and tenant; 0: no limit
    double new_sessions_per_second = 0;  // per worker and tenant; 0: no limit
    std::size_t max_sessions = 0;        // per tenant, in the store; 0: no limit
    std::chrono::milliseconds count_ttl{10'000};
};

// A token bucket: `rate` tokens a second, at most `burst` held (full at first).
class token_bucket {
  public:
    using clock = std::chrono::steady_clock;
    token_bucket(double rate, double burst, clock::time_point now)
        : rate_(rate), burst_(burst), tokens_(burst), last_(now) {}
    // Takes a token if one is there; otherwise how long until one is.
    std::optional<std::chrono::milliseconds> take(clock::time_point now);
    bool full(clock::time_point now);

  private:
    void refill(clock::time_point now);
    double rate_;
    double burst_;
    double tokens_;
    clock::time_point last_;
};

class admission {
  public:
    using clock = std::chrono::steady_clock;
    explicit admission(tenant_limits limits) : limits_(limits) {}
    const tenant_limits& limits() const { return limits_; }

    // A request of `tenant`: nullopt when admitted, else the wait to suggest (rate_limited).
    std::optional<std::chrono::milliseconds> request(std::string_view tenant, clock::time_point now);
    // A new session of `tenant` (checked before it is created): nullopt when admitted, else
    // the wait to suggest (rate_limited). Takes a token only when admitted.
    std::optional<std::chrono::milliseconds> new_session(std::string_view tenant,
                                                         clock::time_point now);

    // The sessions quota: whether the tenant's count must be read from the store first.
    bool count_needed(std::string_view tenant, clock::time_point now) const;
    void counted(std::string_view tenant, std::size_t sessions, clock::time_point now);
    // Whether the tenant has as many sessions as it may (false when not counted).
    bool at_quota(std::string_view tenant) const;
    // The tenant has one more session.
    void created(std::string_view tenant);

  private:
    using buckets = std::map<std::string, token_bucket, std::less<>>;
    static std::optional<std::chrono::milliseconds> take(buckets& from, std::string_view tenant,
                                                         double rate, clock::time_point now);
    struct count {
        std::size_t sessions = 0;
        clock::time_point read;
    };
    tenant_limits limits_;
    buckets requests_;
    buckets creations_;
    std::map<std::string, count, std::less<>> counts_;
};

}  // namespace wuhu::broker
