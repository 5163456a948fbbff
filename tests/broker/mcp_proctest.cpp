// Issue 34: a real worker calls the tools of a real MCP server, written with the official
// TypeScript SDK (tests/external/mcp_server.mjs, run by node), over Streamable HTTP: the result
// reaches the next inference; progress keeps a slow call alive and silence cuts one off with a
// cancellation the server receives; an abort cancels too; a server down at start does not stop
// the worker and its tools appear once it is up; a tool added later is offered; a server that
// forgot its sessions is initialized again without failing the call; with tenancy a session
// calls its own tenant's server only.
#include "tests/support/http_get.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

std::string slurp(const std::filesystem::path& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

// The SDK's server, on `port` (0: one of its own).
class mcp_server {
  public:
    explicit mcp_server(int port = 0) {
        pid_ = spawn("env",
                     {"MCP_PORT=" + std::to_string(port),
                      "MCP_STATS=" + (dir_.path() / "stats.json").string(), "node",
                      std::string(WUHU_SOURCE_DIR) + "/tests/external/mcp_server.mjs"},
                     spawn_options{(dir_.path() / "err.log").string(), std::nullopt,
                                   (dir_.path() / "out.log").string()});
        for (int i = 0; i < 200 && port_ == 0; ++i) {
            std::this_thread::sleep_for(50ms);
            boost::system::error_code ec;
            auto line = slurp(dir_.path() / "out.log");
            auto v = json::parse(line.substr(0, line.find('\n')), ec);
            if (!ec && v.is_object() && v.as_object().contains("port")) {
                port_ = static_cast<int>(v.at("port").to_number<std::int64_t>());
            }
        }
        if (port_ == 0) {
            ADD_FAILURE() << "the MCP server did not start (is node installed, and "
                             "tests/external's npm packages?): "
                          << slurp(dir_.path() / "err.log");
        }
    }
    ~mcp_server() {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        if (::testing::Test::HasFailure()) {
            std::cerr << "MCP server stderr:\n" << slurp(dir_.path() / "err.log");
        }
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/mcp"; }
    void signal(int sig) { kill(pid_, sig); }
    // What ran (the server's own count), cancellations, sessions.
    json::value stats() const {
        boost::system::error_code ec;
        auto v = json::parse(slurp(dir_.path() / "stats.json"), ec);
        return ec ? json::value(json::object{{"runs", json::object{}}, {"cancelled", 0}}) : v;
    }
    std::int64_t runs(const std::string& tool) const {
        const auto s = stats();
        const auto* n = s.at("runs").as_object().if_contains(tool);
        return n != nullptr ? n->to_number<std::int64_t>() : 0;
    }
    std::int64_t cancelled() const { return stats().at("cancelled").to_number<std::int64_t>(); }

  private:
    temp_dir dir_;
    pid_t pid_ = 0;
    int port_ = 0;
};

// Whether the worker's log has a line with `text`, within `limit`.
bool logged(const worker_process& w, const std::string& text, std::chrono::milliseconds limit) {
    const auto give_up = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < give_up) {
        if (slurp(w.log()).find(text) != std::string::npos) {
            return true;
        }
        std::this_thread::sleep_for(50ms);
    }
    return false;
}

std::filesystem::path tools_file(const std::filesystem::path& dir, const std::string& url,
                                 const std::string& more = "") {
    const auto p = dir / "tools.json";
    std::ofstream(p) << R"({"mcp_servers": {"sdk": {"url": ")" << url
                     << R"(", "idle_timeout_ms": 1500, "timeout_ms": 30000)" << more << "}}}";
    return p;
}

// The SDK's server and a worker whose tools file names it ("sdk"; `more` adds to its entry),
// running `script`, started; `offered`: whether the worker listed the server's tools in time.
struct worker_of_server {
    mcp_server server;
    temp_dir dir;
    worker_process w;
    bool offered = false;

    explicit worker_of_server(const std::string& script, const std::string& more = "",
                              std::vector<std::string> args = {})
        : w("mcp", script, config(dir, server, more, std::move(args))) {
        w.start();
        offered = logged(w, "tools offered", 20s);
    }

  private:
    static worker_process::config config(const temp_dir& dir, const mcp_server& server,
                                         const std::string& more, std::vector<std::string> args) {
        worker_process::config c;
        c.args = {"--tools", tools_file(dir.path(), server.url(), more).string()};
        c.args.insert(c.args.end(), args.begin(), args.end());
        return c;
    }
};

json::value state_of(nats::connection& nc, const std::string& s) {
    return answer_when_up(nc, s + "subscribe", "{}");
}

