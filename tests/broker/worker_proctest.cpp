// The wuhu-worker process: it serves requests over a real nats-server, stops cleanly on
// SIGTERM, a restarted worker on the same data directory has the session, it rides out a NATS
// restart, takes credentials in its URL, logs JSON lines, and refuses bad flags; and wuhuctl's
// exit codes.
#include "broker/nats_client.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <fstream>
#include <iostream>
#include <thread>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

std::string nats_url() {
    const char* url = std::getenv("WUHU_TEST_NATS_URL");
    if (url == nullptr || *url == '\0') {
        ADD_FAILURE() << "WUHU_TEST_NATS_URL is not set: run the tests with scripts/test";
        return "nats://127.0.0.1:1";
    }
    return url;
}

// Starts `bin` (a path, or a name looked up in PATH) with `args`; its stderr goes to `log`
// when given.
pid_t spawn(const char* bin, const std::vector<std::string>& args, const std::string& log = "") {
    pid_t pid = fork();
    if (pid == 0) {
        if (!log.empty()) {
            int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fd, STDERR_FILENO);
        }
        std::vector<char*> argv{const_cast<char*>(bin)};
        for (const auto& a : args) {
            argv.push_back(const_cast<char*>(a.c_str()));
        }
        argv.push_back(nullptr);
        execvp(bin, argv.data());
        _exit(127);
    }
    return pid;
}

// The lines of a file; every one must be a JSON object (the worker's log).
std::vector<json::object> json_lines(const std::string& path) {
    std::ifstream f(path);
    std::vector<json::object> out;
    std::string line;
    while (std::getline(f, line)) {
        boost::system::error_code ec;
        auto v = json::parse(line, ec);
        if (ec || !v.is_object()) {
            ADD_FAILURE() << "not a JSON log line: " << line;
            continue;
        }
        out.push_back(v.as_object());
    }
    return out;
}

bool logged(const std::vector<json::object>& lines, std::string_view text) {
    for (const auto& l : lines) {
        if (l.at("msg").as_string().find(text) != std::string::npos) {
            return true;
        }
    }
    return false;
}

// A free TCP port on 127.0.0.1 (bound, read, released).
int free_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        close(fd);
        return 0;
    }
    close(fd);
    return ntohs(addr.sin_port);
}

// A nats-server of this test's own on 127.0.0.1:port (so that the test can stop and restart
// it), with extra arguments (authentication), or -1 if it did not come up.
pid_t spawn_nats(int port, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"-a", "127.0.0.1", "-p", std::to_string(port)};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_t pid = spawn("nats-server", args, "/dev/null");
    for (int i = 0; i < 100; ++i) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(static_cast<std::uint16_t>(port));
        const bool up = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
        close(fd);
        if (up) {
            return pid;
        }
        if (waitpid(pid, nullptr, WNOHANG) == pid) {
            return -1;
        }
        std::this_thread::sleep_for(50ms);
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
}

// Waits (bounded) for the process to exit; its exit status, or -1 if it did not.
int wait_exit(pid_t pid, std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        std::this_thread::sleep_for(20ms);
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
}

// Kills a process (a nats-server of the test's own) if the test ends early.
struct process_guard {
    pid_t& pid;
    ~process_guard() {
        if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
    }
};

json::value subscribe_when_up(broker::nats_client& nc, const std::string& prefix) {
    for (int i = 0; i < 100; ++i) {
        if (auto r = nc.request(prefix + ".session.p1.subscribe", "{}", 200ms)) {
            return json::parse(*r);
        }
        std::this_thread::sleep_for(100ms);
    }
    ADD_FAILURE() << "the worker never answered";
    return json::object{};
}

// A wuhu-worker process of one test: its own data directory, script, subject prefix and log
// file (printed if the test fails); killed if the test ends early.
class worker_process {
  public:
    worker_process(const std::string& tag, const std::string& script_json)
        : prefix_("wuhu_" + tag + std::to_string(getpid())) {
        std::ofstream(script()) << script_json;
    }
    ~worker_process() {
        if (running()) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        if (::testing::Test::HasFailure()) {
            std::ifstream f(log());
            std::cerr << "worker log:\n" << f.rdbuf();
        }
    }
    worker_process(const worker_process&) = delete;

