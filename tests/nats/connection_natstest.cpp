// The NATS connection against a real nats-server (scripts/test starts it): what a batching
// thread publishes waits for its queue and then arrives in order; a batch larger than the
// socket takes at once arrives whole; what a queue that never ran held is sent when the
// batching ends or the connection closes.
#include "nats/connection.hpp"
#include "tests/support/env.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
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

// Issue 31, defect 13: `--nats` takes several servers, comma-separated (with or without spaces),
// and connects through whichever answers (port 1 refuses at once here).
// Issue 31, defect 12: ~connection unsubscribed without waiting, so a handler still running on
// a libnats thread used its closure (and what it captured) after the connection was gone. The
// destructor (and unsubscribe) now returns only once the handler has returned.
TEST(Connection, ADestroyedConnectionsHandlerHasReturnedBeforeTheDestructorDoes) {
    for (const bool by_unsubscribe : {false, true}) {
        auto nc = std::make_unique<nats::connection>(nats_url(), "outlive");
        std::atomic<bool> started{false}, finished{false};
        const auto token = nc->subscribe("outlive.x", [&](nats::message) {
            started = true;
            std::this_thread::sleep_for(300ms);  // still running when the owner goes
            finished = true;
        });
        nc->flush();
        nats::connection pub(nats_url(), "outlive-pub");
        pub.publish("outlive.x", "go");
        pub.flush();
        for (int i = 0; i < 200 && !started; ++i) {
            std::this_thread::sleep_for(5ms);
        }
        ASSERT_TRUE(started);
        if (by_unsubscribe) {
            nc->unsubscribe(token);
        } else {
            nc.reset();
        }
        EXPECT_TRUE(finished) << (by_unsubscribe ? "unsubscribe" : "~connection")
                              << " returned while the handler ran";
        while (!finished) {
            std::this_thread::sleep_for(5ms);  // (before fixed: let it end before its captures go)
        }
    }
}

TEST(Connection, ConnectsThroughAListOfServersWhoseFirstOrLastIsDown) {
    const std::string down = "nats://127.0.0.1:1";
    for (const auto& list : {down + "," + nats_url(), nats_url() + ", " + down,
                             down + " , " + nats_url() + ","}) {
        nats::connection nc(list, "server-list");
        EXPECT_TRUE(nc.connected()) << list;
        const auto subject = unique_subject("list");
        nc.subscribe(subject, [&nc](nats::message m) { nc.publish(m.reply, "pong"); });
        nc.flush();
        EXPECT_EQ(nc.request(subject, "ping", std::chrono::seconds(5)).value_or(""), "pong")
            << "a round trip through the server that is up: " << list;
    }
}

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

// Issue 29: libnats writes a subject into the protocol verbatim, so a subject with CR LF ends
// the PUB line and starts a command of the caller's choosing. Every publish, request and
// forwarded request checks its subject (and reply subject) first: nothing reaches the server.
// (Wildcards and empty tokens are no command: clients may send them, and nats-server refuses
// to route them; the worker's own subjects never hold one, protocol/subjects.hpp.)
TEST(Connection, ASubjectThatIsNoSubjectIsNeverPublished) {
    nats::connection nc(nats_url(), "subjects");
    const std::string probe = unique_subject("probe");
    inbox seen(nc, probe + ".>");
    inbox whole(nc, probe);
    const std::vector<std::string> bad{
        probe + " 0\r\n\r\nPUB " + probe + ".injected 5\r\nhello",
        probe + "\r\nPUB " + probe + ".x 0",
        probe + ".a b",
        probe + ".a\tb",
        probe + ".a" + std::string(1, '\0') + "b",
        probe + ".a\x7f",
        probe + ".a\x1b",
        probe + "." + std::string(1100, 'x'),
        "",
    };
    for (const auto& subject : bad) {
        EXPECT_FALSE(nats::valid_publish_subject(subject)) << subject;
        EXPECT_FALSE(nc.publish(subject, "x")) << subject;
        if (!subject.empty()) {  // an empty reply subject is a plain publish
            EXPECT_FALSE(nc.publish_request(probe + ".ok", subject, "x")) << subject;
        }
        EXPECT_FALSE(nc.publish_request(subject, "reply.to", "x")) << subject;
        EXPECT_FALSE(nc.request(subject, "x", 50ms).has_value()) << subject;
        EXPECT_EQ(nc.request_async(subject, {}, "x", [](nats::reply) {}), 0u) << subject;
    }
    EXPECT_TRUE(nats::valid_publish_subject(probe + ".ok"));
    nc.flush();
    EXPECT_TRUE(nc.publish(probe + ".last", "last"));  // delivered in order after the rest
    EXPECT_EQ(seen.first(1), std::vector<std::string>{"last"});
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(seen.first(0).size(), 1u) << "a refused subject reached the server";
    EXPECT_TRUE(whole.first(0).empty());
}

