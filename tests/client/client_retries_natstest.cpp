// The client library's retries (client/client.hpp), against a worker played by the test on a
// real nats-server (scripts/test starts it and sets WUHU_TEST_NATS_URL): which commands are
// sent again when a reply is late, and with which id.
#include "client/client.hpp"
#include "nats/connection.hpp"
#include "tests/support/env.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

// The test plays the worker on its own prefix: it keeps every request body it gets and answers
// (or not) as `answer` says, given the body and how many came before it.
class fake_worker {
  public:
    using policy =
        std::function<std::optional<std::string>(const json::object& body, std::size_t n)>;
    fake_worker(const std::string& tag, policy answer)
        : prefix_(tag + std::to_string(getpid())), answer_(std::move(answer)) {
        nc_.subscribe(prefix_ + ".session.>", [this](nats::message m) {
            auto body = json::parse(m.data).as_object();
            std::size_t n = 0;
            {
                std::lock_guard lock(mu_);
                n = bodies_.size();
                bodies_.push_back(body);
            }
            if (auto reply = answer_(body, n)) {
                nc_.publish(m.reply, *reply);
            }
        });
        nc_.flush();
    }
    const std::string& prefix() const { return prefix_; }
    std::vector<json::object> bodies() const {
        std::lock_guard lock(mu_);
        return bodies_;
    }

  private:
    std::string prefix_;
    policy answer_;
    mutable std::mutex mu_;
    std::vector<json::object> bodies_;
    nats::connection nc_{nats_url(), "fake-worker"};
};

// `{"ok":true, "stopped":"nothing", "id": <the body's id>}`: an answer to any command.
std::string ok_with_id(const json::object& body) {
    json::object ok{{"ok", true}, {"stopped", "nothing"}};
    if (const auto* id = body.if_contains("id")) {
        ok["id"] = *id;
    }
    return json::serialize(ok);
}

}  // namespace

// A request the client library sends again (after owner_changed, worker_stopping, overloaded
// or rate_limited) is the same request: an enqueue, a system message or an abort sent without
// an id gets one of the client's own, so that a copy refused by one worker and served by
// another is never applied twice (docs/protocol.md, Routing: a frozen owner that wakes up as
// its lease runs out may refuse a forward another worker served). The fake worker refuses
// every request once, then answers it with the id it carries.
TEST(ClientRetries, ARequestSentAgainCarriesTheIdOfItsFirstCopy) {
    fake_worker fake("wuhu_retry", [](const json::object& body, std::size_t n) {
        return n % 2 == 0
                   ? std::string(
                         R"({"ok":false,"error":{"code":"owner_changed","message":"retry"}})")
                   : ok_with_id(body);
    });
    nats::connection nc(nats_url(), "retry-client");
    client::client c(nc, client::options{fake.prefix(), 10s, {}});
    auto item = c.enqueue("s", "followUp", "hello");
    ASSERT_TRUE(item) << item.error().message;
    auto callback = c.system("s", "asyncTaskNotification", "done");
    ASSERT_TRUE(callback) << callback.error().message;
    auto aborted = c.abort("s");
    ASSERT_TRUE(aborted) << aborted.error().message;
    const auto bodies = fake.bodies();
    ASSERT_EQ(bodies.size(), 6u) << "each request refused once, then sent again";
    for (std::size_t i = 0; i < bodies.size(); i += 2) {
        ASSERT_TRUE(bodies[i].contains("id")) << json::serialize(bodies[i]);
        EXPECT_EQ(bodies[i].at("id"), bodies[i + 1].at("id")) << "copy " << i / 2;
        EXPECT_EQ(bodies[i].at("id").as_string().size(), 36u) << "a UUIDv7";
    }
    EXPECT_EQ(*item, bodies[0].at("id").as_string());
    EXPECT_EQ(*callback, bodies[2].at("id").as_string());
    EXPECT_NE(bodies[0].at("id"), bodies[2].at("id"));
}

// The same through call() with a body that has no id (as wuhuctl sends): the id is made once,
// before the first copy; one the caller gave is kept.
TEST(ClientRetries, ACallWithoutAnIdGetsOneKeptByEveryCopy) {
    fake_worker fake("wuhu_callid", [](const json::object& body, std::size_t n) {
        return n % 2 == 0
                   ? std::string(R"({"ok":false,"error":{"code":"owner_changed","message":"x"}})")
                   : ok_with_id(body);
    });
    nats::connection nc(nats_url(), "callid-client");
    client::client c(nc, client::options{fake.prefix(), 10s, {}});
    ASSERT_TRUE(c.call("s", "enqueue", json::object{{"lane", "steer"}, {"content", "hi"}}));
    ASSERT_TRUE(c.call("s", "enqueue", json::object{{"lane", "steer"}, {"content", "hi"},
                                                    {"id", "mine"}}));
    const auto bodies = fake.bodies();
    ASSERT_EQ(bodies.size(), 4u);
    ASSERT_TRUE(bodies[0].contains("id"));
    EXPECT_EQ(bodies[0].at("id"), bodies[1].at("id"));
    EXPECT_EQ(bodies[2].at("id"), "mine");
    EXPECT_EQ(bodies[3].at("id"), "mine");
}

// A command whose reply does not come within the client's attempt_timeout (a worker took it and
// died or froze) is sent again, as the same request, until the timeout: its caller waits for
// the lost copy that long, not its whole timeout. The fake worker drops every first copy.
TEST(ClientRetries, ACommandNotAnsweredInTimeIsSentAgainAsTheSameRequest) {
    fake_worker fake("wuhu_lost", [](const json::object& body, std::size_t n) {
        return n % 2 == 0 ? std::nullopt : std::optional<std::string>(ok_with_id(body));
    });
    nats::connection nc(nats_url(), "lost-client");
    client::client c(nc, client::options{.prefix = fake.prefix(),
                                         .timeout = 20s,
                                         .tenant = {},
                                         .attempt_timeout = 300ms});
    const auto began = std::chrono::steady_clock::now();
    auto item = c.enqueue("s", "followUp", "hello");
    const auto took = std::chrono::steady_clock::now() - began;
    ASSERT_TRUE(item) << item.error().message;
    EXPECT_LT(took, 5s) << "the lost copy cost the attempt's 300 ms, not the 20 s timeout";
    const auto bodies = fake.bodies();
    ASSERT_EQ(bodies.size(), 2u);
    EXPECT_EQ(bodies[0].at("id"), bodies[1].at("id"));
    EXPECT_EQ(*item, bodies[0].at("id").as_string());
}

// A command that could undo another client's later one if a copy came late (configure, pause,
// resume, delete) is sent once, and waited for the whole timeout.
TEST(ClientRetries, APauseWithALateReplyIsNotSentAgain) {
    fake_worker fake("wuhu_once", [](const json::object&, std::size_t) {
        return std::optional<std::string>();  // never answers
    });
    nats::connection nc(nats_url(), "once-client");
    client::client c(nc, client::options{.prefix = fake.prefix(),
                                         .timeout = 1500ms,
                                         .tenant = {},
                                         .attempt_timeout = 200ms});
    auto paused = c.pause("s");
    ASSERT_FALSE(paused);
    EXPECT_EQ(paused.error().code, "no_reply");
    EXPECT_EQ(fake.bodies().size(), 1u) << "sent once";
}

}  // namespace wuhu::testing
