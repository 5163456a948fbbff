// A worker (SQLite store and lease in a temp dir, scripted model) on its own thread against a
// real nats-server (scripts/test starts it and sets WUHU_TEST_NATS_URL), and a client: the
// fixture of the request side's tests (server_natstest.cpp, server_fleet_natstest.cpp,
// server_stop_natstest.cpp).
#pragma once

#include "client/client.hpp"
#include "tests/broker/worker_node.hpp"
#include "tests/support/builders.hpp"
#include "tests/support/env.hpp"
#include "tests/support/raw_nats.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <boost/asio/post.hpp>

#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

inline constexpr const char* default_script = R"({"responses":[
    {"chunks":["Hel","lo"],"chunk_delay_ms":5},
    {"text":"second answer"},
    {"text":"third answer"}]})";

// A worker (SQLite store and lease in a temp dir, scripted model) on its own thread, and a
// client.
class worker_fixture : public ::testing::Test {
  protected:
    void SetUp() override {
        client_ = std::make_unique<nats::connection>(nats_url(), "test-client");
        node_ = start_node("w1");
    }
    void TearDown() override {
        node_.reset();
        client_.reset();  // its handlers use the members below
    }

    std::unique_ptr<worker_node> start_node(
        const std::string& id, std::size_t max_reply_bytes = 0,
        std::chrono::milliseconds drain_timeout = std::chrono::seconds(10)) {
        node_options o{nats_url(), prefix_, dir_.path(), id, script_, max_reply_bytes};
        o.drain_timeout = drain_timeout;
        return std::make_unique<worker_node>(std::move(o));
    }

    json::value request(const std::string& sid, const std::string& verb, const std::string& body) {
        return request_raw(prefix_ + ".session." + sid + "." + verb, body);
    }
    json::value request_raw(const std::string& subject, const std::string& body) {
        // Bounded, but generous: under the full parallel run the crash tests saturate the disk.
        auto r = client_->request(subject, body, 30s);
        if (!r) {
            ADD_FAILURE() << "no reply to " << subject;
            return json::object{};
        }
        return json::parse(*r);
    }

    // Collects events of one session.
    void watch(const std::string& sid) {
        client_->subscribe(prefix_ + ".events." + sid + ".>", [this](nats::message m) {
            std::lock_guard lock(mu_);
            events_.push_back({m.subject, json::parse(m.data)});
            cv_.notify_all();
        });
        client_->flush();
    }
    // Waits (at most 10 s) until `pred` holds over the events.
    bool wait_for(
        const std::function<bool(const std::vector<std::pair<std::string, json::value>>&)>& pred) {
        std::unique_lock lock(mu_);
        return cv_.wait_for(lock, 30s, [&] { return pred(events_); });
    }

    std::string script_ = default_script;
    temp_dir dir_;
    // Each test process has its own prefix: ctest runs them in parallel on one nats-server, and
    // a shared prefix would load-balance one test's requests to another test's worker.
    std::string prefix_ = "wuhu_t" + std::to_string(getpid());
    std::unique_ptr<nats::connection> client_;
    std::unique_ptr<worker_node> node_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::pair<std::string, json::value>> events_;
};

// Waits (at most 10 s) until `count` commits are held by the node's stalled disk.
inline bool wait_held(worker_node& n, int count) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (n.store().held_commits() < count && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
    return n.store().held_commits() == count;
}

// The transcript entries of every patch, in order.
inline std::vector<json::value> entries_of(
    const std::vector<std::pair<std::string, json::value>>& events) {
    std::vector<json::value> out;
    for (const auto& [subject, v] : events) {
        if (subject.ends_with(".patch")) {
            for (const auto& e : v.at("transcript").as_array()) {
                out.push_back(e);
            }
        }
    }
    return out;
}

inline bool has_entry(const std::vector<std::pair<std::string, json::value>>& events,
                      const char* type) {
    for (const auto& e : entries_of(events)) {
        if (e.at("type") == type) {
            return true;
        }
    }
    return false;
}

inline bool has_assistant(const std::vector<std::pair<std::string, json::value>>& events,
                          const std::string& text) {
    for (const auto& [subject, v] : events) {
        if (subject.ends_with(".patch")) {
            for (const auto& e : v.at("transcript").as_array()) {
                if (e.at("type") == "assistant_message" && e.at("text").as_string() == text) {
                    return true;
                }
            }
        }
    }
    return false;
}

}  // namespace wuhu::testing