// A user allowed to subscribe only to `_INBOX_<user>.>` (docs/security.md) can make requests
// with that inbox prefix, in every form the connection has (request, request_many, request_all,
// request_async); with the default prefix the server refuses the inbox and nothing comes back.
TEST(Connection, RequestsUseTheInboxPrefixTheUsersPermissionsAllow) {
    own_nats server({}, R"(authorization {
  users: [
    {user: svc, password: svc-pw, permissions: {subscribe: "svc.>", publish: {allow: ["_INBOX_app.>", "_INBOX.>"]}}}
    {user: app, password: app-pw, permissions: {publish: "svc.>", subscribe: "_INBOX_app.>"}}
  ]
})");
    ASSERT_TRUE(server.up());
    nats::connection svc(server.url("svc:svc-pw"), "svc");
    svc.subscribe("svc.echo", [&svc](nats::message m) { svc.publish(m.reply, "echo:" + m.data); });
    svc.flush();
    nats::options o;
    o.url = server.url();
    o.auth.user = "app";
    o.auth.password = "app-pw";
    o.inbox_prefix = "_INBOX_app";
    nats::connection app(o);
    EXPECT_EQ(app.request("svc.echo", "a", 5s), std::optional<std::string>("echo:a"));
    std::vector<std::string> many;
    EXPECT_TRUE(app.request_many("svc.echo", "b", 5s, [&](std::string m) {
        many.push_back(std::move(m));
        return false;
    }));
    EXPECT_EQ(many, std::vector<std::string>{"echo:b"});
    auto all = app.request_all({"svc.echo", "svc.echo"}, "c", 5s);
    EXPECT_EQ(all[0], std::optional<std::string>("echo:c"));
    EXPECT_EQ(all[1], std::optional<std::string>("echo:c"));
    std::promise<std::string> answered;
    ASSERT_NE(app.request_async("svc.echo", {}, "d",
                                [&](nats::reply r) { answered.set_value(r.data); }),
              0u);
    auto got = answered.get_future();
    ASSERT_EQ(got.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(got.get(), "echo:d");

    // The default prefix: the server refuses the subscription to the inbox.
    o.inbox_prefix = "_INBOX";
    nats::connection plain(o);
    EXPECT_FALSE(plain.request("svc.echo", "e", 1s).has_value());
    // A prefix that is no subject is refused before connecting; so are two kinds of credentials.
    o.inbox_prefix = "_INBOX app";
    EXPECT_THROW(nats::connection{o}, std::invalid_argument);
    o.inbox_prefix = "_INBOX_app";
    o.auth.token = "t";
    EXPECT_THROW(nats::connection{o}, std::invalid_argument);
}

// nats-server restarts with a password set: the connection's events name the server with its
// credentials redacted, and the error of a refused connection holds no secret.
TEST(Connection, EventsAndErrorsNeverCarryTheCredentials) {
    own_nats server({"--user", "u", "--pass", "ev3nt-pw"});
    ASSERT_TRUE(server.up());
    std::mutex mu;
    std::vector<std::string> said;
    nats::options o;
    o.url = server.url("u:ev3nt-pw");
    o.on_connection = [&](std::string_view event, std::string_view url) {
        std::lock_guard lock(mu);
        said.push_back(std::string(event) + " " + std::string(url));
    };
    {
        nats::connection nc(o);
        ASSERT_GE(server.stop(), 0);
        ASSERT_TRUE(server.start());
        // The event comes on libnats's thread, after connected() may already say so: wait
        // for the event itself (a check right after connected() raced it).
        auto reconnected = [&] {
            std::lock_guard lock(mu);
            return std::any_of(said.begin(), said.end(), [](const std::string& s) {
                return s.starts_with("reconnected nats://***@127.0.0.1");
            });
        };
        for (int i = 0; i < 200 && !reconnected(); ++i) {
            std::this_thread::sleep_for(50ms);
        }
        EXPECT_TRUE(nc.connected());
        EXPECT_TRUE(reconnected());
    }
    {
        std::lock_guard lock(mu);
        ASSERT_FALSE(said.empty());
        for (const auto& s : said) {
            EXPECT_EQ(s.find("ev3nt-pw"), std::string::npos) << s;
        }
    }
    try {
        nats::connection refused(server.url("u:wr0ng-pw"), "refused");
        ADD_FAILURE() << "the wrong password was accepted";
    } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        EXPECT_EQ(what.find("wr0ng-pw"), std::string::npos) << what;
        EXPECT_NE(what.find("nats://***@127.0.0.1"), std::string::npos) << what;
    }
}

}  // namespace wuhu::testing
