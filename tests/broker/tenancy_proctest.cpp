// The roles of docs/security.md, cell by cell (issue 29): real wuhu-worker processes behind a
// nats-server started with exactly docs/examples/nats-tenants.conf (accounts for the fleet, an
// operator, two tenants each with an application and a tool service) and
// docs/examples/nats-single-account.conf (one account, permissions only), and real clients
// logging in as each role. Every action a role may not take gets no answer and changes nothing;
// equal session ids of two tenants are two sessions, on the SQLite and the PostgreSQL store.
#include "tests/support/pg_env.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

const std::string examples = std::string(WUHU_SOURCE_DIR) + "/docs/examples/";

// The model calls the tool `lookup` once, then answers with what it saw.
constexpr const char* script = R"({"responses":[
    {"text":"looking it up","tool_calls":[{"id":"call-1","name":"lookup","arguments":{}}]},
    {"text":"done"},{"text":"again"},{"text":"and again"},{"text":"once more"}]})";

constexpr const char* tools_file =
    R"({"tools":{"lookup":{"description":"Looks it up","schema":{"type":"object"}}}})";

nats::connection login(const own_nats& server, const std::string& user,
                       const std::string& inbox_prefix = "_INBOX") {
    nats::options o;
    o.url = server.url();
    o.name = user;
    o.auth.user = user;
    o.auth.password = user + "-password";
    o.inbox_prefix = inbox_prefix;
    return nats::connection(o);
}

std::string enqueue(const std::string& content) {
    return json::serialize(json::object{{"lane", "followUp"}, {"content", content}});
}

// A request that must get an answer within `limit`; its JSON.
json::value answered(nats::connection& nc, const std::string& subject, const std::string& body,
                     std::chrono::milliseconds limit = 30s) {
    auto r = nc.request(subject, body, limit);
    if (!r) {
        ADD_FAILURE() << "no answer to " << subject;
        return json::object{};
    }
    return json::parse(*r);
}

// A request the role may not make: no answer (nats-server refuses the publish, or nobody in
// that account serves the subject).
void refused(nats::connection& nc, const std::string& who, const std::string& subject,
             const std::string& body = "{}") {
    auto r = nc.request(subject, body, 400ms);
    EXPECT_FALSE(r.has_value()) << who << " got an answer on " << subject << ": " << *r;
}

// The messages a subscription receives.
struct seen {
    std::mutex mu;
    std::vector<std::pair<std::string, std::string>> got;
    void add(const nats::message& m) {
        std::lock_guard lock(mu);
        got.emplace_back(m.subject, m.data);
    }
    std::size_t size() {
        std::lock_guard lock(mu);
        return got.size();
    }
    bool any_holds(const std::string& text) {
        std::lock_guard lock(mu);
        for (const auto& [s, d] : got) {
            if (d.find(text) != std::string::npos) {
                return true;
            }
        }
        return false;
    }
};

// Waits (bounded) until `pred` holds over a session's subscribe reply, asked by `nc`.
bool wait_until(nats::connection& nc, const std::string& subject,
                const std::function<bool(const json::value&)>& pred) {
    for (int i = 0; i < 300; ++i) {
        if (auto r = nc.request(subject, "{}", 1s)) {
            auto v = json::parse(*r);
            if (v.at("ok") == true && pred(v)) {
                return true;
            }
        }
        std::this_thread::sleep_for(100ms);
    }
    return false;
}

std::string text_of(const json::value& subscribe_reply) {
    return json::serialize(subscribe_reply.at("patch").at("transcript"));
}

bool idle_with(const json::value& v, const std::string& text) {
    return v.at("status").at("state") == "idle" && v.at("status").at("has_work") == false &&
           text_of(v).find(text) != std::string::npos;
}

std::set<std::string> ids_of(const json::value& page) {
    std::set<std::string> out;
    for (const auto& r : page.at("sessions").as_array()) {
        out.insert(std::string(r.at("id").as_string()));
    }
    return out;
}

