// Tenancy seen from the fleet's own account (issue 29), against the nats-server scripts/test
// starts: workers with tenancy on serve <prefix>.<tenant>.session.…, keep equal session ids of
// two tenants apart everywhere (store, leases, events, the fleet view, forwarding between
// workers), list one tenant's sessions in its view and every tenant's (with the tenant) in the
// fleet's own, and map the sessions stored without a tenant to the default tenant. (What a
// tenant's own clients can and cannot reach through nats-server's accounts is
// tests/broker/tenancy_proctest.cpp.)
#include "client/client.hpp"
#include "tests/broker/worker_node.hpp"
#include "storage/sqlite_db.hpp"
#include "tests/support/env.hpp"
#include "tests/support/raw_nats.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <atomic>
#include <mutex>
#include <set>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr const char* script = R"({"responses":[{"text":"one"},{"text":"two"},{"text":"three"},
    {"text":"four"},{"text":"five"},{"text":"six"}]})";

class tenancy_fixture : public ::testing::Test {
  protected:
    void SetUp() override { client_ = std::make_unique<nats::connection>(nats_url(), "tenants"); }
    void TearDown() override {
        nodes_.clear();
        client_.reset();
    }

    worker_node& start(const std::string& id, const std::string& default_tenant = "") {
        node_options o{nats_url(), prefix_, dir_.path(), id, script};
        o.tenancy = protocol::tenancy{true, default_tenant};
        nodes_.push_back(std::make_unique<worker_node>(std::move(o)));
        return *nodes_.back();
    }

    json::value ask(const std::string& subject, const std::string& body) {
        auto r = client_->request(subject, body, 30s);
        if (!r) {
            ADD_FAILURE() << "no reply to " << subject;
            return json::object{};
        }
        return json::parse(*r);
    }
    json::value on(const std::string& tenant, const std::string& sid, const std::string& verb,
                   const std::string& body) {
        return ask(prefix_ + "." + tenant + ".session." + sid + "." + verb, body);
    }
    // The transcript's user messages of a session.
    std::vector<std::string> said(const std::string& tenant, const std::string& sid) {
        std::vector<std::string> out;
        auto r = on(tenant, sid, "subscribe", "{}");
        for (const auto& e : r.at("patch").at("transcript").as_array()) {
            if (e.at("type") == "party_message") {
                out.emplace_back(e.at("content").as_string());
            }
        }
        return out;
    }

    temp_dir dir_;
    std::string prefix_ = "wuhu_tn" + std::to_string(getpid());
    std::unique_ptr<nats::connection> client_;
    std::vector<std::unique_ptr<worker_node>> nodes_;
};

std::string enqueue(const std::string& content) {
    return json::serialize(json::object{{"lane", "followUp"}, {"content", content}});
}

std::set<std::string> ids_of(const json::value& page) {
    std::set<std::string> out;
    for (const auto& r : page.at("sessions").as_array()) {
        out.insert(std::string(r.at("id").as_string()));
    }
    return out;
}

}  // namespace

TEST_F(tenancy_fixture, EqualSessionIdsOfTwoTenantsAreTwoSessionsEverywhere) {
    auto& w1 = start("w1");
    // Events of each tenant's s1, on the fleet's side of the accounts.
    std::mutex mu;
    std::vector<std::pair<std::string, std::string>> events;
    for (const char* tenant : {"acme", "globex"}) {
        client_->subscribe(prefix_ + "." + tenant + ".events.s1.>", [&, tenant](nats::message m) {
            std::lock_guard lock(mu);
            events.emplace_back(tenant, m.data);
        });
    }
    client_->flush();
    ASSERT_EQ(on("acme", "s1", "enqueue", enqueue("for acme")).at("ok"), true);
    ASSERT_EQ(on("globex", "s1", "enqueue", enqueue("for globex")).at("ok"), true);
    EXPECT_EQ(said("acme", "s1"), std::vector<std::string>{"for acme"});
    EXPECT_EQ(said("globex", "s1"), std::vector<std::string>{"for globex"});
    EXPECT_TRUE(w1.has_loaded("acme.s1"));
    EXPECT_TRUE(w1.has_loaded("globex.s1"));
    EXPECT_TRUE(std::filesystem::exists(dir_.path() / "sessions" / "acme.s1.sqlite"));
    EXPECT_TRUE(std::filesystem::exists(dir_.path() / "sessions" / "globex.s1.sqlite"));
    EXPECT_EQ(w1.leases().owner_of(session::session_id::parse_key("acme.s1").value())
                  .value()
                  ->owner,
              "w1");
    {
        std::lock_guard lock(mu);
        ASSERT_FALSE(events.empty());
        for (const auto& [tenant, data] : events) {
            const auto other = tenant == "acme" ? "for globex" : "for acme";
            EXPECT_EQ(data.find(other), std::string::npos) << tenant << " saw " << data;
        }
    }
    // Deleting one tenant's s1 leaves the other's.
    ASSERT_EQ(on("acme", "s1", "delete", "{}").at("ok"), true);
    EXPECT_TRUE(said("acme", "s1").empty());
    EXPECT_EQ(said("globex", "s1"), std::vector<std::string>{"for globex"});
    // The plain layout is not served with tenancy, and a layout word is no tenant.
    EXPECT_FALSE(client_->request(prefix_ + ".session.s1.subscribe", "{}", 500ms).has_value());
    EXPECT_EQ(on("worker", "s1", "subscribe", "{}").at("error").at("code"), "invalid_tenant");
}