    void start(const std::string& url = nats_url()) {
        pid_ = spawn(WUHU_WORKER_BIN,
                     {"--nats", url, "--store", "sqlite://" + (dir_.path() / "data").string(),
                      "--script", script(), "--prefix", prefix_, "--worker-id", "proc-1"},
                     log());
    }
    // SIGTERM; the exit status (-1: it did not exit within 15 s).
    int stop() {
        kill(pid_, SIGTERM);
        const int status = wait_exit(pid_, 15s);
        pid_ = 0;
        return status;
    }
    bool running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

    const std::string& prefix() const { return prefix_; }
    std::string log() const { return (dir_.path() / "worker.log").string(); }
    const std::filesystem::path& dir() const { return dir_.path(); }

  private:
    std::string script() const { return (dir_.path() / "script.json").string(); }

    temp_dir dir_;
    std::string prefix_;
    pid_t pid_ = 0;
};

}  // namespace

TEST(WorkerProcess, ServesRequestsStopsOnSigtermAndKeepsSessionsAcrossRestarts) {
    worker_process worker("p", R"({"responses":[{"text":"hello from the worker"}]})");
    const auto& prefix = worker.prefix();
    broker::nats_client nc(nats_url(), "proctest-client");

    worker.start();
    auto first = subscribe_when_up(nc, prefix);
    EXPECT_EQ(first.at("ok"), true);
    auto r = nc.request(prefix + ".session.p1.enqueue",
                        R"({"lane":"followUp","id":"f1","content":"hi"})", 10s);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(json::parse(*r).at("id"), "f1");
    // The answer lands (bounded wait), then SIGTERM stops the worker cleanly.
    bool answered = false;
    for (int i = 0; i < 100 && !answered; ++i) {
        auto s = json::parse(*nc.request(prefix + ".session.p1.subscribe", "{}", 5s));
        answered = s.at("patch").at("to").at("transcript").to_number<int>() >= 2;
        std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(answered);
    EXPECT_EQ(worker.stop(), 0) << "SIGTERM must stop the worker with status 0";

    // A new worker on the same data directory has the session.
    worker.start();
    auto again = subscribe_when_up(nc, prefix);
    ASSERT_EQ(again.at("ok"), true);
    const auto& entries = again.at("patch").at("transcript").as_array();
    ASSERT_GE(entries.size(), 2u);
    EXPECT_EQ(entries[0].at("content"), "hi");
    EXPECT_EQ(entries[1].at("text"), "hello from the worker");
    EXPECT_EQ(worker.stop(), 0);
}

TEST(WorkerProcess, ReconnectsToNatsAfterTheServerRestarts) {
    const int port = free_port();
    ASSERT_GT(port, 0);
    const std::string url = "nats://127.0.0.1:" + std::to_string(port);
    pid_t nats = spawn_nats(port);
    ASSERT_GT(nats, 0) << "nats-server did not start on port " << port;
    process_guard nats_guard{nats};
    worker_process worker("r", R"({"responses":[{"text":"one"},{"text":"two"}]})");
    const auto& prefix = worker.prefix();
    worker.start(url);
    broker::nats_client nc(url, "reconnect-client");
    ASSERT_EQ(subscribe_when_up(nc, prefix).at("ok"), true);

    // The server goes away and comes back on the same address.
    kill(nats, SIGTERM);
    ASSERT_GE(wait_exit(nats, 10s), 0);
    std::this_thread::sleep_for(500ms);
    EXPECT_TRUE(worker.running()) << "the worker must survive the outage";
    nats = spawn_nats(port);
    ASSERT_GT(nats, 0) << "nats-server did not restart on port " << port;

    // Both sides reconnect and resubscribe: requests are answered again.
    std::optional<std::string> r;
    for (int i = 0; i < 100 && !r; ++i) {
        r = nc.request(prefix + ".session.p1.enqueue",
                       R"({"lane":"followUp","id":"after-restart","content":"still there?"})",
                       500ms);
        if (!r) {
            std::this_thread::sleep_for(100ms);
        }
    }
    ASSERT_TRUE(r.has_value()) << "no reply within 60 s of the server's restart";
    EXPECT_EQ(json::parse(*r).at("id"), "after-restart");
    EXPECT_EQ(worker.stop(), 0);
    kill(nats, SIGTERM);
    wait_exit(nats, 10s);
    nats = 0;
    // The outage is in the worker's log, every line of which is a JSON object.
    const auto lines = json_lines(worker.log());
    EXPECT_TRUE(logged(lines, "NATS connection lost"));
    EXPECT_TRUE(logged(lines, "NATS reconnected"));
    EXPECT_TRUE(logged(lines, "released 1 leases"));
}

TEST(WorkerProcess, ConnectsWithCredentialsInTheUrlAndNeverLogsThem) {
    const int port = free_port();
    ASSERT_GT(port, 0);
    pid_t nats = spawn_nats(port, {"--user", "wuhu", "--pass", "s3cret-pw"});
    ASSERT_GT(nats, 0) << "nats-server did not start on port " << port;
    process_guard nats_guard{nats};
    const std::string url = "nats://wuhu:s3cret-pw@127.0.0.1:" + std::to_string(port);
    EXPECT_THROW(broker::nats_client("nats://127.0.0.1:" + std::to_string(port), "no-creds"),
                 std::runtime_error)
        << "the server must require the password";
    worker_process worker("c", R"({"responses":[{"text":"ok"}]})");
    worker.start(url);
    broker::nats_client nc(url, "creds-client");
    EXPECT_EQ(subscribe_when_up(nc, worker.prefix()).at("ok"), true);
    EXPECT_EQ(worker.stop(), 0);
    std::ifstream f(worker.log());
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("s3cret-pw"), std::string::npos) << text;
    EXPECT_NE(text.find("nats://***@127.0.0.1"), std::string::npos) << text;
    kill(nats, SIGTERM);
    wait_exit(nats, 10s);
    nats = 0;
}

