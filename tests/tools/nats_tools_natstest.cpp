// Tools served over NATS (tools/nats_tools.hpp) against a real nats-server (scripts/test
// starts it): a call is a request with the session, the call and the deadline in its headers;
// no responders and no answer give error results at once; an idempotent call is tried again
// within its timeout; an abort withdraws the request.
#include "tests/support/env.hpp"
#include "tools/nats_tools.hpp"

#include <gtest/gtest.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <unistd.h>
#include <atomic>
#include <condition_variable>
#include <mutex>

namespace wuhu::testing {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

namespace {

// What a running tool may use: the real clock.
class services final : public tools::tool_services {
  public:
    runtime::clock& time() override { return clock_; }
    asio::awaitable<bool> schedule_timer(session::timer) override { co_return false; }

  private:
    runtime::system_clock clock_;
};

// The requests a test service received.
struct received {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<nats::message> requests;

    void add(nats::message m) {
        std::lock_guard lock(mu);
        requests.push_back(std::move(m));
        cv.notify_all();
    }
    std::size_t size() {
        std::lock_guard lock(mu);
        return requests.size();
    }
    bool wait_for(std::size_t n) {
        std::unique_lock lock(mu);
        return cv.wait_for(lock, 10s, [&] { return requests.size() >= n; });
    }
};

std::string header(const nats::message& m, const std::string& name) {
    for (const auto& [k, v] : m.headers) {
        if (k == name) {
            return v;
        }
    }
    return "<none>";
}

class ToolService : public ::testing::Test {
  protected:
    ToolService()
        : prefix_("tools" + std::to_string(getpid()) + "_" + std::to_string(++runs_)),
          worker_nc_(nats_url(), "tools-worker"),
          service_nc_(nats_url(), "tools-service") {}

    tools::tool_service service(const std::string& name, bool idempotent, milliseconds timeout,
                                 milliseconds attempt = milliseconds(0)) {
        tools::tool_service s;
        s.spec = {name, "a test tool", R"({"type":"object"})"};
        s.idempotent = idempotent;
        s.timeout = timeout;
        s.attempt_timeout = attempt.count() > 0 ? attempt : timeout / 3;
        return s;
    }
    std::string subject(const std::string& name) { return prefix_ + ".tools." + name; }

    // Runs one call to completion on a fresh io_context, as the tool runner would: with the
    // tool's deadline, cancelled by `abort` when it is given.
    tools::tool_output call(tools::nats_tool& t, const std::string& args,
                             asio::cancellation_signal* stop = nullptr,
                             milliseconds abort_after = milliseconds(0),
                             const std::string& session_key = "s-1") {
        asio::io_context io;
        std::optional<tools::tool_output> out;
        std::exception_ptr failed;
        const session::unix_ms deadline{services_.time().now().value + t.timeout()->count()};
        tools::tool_call_context ctx{session::session_id::parse_key(session_key).value(),
                                      session::tool_call_id::parse("call_7").value(), deadline,
                                      services_};
        auto run = [&t, args, ctx]() { return t.execute(args, ctx); };
        auto done = [&](std::exception_ptr e, tools::tool_output o) {
            failed = e;
            if (!e) {
                out = std::move(o);
            }
        };
        asio::steady_timer aborting(io);
        if (stop != nullptr) {
            asio::co_spawn(io, run(), asio::bind_cancellation_slot(stop->slot(), done));
            aborting.expires_after(abort_after);
            aborting.async_wait([stop](boost::system::error_code) {
                stop->emit(asio::cancellation_type::terminal);
            });
        } else {
            asio::co_spawn(io, run(), done);
        }
        io.run();
        if (!out) {
            return {failed ? "<aborted>" : "<nothing>", true};
        }
        return *out;
    }

