// The NATS connection against a real nats-server (scripts/test starts it): what a batching
// thread publishes waits for its queue and then arrives in order; a batch larger than the
// socket takes at once arrives whole; what a queue that never ran held is sent when the
// batching ends or the connection closes.
#include "nats/connection.hpp"
#include "tests/support/env.hpp"

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

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

// Publishes `sent` from one handler of an io_context whose thread batches its sends, then runs
// the send it queued. Returns the bytes the connection held when the handler ended.
std::size_t publish_batched(nats::connection& pub, const std::string& subject,
                            const std::vector<std::string>& sent) {
    asio::io_context io;
    std::size_t held = 0;
    asio::post(io, [&] {
        pub.batch_sends_here([&](std::function<void()> send) { asio::post(io, std::move(send)); });
        for (const auto& m : sent) {
            EXPECT_TRUE(pub.publish(subject, m));
        }
        held = pub.buffered();
    });
    io.run();
    pub.batch_sends_here(nullptr);
    return held;
}

}  // namespace

TEST(Connection, WhatABatchingThreadPublishesWaitsForItsQueueThenArrivesInOrder) {
    const auto subject = unique_subject("batch");
    nats::connection sub(nats_url(), "sub");
    inbox in(sub, subject);
    nats::connection pub(nats_url(), "pub");
    const auto sent = numbered(100);
    const auto held = publish_batched(pub, subject, sent);
    EXPECT_GT(held, 100u * 4) << "nothing is sent before the thread's queue runs";
    EXPECT_EQ(in.first(sent.size()), sent);
    EXPECT_EQ(pub.buffered(), 0u);
}

// 12 MiB in one batch: the socket takes it in parts, and the connection's own thread sends the
// rest as the socket drains.
TEST(Connection, ABatchLargerThanTheSocketTakesArrivesWhole) {
    const auto subject = unique_subject("large");
    nats::connection sub(nats_url(), "sub");
    inbox in(sub, subject);
    nats::connection pub(nats_url(), "pub");
    const auto sent = numbered(48, 256 * 1024);
    publish_batched(pub, subject, sent);
    const auto got = in.first(sent.size());
    ASSERT_EQ(got.size(), sent.size());
    EXPECT_TRUE(got == sent) << "every message whole and in order";
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

// Defect: a flush on the batching thread, while a send it queued waited behind it, left the
// flush's PING unsent until the connection's thread lost patience, which incoming messages
// kept postponing: the flush took its whole 5 s (the executor, every session, frozen).
TEST(Connection, AFlushOnTheBatchingThreadDoesNotWaitForItsOwnQueue) {
    const auto subject = unique_subject("busy");
    nats::connection pub(nats_url(), "pub");
    inbox in(pub, subject);  // pub reads all the time: its thread never runs out of patience
    nats::connection noise(nats_url(), "noise");
    std::atomic<bool> done{false};
    std::thread chatter([&] {
        while (!done) {
            noise.publish(subject, "noise");
            std::this_thread::sleep_for(2ms);
        }
    });
    asio::io_context io;
    std::chrono::steady_clock::duration took{};
    asio::post(io, [&] {
        pub.batch_sends_here([&](std::function<void()> send) { asio::post(io, std::move(send)); });
        asio::post(io, [&] {
            const auto t0 = std::chrono::steady_clock::now();
            pub.flush();
            took = std::chrono::steady_clock::now() - t0;
        });
        pub.publish(subject + ".x", "queued");  // its send queued behind the flushing handler
    });
    io.run();
    done = true;
    chatter.join();
    pub.batch_sends_here(nullptr);
    EXPECT_LT(took, 1s);
}

// Defect: a server error that closes the connection (libnats closes it from inside the read
// that got it, on the connection's own thread) left that thread waiting for itself: the
// connection could never be destroyed, and a worker never exited.
TEST(Connection, AConnectionTheServerClosedWithAnErrorCanBeDestroyed) {
    const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(::listen(lfd, 1), 0);
    socklen_t len = sizeof addr;
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
    // A server that says hello, answers the client's PING, then sends an error that closes.
    std::thread server([lfd] {
        const int c = ::accept(lfd, nullptr, nullptr);
        const std::string info =
            "INFO {\"server_id\":\"fake\",\"version\":\"2.9.0\",\"proto\":1,"
            "\"max_payload\":1048576,\"headers\":true}\r\n";
        [[maybe_unused]] auto n = ::write(c, info.data(), info.size());
        std::string got;
        char buf[512];
        while (got.find("PING\r\n") == std::string::npos) {
            const auto r = ::read(c, buf, sizeof buf);
            if (r <= 0) {
                break;
            }
            got.append(buf, static_cast<std::size_t>(r));
        }
        const std::string bye = "PONG\r\n-ERR 'Unknown Protocol Operation'\r\n";
        n = ::write(c, bye.data(), bye.size());
        std::this_thread::sleep_for(200ms);
        ::close(c);
    });
    auto* nc = new nats::connection(
        "nats://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)), "closed-by-server");
    for (int i = 0; i < 100 && nc->connected(); ++i) {
        std::this_thread::sleep_for(10ms);
    }
    EXPECT_FALSE(nc->connected()) << "the error closed it";
    // Destroyed on a thread of its own, which a hang leaves behind (the test still ends).
    std::promise<void> deleted;
    auto destroyed = deleted.get_future();
    std::thread([nc, deleted = std::move(deleted)]() mutable {
        delete nc;
        deleted.set_value();
    }).detach();
    const bool gone = destroyed.wait_for(5s) == std::future_status::ready;
    server.join();
    ::close(lfd);
    ASSERT_TRUE(gone) << "the connection's destructor hangs";
}

}  // namespace wuhu::testing