TEST_F(tenancy_fixture, ATenantsViewListsItsSessionsAndTheFleetsOwnViewNamesEachTenant) {
    start("w1");
    for (const auto& [tenant, sid] :
         {std::pair{"acme", "a1"}, std::pair{"acme", "s1"}, std::pair{"globex", "s1"},
          std::pair{"globex", "g1"}}) {
        ASSERT_EQ(on(tenant, sid, "enqueue", enqueue("x")).at("ok"), true);
    }
    auto acme = ask(prefix_ + ".acme.admin.sessions", "{}");
    ASSERT_EQ(acme.at("ok"), true) << json::serialize(acme);
    EXPECT_EQ(ids_of(acme), (std::set<std::string>{"a1", "s1"}));
    for (const auto& r : acme.at("sessions").as_array()) {
        EXPECT_EQ(r.as_object().if_contains("tenant"), nullptr) << "a tenant sees ids only";
    }
    // Paged within the tenant, by its ids.
    auto first = ask(prefix_ + ".acme.admin.sessions", R"({"limit":1})");
    EXPECT_EQ(ids_of(first), (std::set<std::string>{"a1"}));
    EXPECT_EQ(first.at("next"), "a1");
    auto second = ask(prefix_ + ".acme.admin.sessions", R"({"limit":1,"after":"a1"})");
    EXPECT_EQ(ids_of(second), (std::set<std::string>{"s1"}));
    // A loop-state filter asks the owners, which list that tenant's only.
    auto idle = ask(prefix_ + ".globex.admin.sessions", R"({"state":"idle"})");
    EXPECT_EQ(ids_of(idle), (std::set<std::string>{"g1", "s1"})) << json::serialize(idle);
    // A tenant cannot ask for another's.
    EXPECT_EQ(ask(prefix_ + ".acme.admin.sessions", R"({"tenant":"globex"})")
                  .at("error")
                  .at("code"),
              "invalid_query");
    // The fleet's own view: every tenant's, each row naming its tenant; a tenant filter.
    auto all = ask(prefix_ + ".admin.sessions", "{}");
    ASSERT_EQ(all.at("sessions").as_array().size(), 4u) << json::serialize(all);
    std::set<std::string> named;
    for (const auto& r : all.at("sessions").as_array()) {
        named.insert(std::string(r.at("tenant").as_string()) + "/" +
                     std::string(r.at("id").as_string()));
    }
    EXPECT_EQ(named, (std::set<std::string>{"acme/a1", "acme/s1", "globex/g1", "globex/s1"}));
    auto only = ask(prefix_ + ".admin.sessions", R"({"tenant":"globex","limit":1})");
    EXPECT_EQ(ids_of(only), (std::set<std::string>{"g1"}));
    EXPECT_EQ(only.at("next"), "globex.g1");
    auto rest = ask(prefix_ + ".admin.sessions", R"({"tenant":"globex","after":"globex.g1"})");
    EXPECT_EQ(ids_of(rest), (std::set<std::string>{"s1"}));
    // The C++ client as an operator: a tenant's sessions from the fleet's account.
    nats::connection nc(nats_url(), "operator");
    client::options o;
    o.prefix = prefix_;
    o.tenant = "globex";
    o.timeout = 30s;
    client::client op(nc, o);
    EXPECT_EQ(ids_of(op.sessions().value()), (std::set<std::string>{"g1", "s1"}));
    auto enq = op.enqueue("g1", "steer", "from the operator");
    ASSERT_TRUE(enq) << enq.error().message;
    EXPECT_THROW(client::client(nc, client::options{prefix_, 1s, "worker"}), std::invalid_argument);
}