// The session's tool results, in order, as "tool: output" ("!" before an error's output).
std::vector<std::string> results(const json::value& st) {
    std::vector<std::string> out;
    for (const auto& e : st.at("patch").at("transcript").as_array()) {
        if (e.at("type") == "tool_result") {
            out.push_back(std::string(e.at("tool").as_string()) + ": " +
                          (e.at("is_error").as_bool() ? "!" : "") +
                          std::string(e.at("output").as_string()));
        }
    }
    return out;
}

// Waits (bounded) until the session is idle with nothing to do.
json::value settled(nats::connection& nc, const std::string& s, std::chrono::seconds limit = 30s) {
    json::value st;
    const auto give_up = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < give_up) {
        st = state_of(nc, s);
        if (st.at("status").at("state") == "idle" && st.at("status").at("has_work") == false) {
            return st;
        }
        std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << "the session did not settle: " << st;
    return st;
}

// The worker's metrics scrape.
std::string scrape(const worker_process& w) {
    const std::regex at(R"(metrics on http://([0-9.]+:[0-9]+)/metrics)");
    std::smatch m;
    const auto log = slurp(w.log());
    if (!std::regex_search(log, m, at)) {
        ADD_FAILURE() << "the worker logged no metrics address";
        return "";
    }
    return http_get(m[1], "/metrics").body;
}

void enqueue(nats::connection& nc, const std::string& s, const std::string& text) {
    auto r = answer_when_up(nc, s + "enqueue", R"({"lane":"followUp","content":")" + text + "\"}");
    ASSERT_EQ(r.at("ok"), true) << r;
}

// The calls of one answer: `first` runs when the owner is killed (SIGKILL), `second` has
// started (the answer's commit starts both) and not run. The next owner runs an idempotent
// call again and gives one that is not an error result, never sending it twice.
void killed_during(const std::string& first, const std::string& second, const std::string& running,
                   std::int64_t runs_first, std::int64_t runs_second,
                   const std::vector<std::string>& expected) {
    // slow is idempotent by the file (the server gives it no annotation).
    worker_of_server f(
        R"({"responses":[{"tool_calls":[)" + first + "," + second + R"(]},{"text":"done"}]})",
        R"(, "overrides": {"slow": {"idempotent": true}})", {"--lease-ttl-ms", "2000"});
    auto& [server, dir, w, offered] = f;
    ASSERT_TRUE(offered) << slurp(w.log());
    nats::connection nc(nats_url(), "mcp-client");
    const std::string s = w.prefix() + ".session.k1.";
    enqueue(nc, s, "go");
    for (int i = 0; i < 400 && server.runs(running) < 1; ++i) {
        std::this_thread::sleep_for(10ms);
    }
    ASSERT_EQ(server.runs(running), 1);
    w.crash();
    w.start();
    auto st = settled(nc, s, 40s);
    EXPECT_EQ(results(st), expected) << st;
    EXPECT_EQ(server.runs("slow"), runs_first) << "slow";
    EXPECT_EQ(server.runs("charge"), runs_second) << "charge";
    EXPECT_EQ(w.stop(), 0);
}

}  // namespace

TEST(Mcp, AfterASigkillMidCallAnIdempotentToolRunsAgainOnceAndOneThatIsNotNever) {
    // Killed while slow (idempotent) runs: run again, once; charge had not run: it gets the
    // error result, and the server never sees it.
    killed_during(
        R"({"name":"slow","arguments":{"steps":4,"interval_ms":500}})",
        R"({"name":"charge","arguments":{"cents":5}})", "slow", 2, 0,
        {"slow: done after 4 steps",
         "charge: !interrupted: the worker running this tool stopped, and the tool is not "
         "idempotent, so it was not run again"});
}

TEST(Mcp, AfterASigkillMidCallANonIdempotentToolIsNeverSentTwice) {
    // Killed while charge (not idempotent) runs: an error result, the server saw it once; slow
    // had started and not run: it runs, once.
    killed_during(
        R"({"name":"charge","arguments":{"cents":5}})",
        R"({"name":"slow","arguments":{"steps":2,"interval_ms":300}})", "charge", 1, 1,
        {"charge: !interrupted: the worker running this tool stopped, and the tool is not "
         "idempotent, so it was not run again",
         "slow: done after 2 steps"});
}