    static inline int runs_ = 0;
    std::string prefix_;
    nats::connection worker_nc_;
    nats::connection service_nc_;
    services services_;
};

}  // namespace

TEST_F(ToolService, ACallIsARequestWithTheSessionTheCallAndTheDeadlineInItsHeaders) {
    received got;
    service_nc_.subscribe(subject("lookup"), [&](nats::message m) {
        const std::string reply = m.reply;
        got.add(std::move(m));  // before the answer: the call may end the moment it has it
        service_nc_.publish(reply, R"({"output":"found 3 rows","is_error":false})");
    });
    service_nc_.flush();
    tools::nats_tool t(worker_nc_, service("lookup", false, 5000ms), protocol::subject_layout(prefix_));
    const auto before = services_.time().now().value;
    auto out = call(t, R"({"table":"users"})");
    EXPECT_EQ(out.text, "found 3 rows");
    EXPECT_FALSE(out.is_error);
    EXPECT_EQ(worker_nc_.requests_waiting(), 0u);
    ASSERT_EQ(got.size(), 1u);
    const auto& m = got.requests[0];
    EXPECT_EQ(m.data, R"({"table":"users"})");
    EXPECT_EQ(header(m, "Wuhu-Session"), "s-1");
    EXPECT_EQ(header(m, "Wuhu-Tool"), "lookup");
    EXPECT_EQ(header(m, "Wuhu-Tool-Call"), "call_7");
    EXPECT_EQ(header(m, "Wuhu-Attempt"), "1");
    const auto deadline = std::stoll(header(m, "Wuhu-Deadline"));
    EXPECT_GE(deadline, before + 4000);
    EXPECT_LE(deadline, before + 5000 + 1000);
}

// With tenancy, a call of a tenant's session goes to that tenant's own service (the fleet's
// account imports <prefix>.<tenant>.tools.> from the tenant's, docs/security.md), with the
// session's id within its tenant and the tenant in the headers; another tenant's service of
// the same name never hears it.
TEST_F(ToolService, ATenantsCallGoesToThatTenantsOwnService) {
    received acme, globex, plain;
    for (auto [who, tenant] : {std::pair{&acme, ".acme"}, std::pair{&globex, ".globex"},
                               std::pair{&plain, ""}}) {
        service_nc_.subscribe(prefix_ + tenant + ".tools.lookup", [this, who](nats::message m) {
            const std::string reply = m.reply;
            who->add(std::move(m));
            service_nc_.publish(reply, R"({"output":"ok"})");
        });
    }
    service_nc_.flush();
    tools::nats_tool t(worker_nc_, service("lookup", false, 5000ms),
                        protocol::subject_layout(prefix_, protocol::tenancy{true, ""}));
    auto out = call(t, "{}", nullptr, milliseconds(0), "acme.s-1");
    EXPECT_EQ(out.text, "ok");
    ASSERT_EQ(acme.size(), 1u);
    EXPECT_EQ(globex.size(), 0u);
    EXPECT_EQ(plain.size(), 0u);
    EXPECT_EQ(header(acme.requests[0], "Wuhu-Session"), "s-1");
    EXPECT_EQ(header(acme.requests[0], "Wuhu-Tenant"), "acme");
}

TEST_F(ToolService, AnErrorAnswerIsAnErrorResultAndAMalformedOneIsExplained) {
    int n = 0;
    service_nc_.subscribe(subject("flaky"), [&](nats::message m) {
        service_nc_.publish(m.reply, ++n == 1 ? R"({"output":"disk full","is_error":true})"
                                              : "plain text, not the answer's shape");
    });
    service_nc_.flush();
    tools::nats_tool t(worker_nc_, service("flaky", false, 5000ms), protocol::subject_layout(prefix_));
    auto first = call(t, "{}");
    EXPECT_EQ(first.text, "disk full");
    EXPECT_TRUE(first.is_error);
    auto second = call(t, "{}");
    EXPECT_TRUE(second.is_error);
    EXPECT_NE(second.text.find("not {\"output\": string"), std::string::npos) << second.text;
    EXPECT_NE(second.text.find("plain text, not the answer's shape"), std::string::npos);
}

TEST_F(ToolService, NoRespondersGiveAnErrorResultAtOnce) {
    tools::nats_tool t(worker_nc_, service("nobody", false, 20000ms), protocol::subject_layout(prefix_));
    const auto start = std::chrono::steady_clock::now();
    auto out = call(t, "{}");
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_TRUE(out.is_error);
    EXPECT_NE(out.text.find("no responders"), std::string::npos) << out.text;
    EXPECT_NE(out.text.find(subject("nobody")), std::string::npos) << out.text;
    EXPECT_LT(took, 5s) << "not the 20 s timeout";
}

TEST_F(ToolService, ACallNobodyAnswersTimesOutWithAnErrorResult) {
    received got;
    service_nc_.subscribe(subject("silent"), [&](nats::message m) { got.add(std::move(m)); });
    service_nc_.flush();
    tools::nats_tool t(worker_nc_, service("silent", false, 400ms), protocol::subject_layout(prefix_));
    const auto start = std::chrono::steady_clock::now();
    auto out = call(t, "{}");
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_TRUE(out.is_error);
    EXPECT_NE(out.text.find("no answer within 400 ms"), std::string::npos) << out.text;
    EXPECT_GE(took, 350ms);
    EXPECT_EQ(got.size(), 1u) << "a call that is not idempotent is sent once";
}

TEST_F(ToolService, AnIdempotentCallIsTriedAgainWhileNobodyServesIt) {
    tools::nats_tool t(worker_nc_, service("late", true, 10000ms), protocol::subject_layout(prefix_));
    received got;
    std::thread starter([&] {
        std::this_thread::sleep_for(700ms);  // the service starts late (a restart)
        service_nc_.subscribe(subject("late"), [&](nats::message m) {
            const std::string reply = m.reply;
            got.add(std::move(m));
            service_nc_.publish(reply, R"({"output":"here now"})");
        });
    });
    auto out = call(t, "{}");
    starter.join();
    EXPECT_EQ(out.text, "here now");
    EXPECT_FALSE(out.is_error);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_GE(std::stoi(header(got.requests[0], "Wuhu-Attempt")), 2);
    EXPECT_EQ(header(got.requests[0], "Wuhu-Tool-Call"), "call_7");
}

TEST_F(ToolService, AnIdempotentCallIsTriedAgainAfterAnAttemptTimedOutWithTheSameCallId) {
    received got;
    service_nc_.subscribe(subject("slow"), [&](nats::message m) {
        const bool answer = header(m, "Wuhu-Attempt") != "1";  // the first attempt is lost
        const std::string reply = m.reply;
        got.add(std::move(m));
        if (answer) {
            service_nc_.publish(reply, R"({"output":"second time lucky"})");
        }
    });
    service_nc_.flush();
    tools::nats_tool t(worker_nc_, service("slow", true, 5000ms, 300ms), protocol::subject_layout(prefix_));
    auto out = call(t, "{}");
    EXPECT_EQ(out.text, "second time lucky");
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(header(got.requests[0], "Wuhu-Tool-Call"), header(got.requests[1], "Wuhu-Tool-Call"));
    EXPECT_LT(std::stoll(header(got.requests[0], "Wuhu-Deadline")),
              std::stoll(header(got.requests[1], "Wuhu-Deadline")));
}

TEST_F(ToolService, AnEarlierAttemptsLateAnswerIsAsGoodAsTheLastOnes) {
    received got;
    std::vector<std::thread> late;
    service_nc_.subscribe(subject("sluggish"), [&](nats::message m) {
        if (header(m, "Wuhu-Attempt") == "1") {  // answered, but after the attempt's 300 ms
            late.emplace_back([this, reply = m.reply] {
                std::this_thread::sleep_for(450ms);
                service_nc_.publish(reply, R"({"output":"late but good"})");
            });
        }
        got.add(std::move(m));
    });
    service_nc_.flush();
    tools::nats_tool t(worker_nc_, service("sluggish", true, 5000ms, 300ms), protocol::subject_layout(prefix_));
    auto out = call(t, "{}");
    for (auto& th : late) {
        th.join();
    }
    EXPECT_EQ(out.text, "late but good");
    EXPECT_FALSE(out.is_error);
    EXPECT_EQ(got.size(), 2u) << "the second attempt was sent, and the first one answered it";
    EXPECT_EQ(worker_nc_.requests_waiting(), 0u) << "both withdrawn once the call ended";
}

TEST_F(ToolService, AnIdempotentCallThatNobodyServesFailsAtItsTimeout) {
    tools::nats_tool t(worker_nc_, service("gone", true, 800ms), protocol::subject_layout(prefix_));
    auto out = call(t, "{}");
    EXPECT_TRUE(out.is_error);
    EXPECT_NE(out.text.find("timed out after 800 ms"), std::string::npos) << out.text;
    EXPECT_NE(out.text.find("attempts; the last: no service was listening (no responders)"),
              std::string::npos)
        << out.text;
}

TEST_F(ToolService, AnAbortWithdrawsTheRequestAndALateAnswerIsDropped) {
    received got;
    std::string reply_to;
    service_nc_.subscribe(subject("stuck"), [&](nats::message m) {
        {
            std::lock_guard lock(got.mu);
            reply_to = m.reply;
        }
        got.add(std::move(m));
    });
    service_nc_.flush();
    tools::nats_tool t(worker_nc_, service("stuck", false, 10000ms), protocol::subject_layout(prefix_));
    asio::cancellation_signal stop;
    const auto start = std::chrono::steady_clock::now();
    auto out = call(t, "{}", &stop, 300ms);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_EQ(out.text, "<aborted>");
    ASSERT_TRUE(got.wait_for(1));
    EXPECT_EQ(worker_nc_.requests_waiting(), 0u) << "the request was withdrawn";
    // The answer after the abort reaches nobody (no crash, no use of the finished call).
    service_nc_.publish(reply_to, R"({"output":"too late"})");
    service_nc_.flush();
    std::this_thread::sleep_for(100ms);
}

TEST_F(ToolService, ABuiltInToolsNameIsRefused) {
    tools::tool_registry r;
    tools::add_builtin_tools(r);
    try {
        tools::add_tool_services(r, worker_nc_, {service("echo", false, 1000ms)}, protocol::subject_layout(prefix_));
        FAIL() << "a built-in's name was taken";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("\"echo\" is a built-in"), std::string::npos)
            << e.what();
    }
    tools::add_tool_services(r, worker_nc_, {service("lookup", false, 1000ms)}, protocol::subject_layout(prefix_));
    EXPECT_NE(r.find("lookup", {}), nullptr);
}

TEST_F(ToolService, HeadersThatWouldBreakTheMessageAreRefusedBeforeSending) {
    EXPECT_EQ(worker_nc_.request_async(subject("x"), {{"Bad:Name", "v"}}, "{}", [](nats::reply) {}),
              0u);
    EXPECT_EQ(worker_nc_.request_async(subject("x"), {{"Name", "a\r\nInjected: 1"}}, "{}",
                                       [](nats::reply) {}),
              0u);
    EXPECT_EQ(worker_nc_.request_async(subject("x"), {{"", "v"}}, "{}", [](nats::reply) {}), 0u);
}

}  // namespace wuhu::testing
