// Secrets never reach a log line, a reply or /metrics (issue 29): a wuhu-worker on a
// PostgreSQL server and a nats-server of the test's own, both with passwords, through restarts of
// each (the worker logs the outages and the reconnections, and answers `unavailable` while the
// database is gone), and refused at start with a wrong password.
#include "tests/support/http_get.hpp"
#include "tests/support/own_postgres.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <regex>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr const char* pg_secret = "pg-S3cr3t-7f1";
constexpr const char* nats_secret = "nats-S3cr3t-9c2";

std::string file_text(const std::string& path) {
    std::ifstream f(path);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string metrics_address(const worker_process& w) {
    const std::regex at(R"(metrics on http://([0-9.]+:[0-9]+)/metrics)");
    for (int i = 0; i < 100; ++i) {
        std::smatch m;
        const auto text = file_text(w.log());
        if (std::regex_search(text, m, at)) {
            return m[1];
        }
        std::this_thread::sleep_for(100ms);
    }
    ADD_FAILURE() << "the worker logged no metrics address";
    return "127.0.0.1:1";
}

std::string enqueue(const std::string& id) {
    return json::serialize(
        json::object{{"lane", "followUp"}, {"id", id}, {"content", "keep " + id}});
}

}  // namespace

TEST(Secrets, NoPasswordReachesALogLineAReplyOrMetricsThroughRestartsOfPostgresAndNats) {
    own_postgres pg(pg_secret);
    ASSERT_TRUE(pg.up()) << "PostgreSQL did not start: " << pg.log();
    own_nats nats({"--user", "wuhu", "--pass", nats_secret});
    ASSERT_TRUE(nats.up());
    worker_process::config c;
    c.store = pg.url();
    c.args = {"--lease-ttl-ms", "3000"};
    worker_process worker("sec", R"({"responses":[{"text":"ok"},{"text":"ok"},{"text":"ok"}]})", c);
    worker.start(nats.url(std::string("wuhu:") + nats_secret));
    nats::connection nc(nats.url(std::string("wuhu:") + nats_secret), "secrets-client");
    const std::string p = worker.prefix();
    std::vector<std::string> replies;
    auto ask = [&](const std::string& subject, const std::string& body) -> std::optional<json::value> {
        auto r = nc.request(subject, body, 5s);
        if (r) {
            replies.push_back(*r);
            return json::parse(*r);
        }
        return std::nullopt;
    };
    ASSERT_EQ(answer_when_up(nc, p + ".session.s1.enqueue", enqueue("a")).at("ok"), true);
    const auto at = metrics_address(worker);

    // PostgreSQL goes away: the worker answers, with an error that names no secret.
    ASSERT_TRUE(pg.stop());
    bool refused = false;
    for (int i = 0; i < 50 && !refused; ++i) {
        auto r = ask(p + ".session.s2.enqueue", enqueue("b" + std::to_string(i)));
        refused = r && r->at("ok") == false;
        std::this_thread::sleep_for(100ms);
    }
    EXPECT_TRUE(refused) << "no request was refused while the database was down";
    const auto during = http_get(at, "/metrics");
    EXPECT_EQ(during.status, 200);
    ASSERT_TRUE(pg.start()) << pg.log();
    // Back: the worker serves again.
    bool back = false;
    for (int i = 0; i < 100 && !back; ++i) {
        auto r = ask(p + ".session.s3.enqueue", enqueue("c" + std::to_string(i)));
        back = r && r->at("ok") == true;
        if (!back) {
            std::this_thread::sleep_for(200ms);
        }
    }
    EXPECT_TRUE(back) << "the worker did not serve again after the database came back";

    // nats-server restarts: the worker reconnects and logs it.
    ASSERT_GE(nats.stop(), 0);
    ASSERT_TRUE(nats.start());
    EXPECT_TRUE(worker.wait_logged("NATS reconnected", 30s));
    EXPECT_EQ(answer_when_up(nc, p + ".session.s1.subscribe", "{}").at("ok"), true);
    const auto after = http_get(at, "/metrics");
    EXPECT_EQ(after.status, 200);
    EXPECT_EQ(worker.stop(), 0);

    const auto log = file_text(worker.log());
    EXPECT_TRUE(worker.has_logged("the session store is unavailable"));
    EXPECT_TRUE(worker.has_logged("the session store is back"));
    EXPECT_NE(log.find("NATS reconnected nats://***@127.0.0.1"), std::string::npos) << log;
    for (const char* secret : {pg_secret, nats_secret}) {
        EXPECT_EQ(log.find(secret), std::string::npos) << "the log holds " << secret << ":\n" << log;
        EXPECT_EQ(during.body.find(secret), std::string::npos) << "/metrics holds " << secret;
        EXPECT_EQ(after.body.find(secret), std::string::npos) << "/metrics holds " << secret;
        for (const auto& r : replies) {
            EXPECT_EQ(r.find(secret), std::string::npos) << "a reply holds " << secret << ": " << r;
        }
    }
    EXPECT_FALSE(replies.empty());
}

// A wrong password for either server stops the worker at start (exit 1), and the message names
// the server without the password given.
TEST(Secrets, AWrongPasswordAtStartIsReportedWithoutIt) {
    own_postgres pg(pg_secret);
    ASSERT_TRUE(pg.up()) << "PostgreSQL did not start: " << pg.log();
    own_nats nats({"--user", "wuhu", "--pass", nats_secret});
    ASSERT_TRUE(nats.up());
    const std::string wrong = "wr0ng-Pg-pw";
    worker_process::config c;
    c.store = "postgresql://postgres:" + wrong + "@127.0.0.1:" + std::to_string(pg.port()) +
              "/postgres";
    worker_process bad_pg("secpg", R"({"responses":[]})", c);
    bad_pg.start(nats.url(std::string("wuhu:") + nats_secret));
    EXPECT_EQ(bad_pg.wait(30s), 1);
    const auto pg_log = file_text(bad_pg.log());
    EXPECT_EQ(pg_log.find(wrong), std::string::npos) << pg_log;
    EXPECT_NE(pg_log.find("postgresql://***@127.0.0.1"), std::string::npos) << pg_log;
    EXPECT_NE(pg_log.find("password authentication failed"), std::string::npos) << pg_log;

    worker_process::config good;
    good.store = pg.url();
    worker_process bad_nats("secnats", R"({"responses":[]})", good);
    bad_nats.start(nats.url("wuhu:wr0ng-Nats-pw"));
    EXPECT_EQ(bad_nats.wait(30s), 1);
    const auto nats_log = file_text(bad_nats.log());
    EXPECT_EQ(nats_log.find("wr0ng-Nats-pw"), std::string::npos) << nats_log;
    EXPECT_EQ(nats_log.find(pg_secret), std::string::npos) << nats_log;
    EXPECT_NE(nats_log.find("nats://***@127.0.0.1"), std::string::npos) << nats_log;
}

}  // namespace wuhu::testing