TEST(Mcp, AModelCallsAnMcpToolAndTheNextInferenceHasItsResult) {
    worker_of_server f(R"({"responses":[
        {"tool_calls":[{"name":"weather","arguments":{"city":"Oslo"}}]},
        {"text":"it is sunny"}]})");
    auto& [server, dir, w, offered] = f;
    ASSERT_TRUE(offered) << slurp(w.log());
    ASSERT_TRUE(logged(w, "tools offered: charge, slow, stall, weather", 1s)) << slurp(w.log());
    nats::connection nc(nats_url(), "mcp-client");
    const std::string s = w.prefix() + ".session.m1.";
    enqueue(nc, s, "weather in Oslo?");
    auto st = settled(nc, s);
    EXPECT_EQ(results(st), (std::vector<std::string>{"weather: sunny in Oslo"})) << st;
    const auto& transcript = st.at("patch").at("transcript").as_array();
    EXPECT_EQ(transcript.back().at("type"), "assistant_message");
    EXPECT_EQ(transcript.back().at("text"), "it is sunny") << "the next inference came after";
    EXPECT_EQ(server.runs("weather"), 1);
    const auto metrics = scrape(w);
    EXPECT_EQ(metric_value(metrics, R"(wuhu_mcp_calls_total{result="ok",server="sdk"})"), 1)
        << metrics;
    EXPECT_EQ(metric_value(metrics, R"(wuhu_mcp_calls_total{result="cut_off",server="sdk"})"), 0);
    EXPECT_EQ(metric_value(metrics, R"(wuhu_mcp_call_duration_seconds_count{server="sdk"})"), 1);
    EXPECT_EQ(w.stop(), 0);
}

TEST(Mcp, ProgressKeepsASlowCallAliveAndSilenceCutsOneOffWithACancellation) {
    // slow: 4 steps of 1 s, each with progress, past the idle timeout of 1.5 s in all; stall:
    // one progress, then silence.
    worker_of_server f(R"({"responses":[
        {"tool_calls":[{"name":"slow","arguments":{"steps":4,"interval_ms":1000}}]},
        {"tool_calls":[{"name":"stall","arguments":{}}]},
        {"text":"done"}]})");
    auto& [server, dir, w, offered] = f;
    ASSERT_TRUE(offered) << slurp(w.log());
    nats::connection nc(nats_url(), "mcp-client");
    const std::string s = w.prefix() + ".session.m2.";
    enqueue(nc, s, "work");
    auto st = settled(nc, s);
    const auto r = results(st);
    ASSERT_EQ(r.size(), 2u) << st;
    EXPECT_EQ(r[0], "slow: done after 4 steps");
    EXPECT_EQ(r[1],
              "stall: !the MCP server sdk was cut off: no progress for 1500 ms "
              "(idle_timeout_ms)");
    for (int i = 0; i < 100 && server.cancelled() < 1; ++i) {
        std::this_thread::sleep_for(50ms);
    }
    EXPECT_EQ(server.cancelled(), 1) << "the server heard the cancellation";
    EXPECT_EQ(metric_value(scrape(w), R"(wuhu_mcp_calls_total{result="cut_off",server="sdk"})"), 1);
    EXPECT_EQ(w.stop(), 0);
}

TEST(Mcp, AnAbortCancelsTheCallOnTheServer) {
    worker_of_server f(R"({"responses":[
        {"tool_calls":[{"name":"stall","arguments":{}}]},{"text":"after"}]})");
    auto& [server, dir, w, offered] = f;
    ASSERT_TRUE(offered) << slurp(w.log());
    nats::connection nc(nats_url(), "mcp-client");
    const std::string s = w.prefix() + ".session.m3.";
    enqueue(nc, s, "stall");
    for (int i = 0; i < 200 && server.runs("stall") < 1; ++i) {
        std::this_thread::sleep_for(20ms);
    }
    ASSERT_EQ(server.runs("stall"), 1);
    auto r = answer_when_up(nc, s + "abort", R"({"reason":"enough"})");
    ASSERT_EQ(r.at("ok"), true) << r;
    EXPECT_EQ(r.at("stopped"), "tool") << r;
    for (int i = 0; i < 100 && server.cancelled() < 1; ++i) {
        std::this_thread::sleep_for(50ms);
    }
    EXPECT_EQ(server.cancelled(), 1);
    EXPECT_EQ(w.stop(), 0);
}

TEST(Mcp, AServerDownAtStartIsWaitedForAndATheToolItAddsLaterIsOffered) {
    const int port = free_port();
    temp_dir dir;
    worker_process::config c;
    c.args = {"--tools",
              tools_file(dir.path(), "http://127.0.0.1:" + std::to_string(port) + "/mcp").string()};
    worker_process w("mcp", R"({"responses":[
        {"tool_calls":[{"name":"added","arguments":{}}]},{"text":"thanks"}]})",
                     c);
    w.start();
    nats::connection nc(nats_url(), "mcp-client");
    const std::string s = w.prefix() + ".session.m4.";
    // The worker serves with the server down, and says so once.
    EXPECT_EQ(state_of(nc, s).at("ok"), true);
    ASSERT_TRUE(logged(w, "is not answering", 10s)) << slurp(w.log());
    mcp_server server(port);
    ASSERT_TRUE(logged(w, "tools offered: charge, slow, stall, weather", 20s)) << slurp(w.log());
    server.signal(SIGUSR1);  // adds `added`: the server tells the worker its tools changed
    ASSERT_TRUE(logged(w, "tools offered: added, charge", 20s)) << slurp(w.log());
    enqueue(nc, s, "use the new tool");
    auto st = settled(nc, s);
    EXPECT_EQ(results(st), (std::vector<std::string>{"added: added ran"})) << st;
    EXPECT_EQ(server.stats().at("sessions"), 1) << "listed again in the same MCP session";
    EXPECT_EQ(w.stop(), 0);
    EXPECT_EQ(slurp(w.log()).find("is not answering", slurp(w.log()).find("tools offered")),
              std::string::npos)
        << "nothing failed once it answered, the stop included: " << slurp(w.log());
}

