// The NATS connection against a real nats-server (scripts/test starts it): what a batching
// thread publishes waits for its queue and then arrives in order; a batch larger than the
// socket takes at once arrives whole; what a queue that never ran held is sent when the
// batching ends or the connection closes.
#include "nats/connection.hpp"
#include "tests/support/env.hpp"

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <unistd.h>
#include <condition_variable>
#include <mutex>

namespace wuhu::testing {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// The messages one subject receives.
class inbox {
  public:
    inbox(nats::connection& nc, const std::string& subject) {
        nc.subscribe(subject, [this](nats::message m) {
            std::lock_guard lock(mu_);
            got_.push_back(std::move(m.data));
            cv_.notify_all();
        });
        nc.flush();
    }
    // The first `n` messages, once they are all in (fewer after 10 s).
    std::vector<std::string> first(std::size_t n) {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, 10s, [&] { return got_.size() >= n; });
        return got_;
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::string> got_;
};

std::string unique_subject(const std::string& what) {
    return "test.connection." + what + "." + std::to_string(::getpid());
}

std::vector<std::string> numbered(std::size_t n, std::size_t bytes = 0) {
    std::vector<std::string> v;
    for (std::size_t i = 0; i < n; ++i) {
        auto s = std::to_string(i);
        s.resize(std::max(bytes, s.size()), static_cast<char>('a' + i % 26));
        v.push_back(std::move(s));
    }
    return v;
}

}  // namespace

TEST(Connection, WhatABatchingThreadPublishesWaitsForItsQueueThenArrivesInOrder) {
    const auto subject = unique_subject("batch");
    nats::connection sub(nats_url(), "sub");
    inbox in(sub, subject);
    nats::connection pub(nats_url(), "pub");
    asio::io_context io;
    const auto sent = numbered(100);
    std::size_t held = 0;
    asio::post(io, [&] {
        pub.batch_sends_here([&](std::function<void()> send) { asio::post(io, std::move(send)); });
        for (const auto& m : sent) {
            ASSERT_TRUE(pub.publish(subject, m));
        }
        held = pub.buffered();
    });
    io.run();  // the publishing handler, then the send it queued
    EXPECT_GT(held, 100u * 4) << "nothing is sent before the thread's queue runs";
    EXPECT_EQ(in.first(sent.size()), sent);
    EXPECT_EQ(pub.buffered(), 0u);
    pub.batch_sends_here(nullptr);
}

// 12 MiB in one batch: the socket takes it in parts, and the connection's own thread sends the
// rest as the socket drains.
TEST(Connection, ABatchLargerThanTheSocketTakesArrivesWhole) {
    const auto subject = unique_subject("large");
    nats::connection sub(nats_url(), "sub");
    inbox in(sub, subject);
    nats::connection pub(nats_url(), "pub");
    asio::io_context io;
    const auto sent = numbered(48, 256 * 1024);
    asio::post(io, [&] {
        pub.batch_sends_here([&](std::function<void()> send) { asio::post(io, std::move(send)); });
        for (const auto& m : sent) {
            ASSERT_TRUE(pub.publish(subject, m));
        }
    });
    io.run();
    const auto got = in.first(sent.size());
    ASSERT_EQ(got.size(), sent.size());
    EXPECT_TRUE(got == sent) << "every message whole and in order";
    pub.batch_sends_here(nullptr);
}

TEST(Connection, WhatAQueueThatNeverRanHeldIsSentWhenTheBatchingEnds) {
    const auto subject = unique_subject("ended");
    nats::connection sub(nats_url(), "sub");
    inbox in(sub, subject);
    nats::connection pub(nats_url(), "pub");
    pub.batch_sends_here([](std::function<void()>) {});  // a queue that never runs
    const auto sent = numbered(3);
    for (const auto& m : sent) {
        ASSERT_TRUE(pub.publish(subject, m));
    }
    EXPECT_GT(pub.buffered(), 0u);
    pub.batch_sends_here(nullptr);
    EXPECT_EQ(in.first(sent.size()), sent);
}

TEST(Connection, ClosingTheConnectionSendsWhatItHeld) {
    const auto subject = unique_subject("closed");
    nats::connection sub(nats_url(), "sub");
    inbox in(sub, subject);
    auto pub = std::make_unique<nats::connection>(nats_url(), "pub");
    pub->batch_sends_here([](std::function<void()>) {});
    const auto sent = numbered(3);
    for (const auto& m : sent) {
        ASSERT_TRUE(pub->publish(subject, m));
    }
    pub.reset();
    EXPECT_EQ(in.first(sent.size()), sent);
}

// A publish from any other thread is sent by the connection's own thread, at once.
TEST(Connection, AnotherThreadsPublishIsSentWithoutTheBatchingQueue) {
    const auto subject = unique_subject("other");
    nats::connection sub(nats_url(), "sub");
    inbox in(sub, subject);
    nats::connection pub(nats_url(), "pub");
    pub.batch_sends_here([](std::function<void()>) {});
    std::thread other([&] { EXPECT_TRUE(pub.publish(subject, "from another thread")); });
    other.join();
    EXPECT_EQ(in.first(1), std::vector<std::string>{"from another thread"});
    pub.batch_sends_here(nullptr);
}

}  // namespace wuhu::testing
