// Many NATS requests in flight at once, for the process tests: send() publishes every request
// of a batch without waiting in between (each with a reply subject of its own, unless it wants
// none), then waits (bounded) for the replies and returns them in the order of the batch.
#pragma once

#include "nats/connection.hpp"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace wuhu::testing {

struct burst_request {
    std::string subject;
    std::string body;
    bool wants_reply = true;
};

class burst {
  public:
    explicit burst(nats::connection& nc) : nc_(nc) {
        std::random_device rd;
        inbox_ = "_BURST." + std::to_string(rd()) + std::to_string(rd());
        token_ = nc_.subscribe(inbox_ + ".*", [this](nats::message m) {
            const auto i = std::stoul(m.subject.substr(inbox_.size() + 1));
            std::lock_guard lock(mu_);
            replies_[i] = std::move(m.data);
            cv_.notify_all();
        });
        nc_.flush();
    }
    ~burst() { nc_.unsubscribe(token_); }
    burst(const burst&) = delete;

    // The reply to each request (nullopt: none within `timeout`, or none asked for).
    std::vector<std::optional<std::string>> send(const std::vector<burst_request>& batch,
                                                 std::chrono::milliseconds timeout) {
        const std::size_t first = next_;
        std::vector<std::size_t> expected;
        for (const auto& r : batch) {
            const std::size_t i = next_++;
            if (r.wants_reply) {
                expected.push_back(i);
                nc_.publish_request(r.subject, inbox_ + "." + std::to_string(i), r.body);
            } else {
                nc_.publish(r.subject, r.body);
            }
        }
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, timeout, [&] {
            for (auto i : expected) {
                if (!replies_.contains(i)) {
                    return false;
                }
            }
            return true;
        });
        std::vector<std::optional<std::string>> out;
        for (std::size_t i = first; i < next_; ++i) {
            auto it = replies_.find(i);
            out.push_back(it == replies_.end() ? std::nullopt
                                               : std::optional<std::string>(it->second));
        }
        return out;
    }

  private:
    nats::connection& nc_;
    std::string inbox_;
    std::size_t token_ = 0;
    std::size_t next_ = 0;
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::size_t, std::string> replies_;
};

}  // namespace wuhu::testing