TEST(Mcp, AServerThatForgotItsSessionIsInitializedAgainAndTheCallRunsOnce) {
    worker_of_server f(R"({"responses":[
        {"tool_calls":[{"name":"weather","arguments":{"city":"Rome"}}]},{"text":"ok"}]})");
    auto& [server, dir, w, offered] = f;
    ASSERT_TRUE(offered) << slurp(w.log());
    server.signal(SIGUSR2);  // the server forgets every session
    std::this_thread::sleep_for(200ms);
    nats::connection nc(nats_url(), "mcp-client");
    const std::string s = w.prefix() + ".session.m5.";
    enqueue(nc, s, "weather in Rome?");
    auto st = settled(nc, s);
    EXPECT_EQ(results(st), (std::vector<std::string>{"weather: sunny in Rome"})) << st;
    EXPECT_EQ(server.runs("weather"), 1) << "run once";
    EXPECT_GE(server.stats().at("sessions").to_number<std::int64_t>(), 2) << "initialized again";
    EXPECT_EQ(w.stop(), 0);
}

}  // namespace wuhu::testing

namespace wuhu::testing {

// With tenancy, each tenant's MCP server is its own: both offer `weather`; acme's session calls
// acme's server, globex's globex's, and a third tenant's session is offered neither (its call
// is of an unknown tool, and a configure naming the tool is refused).
TEST(Mcp, WithTenancyASessionCallsItsOwnTenantsServerAndNoOthers) {
    mcp_server acme, globex;
    temp_dir dir;
    const auto file = dir.path() / "tools.json";
    std::ofstream(file) << R"({"mcp_servers": {
        "acme-tools": {"url": ")"
                        << acme.url() << R"(", "tenant": "acme"},
        "globex-tools": {"url": ")"
                        << globex.url() << R"(", "tenant": "globex"}}})";
    worker_process::config c;
    c.args = {"--tenancy", "--tools", file.string()};
    worker_process w("mcpt", R"({"responses":[
        {"tool_calls":[{"name":"weather","arguments":{"city":"Oslo"}}]},
        {"text":"done"}]})",
                     c);
    w.start();
    ASSERT_TRUE(logged(w, "MCP server acme-tools (" + acme.url() + "): 4 tools offered", 20s))
        << slurp(w.log());
    ASSERT_TRUE(logged(w, "MCP server globex-tools (" + globex.url() + "): 4 tools offered", 20s))
        << slurp(w.log());
    nats::connection nc(nats_url(), "mcp-client");
    const auto session = [&](const std::string& tenant) {
        return w.prefix() + "." + tenant + ".session.t1.";
    };

    enqueue(nc, session("acme"), "weather?");
    auto st = settled(nc, session("acme"));
    EXPECT_EQ(results(st), (std::vector<std::string>{"weather: sunny in Oslo"})) << st;
    EXPECT_EQ(acme.runs("weather"), 1);
    EXPECT_EQ(globex.runs("weather"), 0);

    enqueue(nc, session("globex"), "weather?");
    st = settled(nc, session("globex"));
    EXPECT_EQ(results(st), (std::vector<std::string>{"weather: sunny in Oslo"})) << st;
    EXPECT_EQ(acme.runs("weather"), 1);
    EXPECT_EQ(globex.runs("weather"), 1);

    const auto refused =
        answer_when_up(nc, session("initech") + "configure", R"({"tools":["weather"]})");
    EXPECT_EQ(refused.at("error").at("code"), "invalid_settings") << refused;
    EXPECT_EQ(
        answer_when_up(nc, session("globex") + "configure", R"({"tools":["weather"]})").at("ok"),
        true);
    enqueue(nc, session("initech"), "weather?");
    st = settled(nc, session("initech"));
    EXPECT_EQ(results(st), (std::vector<std::string>{"weather: !unknown tool: weather"})) << st;
    EXPECT_EQ(acme.runs("weather") + globex.runs("weather"), 2) << "neither server was called";
    EXPECT_EQ(w.stop(), 0);
}

}  // namespace wuhu::testing