// A request reaching a worker that is not the session's owner is forwarded with the caller's
// reply subject in a header (nats-server refuses a publish carrying the reply subject of a
// request that came through an account import), and the owner answers the caller.
TEST_F(tenancy_fixture, ATenantsRequestIsForwardedToItsOwnerAndAnswered) {
    auto& w1 = start("w1");
    auto& w2 = start("w2");
    // Created through w1's own subject, so that w1 owns it.
    ASSERT_EQ(ask(prefix_ + ".worker.w1.acme.session.f1.configure", "{}").at("ok"), true);
    EXPECT_TRUE(w1.has_loaded("acme.f1"));
    int answered = 0;
    for (int i = 0; i < 20; ++i) {
        auto r = on("acme", "f1", "enqueue", enqueue("hop " + std::to_string(i)));
        answered += r.at("ok") == true ? 1 : 0;
    }
    EXPECT_EQ(answered, 20);
    EXPECT_GT(w2.forwarded(), 0u) << "some requests reached w2 and were forwarded";
    EXPECT_FALSE(w2.has_loaded("acme.f1"));
    // Every follow-up reaches the transcript once the loop has taken it (bounded wait).
    std::size_t in_transcript = 0;
    for (int i = 0; i < 300 && in_transcript < 20; ++i) {
        in_transcript = said("acme", "f1").size();
        std::this_thread::sleep_for(20ms);
    }
    EXPECT_EQ(in_transcript, 20u);
}

// Sessions stored before tenancy was on (keys without a tenant) belong to the default tenant;
// its new sessions are stored the same way.
TEST_F(tenancy_fixture, TheSessionsOfBeforeTenancyBelongToTheDefaultTenant) {
    {
        node_options o{nats_url(), prefix_, dir_.path(), "w0", script};
        worker_node before(std::move(o));
        ASSERT_EQ(ask(prefix_ + ".session.old.enqueue", enqueue("from before")).at("ok"), true);
    }
    start("w1", "legacy");
    EXPECT_EQ(said("legacy", "old"), std::vector<std::string>{"from before"});
    ASSERT_EQ(on("legacy", "new", "enqueue", enqueue("made now")).at("ok"), true);
    EXPECT_TRUE(std::filesystem::exists(dir_.path() / "sessions" / "new.sqlite"));
    EXPECT_TRUE(said("acme", "old").empty()) << "another tenant's old is another session";
    auto view = ask(prefix_ + ".legacy.admin.sessions", "{}");
    EXPECT_EQ(ids_of(view), (std::set<std::string>{"new", "old"}));
    auto all = ask(prefix_ + ".admin.sessions", "{}");
    for (const auto& r : all.at("sessions").as_array()) {
        EXPECT_EQ(r.at("tenant"), "legacy");
    }
    EXPECT_EQ(ask(prefix_ + ".admin.sessions", R"({"tenant":"legacy","limit":1})").at("next"),
              "legacy.new");
}