TEST(WorkerProcess, BadFlagsAndVariablesAreUsageErrors) {
    temp_dir dir;
    const std::string data = "sqlite://" + (dir.path() / "data").string();
    const std::vector<std::vector<std::string>> bad = {
        {"--worker-id", "a.b"},   {"--worker-id", "w 1"},   {"--prefix", "wuhu.>"},
        {"--lease-ttl-ms", "10"}, {"--store-threads", "0"}, {"--no-such-flag"},
    };
    for (auto args : bad) {
        args.insert(args.end(), {"--store", data});
        pid_t p = spawn(WUHU_WORKER_BIN, args, (dir.path() / "usage.log").string());
        EXPECT_EQ(wait_exit(p, 15s), 2) << args[0] << " " << (args.size() > 1 ? args[1] : "");
    }
    // The same checks apply to the environment variables.
    setenv("WUHU_WORKER_ID", "w*", 1);
    pid_t p = spawn(WUHU_WORKER_BIN, {"--store", data}, (dir.path() / "usage.log").string());
    unsetenv("WUHU_WORKER_ID");
    EXPECT_EQ(wait_exit(p, 15s), 2);
}

// wuhuctl's exit codes, which scripts rely on: 0 ok, 1 refused, 2 usage, 3 no reply.
TEST(Wuhuctl, ExitCodesTellOkRefusedUsageAndNoReply) {
    worker_process worker("x", R"({"responses":[{"text":"ok"}]})");
    const auto& prefix = worker.prefix();
    worker.start();
    broker::nats_client nc(nats_url(), "ctl-client");
    ASSERT_EQ(subscribe_when_up(nc, prefix).at("ok"), true);
    auto ctl = [&](std::vector<std::string> args, const std::string& with_prefix) {
        args.insert(args.begin(), {"--nats", nats_url(), "--prefix", with_prefix});
        return wait_exit(spawn(WUHUCTL_BIN, args, (worker.dir() / "ctl.log").string()), 30s);
    };
    EXPECT_EQ(ctl({"pause", "p1"}, prefix), 0);
    EXPECT_EQ(ctl({"cancel", "p1", "system", "x"}, prefix), 1);
    EXPECT_EQ(ctl({"send", "bad.id", "hi"}, prefix), 1);
    EXPECT_EQ(ctl({"send", "p1"}, prefix), 2);
    EXPECT_EQ(ctl({"frobnicate", "p1"}, prefix), 2);
    EXPECT_EQ(ctl({"status", "p1"}, prefix + "_nobody"), 3);
    EXPECT_EQ(worker.stop(), 0);
}

}  // namespace wuhu::testing