// The store each test runs on: sqlite (one data directory for both workers) or postgres (a
// schema of the test's own on the test server, through --pg-schema).
class store_of_test {
  public:
    explicit store_of_test(const std::string& kind) : kind_(kind) {
        if (kind == "postgres") {
            schema_ = fresh_schema("tenancy");
        }
    }
    ~store_of_test() {
        if (!schema_.empty()) {
            drop_schema(schema_);
        }
    }
    worker_process::config config(const std::string& id) const {
        worker_process::config c;
        c.worker_id = id;
        c.prefix = "wuhu";
        if (kind_ == "postgres") {
            c.store = pg_url("postgres");
            c.args = {"--pg-schema", schema_};
        } else {
            c.data_dir = dir_.path() / "data";
        }
        return c;
    }
    // The keys the store holds.
    std::set<std::string> keys() const {
        std::set<std::string> out;
        if (kind_ == "postgres") {
            pqxx::connection c(pg_dsn());
            pqxx::nontransaction n(c);
            for (const auto& r : n.exec("SELECT session_id FROM " + schema_ + ".sessions")) {
                out.insert(r[0].c_str());
            }
        } else {
            for (const auto& e : std::filesystem::directory_iterator(dir_.path() / "data" /
                                                                     "sessions")) {
                if (e.path().extension() == ".sqlite") {
                    out.insert(e.path().stem().string());
                }
            }
        }
        return out;
    }

  private:
    std::string kind_;
    std::string schema_;
    temp_dir dir_;
};

// Two workers of the fleet, logged in as `fleet` (password in WUHU_NATS_PASSWORD, inbox prefix
// _INBOX_fleet), with `flags`.
std::vector<std::unique_ptr<worker_process>> start_fleet(const own_nats& server,
                                                         const store_of_test& store,
                                                         const temp_dir& dir,
                                                         const std::vector<std::string>& flags) {
    std::ofstream(dir.path() / "tools.json") << tools_file;
    std::vector<std::unique_ptr<worker_process>> fleet;
    setenv("WUHU_NATS_PASSWORD", "fleet-password", 1);
    for (const char* id : {"w1", "w2"}) {
        auto c = store.config(id);
        c.args.insert(c.args.end(), {"--nats-user", "fleet", "--nats-inbox-prefix",
                                     "_INBOX_fleet", "--tools",
                                     (dir.path() / "tools.json").string()});
        c.args.insert(c.args.end(), flags.begin(), flags.end());
        fleet.push_back(std::make_unique<worker_process>(std::string("t") + id, script, c));
        fleet.back()->start(server.url());
    }
    unsetenv("WUHU_NATS_PASSWORD");
    return fleet;
}

class TenantRoles : public ::testing::TestWithParam<std::string> {};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Stores, TenantRoles, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

