// Retry policy for transient inference errors: capped exponential backoff with jitter.
#pragma once

#include <chrono>

namespace wuhu::worker {

struct retry_policy {
    std::chrono::milliseconds base{500};
    std::chrono::milliseconds cap{30'000};
    int max_attempts = 6;  // attempts in all, the first included
};

// The wait before retry number `retry` (1 for the first retry): d = min(cap, base * 2^(retry-1)),
// then "equal jitter": d/2 + unit * d/2, where unit in [0, 1) comes from the caller.
inline std::chrono::milliseconds backoff(const retry_policy& p, int retry, double unit) {
    long long d = p.base.count();
    for (int i = 1; i < retry && d < p.cap.count(); ++i) {
        d *= 2;
    }
    if (d > p.cap.count()) {
        d = p.cap.count();
    }
    return std::chrono::milliseconds(d / 2 +
                                     static_cast<long long>(unit * static_cast<double>(d) / 2));
}

}  // namespace wuhu::worker