// Issue 29: every path by which a value reaches a subject refuses one that is no token (CR,
// LF, space, tab, NUL, `*`, `>`, `.`, non-ASCII, over 64 bytes), with a clear error, and a
// probe subscriber sees nothing published: the session and tenant of a request's subject (sent
// over a raw socket, bytes no library sends), the fleet view's owner, tenant, after and ids, and
// an owner id read from the lease store (a request forwarded to it, and the fleet view asking
// it).
TEST_F(tenancy_fixture, EveryPathThatBuildsASubjectRefusesWhatIsNoToken) {
    start("w1");
    ASSERT_EQ(on("acme", "victim", "enqueue", enqueue("keep me")).at("ok"), true);
    for (int i = 0; i < 300; ++i) {  // its turn ends (its events are the test's own)
        const auto st = on("acme", "victim", "subscribe", "{}").at("status");
        if (st.at("state") == "idle" && st.at("has_work") == false) {
            break;
        }
        std::this_thread::sleep_for(20ms);
    }
    nats::connection probe(nats_url(), "probe");
    std::mutex seen_mu;
    std::vector<std::string> seen;
    for (const std::string& subject :
         {std::string("probe.>"), prefix_ + ".acme.session.victim.delete",
          prefix_ + ".worker.*.acme.session.victim.delete", prefix_ + ".*.events.victim.>"}) {
        probe.subscribe(subject, [&](nats::message m) {
            std::lock_guard lock(seen_mu);
            seen.push_back(m.subject + " " + m.data);
        });
    }
    probe.flush();
    const std::string inject = "x\r\nPUB probe.injected 5\r\nhello\r\nPUB " + prefix_ +
                               ".acme.session.victim.delete 2\r\n{}\r\nPUB probe.tail";
    // Bytes a raw socket can put in a subject token (whitespace and CR LF end the subject: a
    // client sending them only writes its own protocol commands).
    const std::vector<std::string> bad_tokens{
        std::string("a\0b", 3), "*", ">", "a\xc3\xa9", std::string(65, 'x'), "a\x7f", "a\x01"};
    raw_nats raw(nats_url());
    for (const auto& token : bad_tokens) {
        for (const auto& [subject, code] :
             {std::pair{prefix_ + ".acme.session." + token + ".enqueue", "invalid_session_id"},
              std::pair{prefix_ + "." + token + ".session.s1.enqueue", "invalid_tenant"}}) {
            auto r = raw.request(subject, enqueue("x"), 10s);
            if (token == "*" || token == ">") {
                // A wildcard token: `*` as a session id is refused like any other byte; a
                // subject with `>` in the middle is no subject nats-server delivers.
                if (!r) {
                    continue;
                }
            }
            ASSERT_TRUE(r.has_value()) << "no reply to " << subject;
            const auto v = json::parse(*r);
            EXPECT_EQ(v.at("ok"), false) << subject;
            const auto got = v.at("error").at("code").as_string();
            EXPECT_TRUE(got == code || got == "invalid_session_id") << subject << ": " << got;
        }
    }
    // The fleet view's fields, in a tenant's view and in the fleet's own.
    for (const auto& token : {inject, std::string("w 1"), std::string("w\t1"),
                              std::string("w\0x", 3), std::string("*"), std::string(">"),
                              std::string("a.b.c"), std::string("w\xc3\xa9"),
                              std::string(65, 'w')}) {
        for (const char* field : {"owner", "after", "tenant"}) {
            const auto body = json::serialize(json::object{{field, token}, {"state", "idle"}});
            for (const auto& view : {prefix_ + ".acme.admin.sessions", prefix_ + ".admin.sessions"}) {
                auto r = ask(view, body);
                EXPECT_EQ(r.at("ok"), false) << view << " " << body;
            }
        }
        const auto ids = json::serialize(json::object{{"ids", json::array{json::string(token)}}});
        EXPECT_EQ(ask(prefix_ + ".acme.admin.sessions", ids).at("ok"), false) << ids;
    }
    // An owner id in the lease store that is no token (a row another process wrote): the
    // request is refused rather than forwarded, and the fleet view asks it nothing.
    nodes_.clear();  // w1 stops and releases the lease
    {
        const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
        storage::sqlite::db catalog((dir_.path() / "catalog.sqlite").string(), "FULL", 5000);
        auto& row = catalog.prepare(
            "INSERT OR REPLACE INTO leases (id, owner, epoch, own_expires) VALUES (?1, ?2, 99, "
            "?3)");
        row.bind(1, std::string_view("acme.victim"))
            .bind(2, std::string_view("w9\r\nPUB probe.injected 5\r\nhello"))
            .bind(3, static_cast<std::int64_t>(now + 60000));
        row.run();
    }
    start("w2");
    auto forwarded = on("acme", "victim", "enqueue", enqueue("x"));
    EXPECT_EQ(forwarded.at("ok"), false) << json::serialize(forwarded);
    EXPECT_EQ(forwarded.at("error").at("code"), "internal") << json::serialize(forwarded);
    auto view = ask(prefix_ + ".acme.admin.sessions", "{}");
    EXPECT_EQ(view.at("ok"), true) << json::serialize(view);
    probe.flush();
    client_->flush();
    std::this_thread::sleep_for(300ms);
    std::lock_guard lock(seen_mu);
    EXPECT_TRUE(seen.empty()) << "a refused value published " << seen.front();
}

}  // namespace wuhu::testing