// Accounts: the fleet's (fleet, operator) and one per tenant (an application and a tool
// service each), as docs/examples/nats-tenants.conf sets them up.
TEST_P(TenantRoles, EachRoleOfTheTenantAccountsReachesWhatSecurityMdSaysAndNothingElse) {
    own_nats server({"-c", examples + "nats-tenants.conf"});
    ASSERT_TRUE(server.up()) << "nats-server did not start with nats-tenants.conf";
    temp_dir dir;
    store_of_test store(GetParam());
    auto fleet = start_fleet(server, store, dir, {"--tenancy"});
    auto acme = login(server, "acme-app");
    auto globex = login(server, "globex-app");
    auto acme_tools = login(server, "acme-tools", "_INBOX_acme-tools");
    auto globex_tools = login(server, "globex-tools", "_INBOX_globex-tools");
    auto op = login(server, "operator", "_INBOX_operator");

    // Each tenant's tool service answers with its own name, and notes whose calls it got.
    seen acme_calls, globex_calls;
    auto caller = [](const nats::message& m) {
        std::string tenant, session;
        for (const auto& [k, v] : m.headers) {
            tenant = k == "Wuhu-Tenant" ? v : tenant;
            session = k == "Wuhu-Session" ? v : session;
        }
        return tenant + "/" + session;
    };
    acme_tools.subscribe("wuhu.tools.lookup", [&](nats::message m) {
        m.data = caller(m);
        acme_calls.add(m);
        acme_tools.publish(m.reply, R"({"output":"acme's lookup for )" + m.data + R"("})");
    });
    globex_tools.subscribe("wuhu.tools.lookup", [&](nats::message m) {
        m.data = caller(m);
        globex_calls.add(m);
        globex_tools.publish(m.reply, R"({"output":"globex's lookup"})");
    });
    acme_tools.flush();
    globex_tools.flush();

    // Both tenants use the session id s1, with the tool; each has a session of its own too.
    ASSERT_EQ(answer_when_up(acme, "wuhu.session.s1.configure", R"({"tools":["lookup"]})")
                  .at("ok"),
              true);
    ASSERT_EQ(answered(globex, "wuhu.session.s1.configure", R"({"tools":["lookup"]})").at("ok"),
              true);
    seen acme_watch, globex_watch;
    acme.subscribe("wuhu.events.s1.>", [&](nats::message m) { acme_watch.add(m); });
    globex.subscribe("wuhu.events.s1.>", [&](nats::message m) { globex_watch.add(m); });
    acme.flush();
    globex.flush();
    ASSERT_EQ(answered(acme, "wuhu.session.s1.enqueue", enqueue("hello from acme")).at("ok"),
              true);
    ASSERT_EQ(answered(globex, "wuhu.session.s1.enqueue", enqueue("hello from globex")).at("ok"),
              true);
    ASSERT_EQ(answered(acme, "wuhu.session.acme-only.enqueue", enqueue("x")).at("ok"), true);
    ASSERT_EQ(answered(globex, "wuhu.session.globex-only.enqueue", enqueue("y")).at("ok"), true);
    ASSERT_TRUE(wait_until(acme, "wuhu.session.s1.subscribe",
                           [](const json::value& v) { return idle_with(v, "done"); }));
    ASSERT_TRUE(wait_until(globex, "wuhu.session.s1.subscribe",
                           [](const json::value& v) { return idle_with(v, "done"); }));

    // Equal ids, two sessions: each transcript holds its tenant's words and tool result only.
    const auto acme_s1 = text_of(answered(acme, "wuhu.session.s1.subscribe", "{}"));
    const auto globex_s1 = text_of(answered(globex, "wuhu.session.s1.subscribe", "{}"));
    EXPECT_NE(acme_s1.find("hello from acme"), std::string::npos);
    EXPECT_NE(acme_s1.find("acme's lookup for acme/s1"), std::string::npos) << acme_s1;
    EXPECT_EQ(acme_s1.find("globex"), std::string::npos) << acme_s1;
    EXPECT_NE(globex_s1.find("globex's lookup"), std::string::npos) << globex_s1;
    EXPECT_EQ(globex_s1.find("acme"), std::string::npos) << globex_s1;
    // A tenant's tool calls reach its own service only.
    EXPECT_TRUE(acme_calls.any_holds("acme/s1"));
    EXPECT_TRUE(globex_calls.any_holds("globex/s1"));
    EXPECT_FALSE(acme_calls.any_holds("globex/"));
    EXPECT_FALSE(globex_calls.any_holds("acme/"));
    EXPECT_EQ(store.keys(), (std::set<std::string>{"acme.s1", "globex.s1", "acme.acme-only",
                                                   "globex.globex-only"}));
    // A tenant watches its own session only.
    EXPECT_TRUE(acme_watch.any_holds("hello from acme"));
    EXPECT_FALSE(acme_watch.any_holds("globex"));
    EXPECT_FALSE(globex_watch.any_holds("acme"));

    // ---- a tenant's application: nothing of another tenant, nothing of the fleet's own.
    for (const char* verb : {"enqueue", "subscribe", "configure", "cancel", "delete", "system",
                             "pause", "abort"}) {
        const std::string body = std::string(verb) == "enqueue" ? enqueue("intruder")
                                 : std::string(verb) == "cancel"
                                     ? R"({"lane":"followUp","id":"x"})"
                                     : "{}";
        refused(acme, "acme-app", "wuhu.globex.session.s1." + std::string(verb), body);
        refused(acme, "acme-app", "wuhu.acme.session.s1." + std::string(verb), body);
        refused(acme, "acme-app", "wuhu.worker.w1.session.s1." + std::string(verb), body);
        refused(acme, "acme-app", "wuhu.worker.w1.globex.session.s1." + std::string(verb), body);
    }
    refused(acme, "acme-app", "wuhu.worker.w1.admin.local");
    refused(acme, "acme-app", "wuhu.globex.admin.sessions");
    refused(acme, "acme-app", "wuhu.session.s1.system",
            R"({"source":"asyncTaskNotification","content":"forged"})");
    refused(acme, "acme-app", "wuhu.tools.lookup");
    // Another tenant's events, the fleet's requests: no subscription receives anything.
    seen stolen;
    for (const char* subject : {"wuhu.globex.events.>", "wuhu.*.events.>", "wuhu.session.>",
                                "wuhu.*.session.>", "wuhu.worker.>", ">"}) {
        acme.subscribe(subject, [&](nats::message m) { stolen.add(m); });
    }
    acme.flush();
    ASSERT_EQ(answered(globex, "wuhu.session.s1.enqueue", enqueue("globex again")).at("ok"),
              true);
    ASSERT_TRUE(wait_until(globex, "wuhu.session.s1.subscribe",
                           [](const json::value& v) { return idle_with(v, "globex again"); }));
    EXPECT_EQ(stolen.size(), 0u) << "acme-app received another tenant's or the fleet's messages";
    EXPECT_FALSE(acme_watch.any_holds("globex again"));
    // Nothing acme tried changed globex's session (its own enqueue above moved it on only).
    const auto globex_after = text_of(answered(globex, "wuhu.session.s1.subscribe", "{}"));
    EXPECT_EQ(globex_after.find("intruder"), std::string::npos);
    // Its fleet view lists its sessions only.
    EXPECT_EQ(ids_of(answered(acme, "wuhu.admin.sessions", "{}")),
              (std::set<std::string>{"acme-only", "s1"}));
    EXPECT_EQ(ids_of(answered(globex, "wuhu.admin.sessions", R"({"state":"idle"})")),
              (std::set<std::string>{"globex-only", "s1"}));
    EXPECT_EQ(answered(acme, "wuhu.admin.sessions", R"({"tenant":"globex"})")
                  .at("error")
                  .at("code"),
              "invalid_query");

    // ---- a tool service: posts to its sessions' system lane; nothing else.
    EXPECT_EQ(answered(acme_tools, "wuhu.session.s1.system",
                       R"({"source":"asyncTaskNotification","content":"task 7 finished"})")
                  .at("ok"),
              true);
    for (const char* verb : {"enqueue", "subscribe", "configure", "delete", "pause"}) {
        refused(acme_tools, "acme-tools", "wuhu.session.s1." + std::string(verb),
                std::string(verb) == "enqueue" ? enqueue("tool intruder") : "{}");
    }
    refused(acme_tools, "acme-tools", "wuhu.admin.sessions");
    refused(acme_tools, "acme-tools", "wuhu.globex.session.s1.system",
            R"({"source":"asyncTaskNotification","content":"x"})");
    refused(acme_tools, "acme-tools", "wuhu.worker.w1.session.s1.delete");
    EXPECT_EQ(text_of(answered(acme, "wuhu.session.s1.subscribe", "{}")).find("tool intruder"),
              std::string::npos);
    // Two calls each (the first turn of s1 and of the tenant's other session), none more.
    EXPECT_EQ(acme_calls.size(), 2u);
    EXPECT_EQ(globex_calls.size(), 2u);

    // ---- the operator: every tenant's sessions, never the fleet's own subjects.
    auto all = answered(op, "wuhu.admin.sessions", "{}");
    std::set<std::string> named;
    for (const auto& r : all.at("sessions").as_array()) {
        named.insert(std::string(r.at("tenant").as_string()) + "/" +
                     std::string(r.at("id").as_string()));
    }
    EXPECT_EQ(named, (std::set<std::string>{"acme/acme-only", "acme/s1", "globex/globex-only",
                                            "globex/s1"}));
    EXPECT_EQ(ids_of(answered(op, "wuhu.acme.admin.sessions", "{}")),
              (std::set<std::string>{"acme-only", "s1"}));
    EXPECT_NE(text_of(answered(op, "wuhu.acme.session.s1.subscribe", "{}"))
                  .find("task 7 finished"),
              std::string::npos);
    EXPECT_EQ(answered(op, "wuhu.globex.session.s1.pause", "{}").at("ok"), true);
    EXPECT_EQ(answered(op, "wuhu.globex.session.s1.resume", "{}").at("ok"), true);
    EXPECT_EQ(answered(op, "wuhu.acme.session.acme-only.delete", "{}").at("ok"), true);
    refused(op, "operator", "wuhu.worker.w1.admin.local");
    refused(op, "operator", "wuhu.worker.w1.acme.session.s1.delete");
    refused(op, "operator", "wuhu.acme.tools.lookup");
    seen op_stolen;
    for (const char* subject : {"wuhu.*.session.>", "wuhu.admin.sessions", "_INBOX.>",
                                "_INBOX_fleet.>", "wuhu.worker.>"}) {
        op.subscribe(subject, [&](nats::message m) { op_stolen.add(m); });
    }
    seen op_events;
    op.subscribe("wuhu.*.events.>", [&](nats::message m) { op_events.add(m); });
    op.flush();
    ASSERT_EQ(answered(acme, "wuhu.session.s1.enqueue", enqueue("acme once more")).at("ok"), true);
    ASSERT_TRUE(wait_until(acme, "wuhu.session.s1.subscribe",
                           [](const json::value& v) { return idle_with(v, "acme once more"); }));
    EXPECT_EQ(op_stolen.size(), 0u) << "the operator received the fleet's messages";
    EXPECT_TRUE(op_events.any_holds("acme once more")) << "the operator watches every tenant";
    for (auto& w : fleet) {
        EXPECT_EQ(w->stop(), 0);
    }
}

// One account, no tenancy: docs/examples/nats-single-account.conf's users. The regression of
// issue 29 (3): a forwarded subject must not let an application do what its permissions deny.
TEST_P(TenantRoles, EachRoleOfTheSingleAccountReachesWhatSecurityMdSaysAndNothingElse) {
    own_nats server({"-c", examples + "nats-single-account.conf"});
    ASSERT_TRUE(server.up()) << "nats-server did not start with nats-single-account.conf";
    temp_dir dir;
    store_of_test store(GetParam());
    auto fleet = start_fleet(server, store, dir, {});
    auto app = login(server, "app", "_INBOX_app");
    auto tools = login(server, "tools", "_INBOX_tools");
    auto op = login(server, "operator", "_INBOX_operator");
    tools.subscribe("wuhu.tools.lookup", [&](nats::message m) {
        tools.publish(m.reply, R"({"output":"the lookup"})");
    });
    tools.flush();
    ASSERT_EQ(answer_when_up(app, "wuhu.session.s1.configure", R"({"tools":["lookup"]})")
                  .at("ok"),
              true);
    ASSERT_EQ(answered(app, "wuhu.session.s1.enqueue", enqueue("hello")).at("ok"), true);
    ASSERT_TRUE(wait_until(app, "wuhu.session.s1.subscribe",
                           [](const json::value& v) { return idle_with(v, "the lookup"); }));
    EXPECT_EQ(ids_of(answered(app, "wuhu.admin.sessions", "{}")), (std::set<std::string>{"s1"}));

    // The application: no system lane, none of the fleet's own subjects, no requests taken.
    refused(app, "app", "wuhu.session.s1.system",
            R"({"source":"asyncTaskNotification","content":"forged"})");
    for (const char* w : {"w1", "w2"}) {
        refused(app, "app", "wuhu.worker." + std::string(w) + ".session.s1.delete");
        refused(app, "app", "wuhu.worker." + std::string(w) + ".admin.local");
    }
    refused(app, "app", "wuhu.tools.lookup");
    seen stolen;
    for (const char* subject :
         {"wuhu.session.>", "wuhu.admin.sessions", "wuhu.worker.>", "wuhu.tools.>", "_INBOX.>",
          "_INBOX_fleet.>"}) {
        app.subscribe(subject, [&](nats::message m) { stolen.add(m); });
    }
    app.flush();
    // The tool service: the system lane only.
    EXPECT_EQ(answered(tools, "wuhu.session.s1.system",
                       R"({"source":"asyncTaskNotification","content":"task done"})")
                  .at("ok"),
              true);
    for (const char* verb : {"enqueue", "subscribe", "delete", "configure"}) {
        refused(tools, "tools", "wuhu.session.s1." + std::string(verb),
                std::string(verb) == "enqueue" ? enqueue("tool intruder") : "{}");
    }
    refused(tools, "tools", "wuhu.admin.sessions");
    refused(tools, "tools", "wuhu.worker.w1.session.s1.delete");
    // The operator: every verb, the fleet's own subjects never.
    EXPECT_EQ(answered(op, "wuhu.session.s1.system",
                       R"({"source":"asyncTaskNotification","content":"from the operator"})")
                  .at("ok"),
              true);
    refused(op, "operator", "wuhu.worker.w1.session.s1.delete");
    refused(op, "operator", "wuhu.worker.w2.admin.local");
    ASSERT_TRUE(wait_until(app, "wuhu.session.s1.subscribe", [](const json::value& v) {
        return idle_with(v, "from the operator");
    }));
    EXPECT_EQ(stolen.size(), 0u) << "the application received the fleet's messages";
    const auto text = text_of(answered(app, "wuhu.session.s1.subscribe", "{}"));
    EXPECT_EQ(text.find("forged"), std::string::npos);
    EXPECT_EQ(text.find("tool intruder"), std::string::npos);
    EXPECT_NE(text.find("task done"), std::string::npos);
    EXPECT_EQ(answered(op, "wuhu.session.s1.delete", "{}").at("ok"), true);
    for (auto& w : fleet) {
        EXPECT_EQ(w->stop(), 0);
    }
}

// nats-server itself refuses an account that imports another tenant's subjects: a tenant can
// never be configured into another's sessions by mistake.
TEST(TenantAccounts, NatsServerRefusesATenantImportingAnothersSubjects) {
    std::ifstream f(examples + "nats-tenants.conf");
    std::string conf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string own = R"({ service: { account: WUHU, subject: "wuhu.globex.session.>" }, to: "wuhu.session.>" })";
    const auto at = conf.find(own);
    ASSERT_NE(at, std::string::npos) << "the example's globex import moved";
    temp_dir dir;
    std::string bad = conf;
    bad.replace(at, own.size(),
                R"({ service: { account: WUHU, subject: "wuhu.acme.session.>" }, to: "wuhu.session.>" })");
    std::ofstream(dir.path() / "bad.conf") << bad;
    std::ofstream(dir.path() / "good.conf") << conf;
    const pid_t good = spawn("nats-server", {"-c", (dir.path() / "good.conf").string(), "-t"},
                             (dir.path() / "good.log").string());
    EXPECT_EQ(wait_exit(good, 30s), 0) << "the example must load";
    const pid_t refused = spawn("nats-server", {"-c", (dir.path() / "bad.conf").string(), "-t"},
                                (dir.path() / "bad.log").string());
    EXPECT_NE(wait_exit(refused, 30s), 0) << "globex importing acme's sessions must be refused";
    std::ifstream log(dir.path() / "bad.log");
    const std::string said((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_NE(said.find("not authorized"), std::string::npos) << said;
}

}  // namespace wuhu::testing
