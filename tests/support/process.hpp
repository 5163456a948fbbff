// Real processes for the *_proctest suites: spawning, waiting with a bound, nats-servers of a
// test's own, and wuhu-worker processes with their own (or a shared) data directory, read back
// through their JSON log lines. Every wait is bounded; a process a test started is killed if
// the test ends early.
#pragma once

#include "nats/connection.hpp"
#include "tests/support/env.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <optional>
#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace wuhu::testing {

// The wuhu-worker binary under test: this build's, or WUHU_TEST_WORKER_BIN (to run a test
// against another build, e.g. to see a regression test fail before its fix).
inline const char* worker_bin() {
    const char* other = std::getenv("WUHU_TEST_WORKER_BIN");
    return other != nullptr && *other != '\0' ? other : WUHU_WORKER_BIN;
}

struct spawn_options {
    std::string log;  // stderr goes here when set
    // RLIMIT_FSIZE for the child (a disk that refuses to grow files); SIGXFSZ is ignored so
    // that a write past it fails with EFBIG instead of killing the process.
    std::optional<rlim_t> max_file_bytes;
    std::string out;  // stdout goes here when set
};

// Starts `bin` (a path, or a name looked up in PATH) with `args`.
inline pid_t spawn(const char* bin, const std::vector<std::string>& args,
                   const spawn_options& o = {}) {
    pid_t pid = fork();
    if (pid == 0) {
        if (!o.log.empty()) {
            int fd = open(o.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            dup2(fd, STDERR_FILENO);
        }
        if (!o.out.empty()) {
            int fd = open(o.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fd, STDOUT_FILENO);
        }
        if (o.max_file_bytes) {
            signal(SIGXFSZ, SIG_IGN);
            rlimit lim{*o.max_file_bytes, *o.max_file_bytes};
            setrlimit(RLIMIT_FSIZE, &lim);
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

inline pid_t spawn(const char* bin, const std::vector<std::string>& args, const std::string& log) {
    return spawn(bin, args, spawn_options{log, std::nullopt, {}});
}

// Waits (bounded) for the process to exit; its exit status (128 + signal when killed), or -1
// if it did not exit in time (it is then killed).
inline int wait_exit(pid_t pid, std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
}

// The lines of a file; every one must be a JSON object (the worker's log).
inline std::vector<boost::json::object> json_lines(const std::string& path) {
    std::ifstream f(path);
    std::vector<boost::json::object> out;
    std::string line;
    while (std::getline(f, line)) {
        boost::system::error_code ec;
        auto v = boost::json::parse(line, ec);
        if (ec || !v.is_object()) {
            ADD_FAILURE() << "not a JSON log line: " << line;
            continue;
        }
        out.push_back(v.as_object());
    }
    return out;
}

inline bool logged(const std::vector<boost::json::object>& lines, std::string_view text) {
    for (const auto& l : lines) {
        if (l.at("msg").as_string().find(text) != std::string::npos) {
            return true;
        }
    }
    return false;
}

// A free TCP port on 127.0.0.1 (bound, read, released).
// Whether this build keeps freed memory (AddressSanitizer's quarantine): resident memory is then
// printed by the tests that measure it, and checked in the other builds (scripts/bench).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool releases_memory = false;
#else
inline constexpr bool releases_memory = true;
#endif

// A process's resident memory in KiB (-1: unknown).
inline long resident_kib(pid_t pid) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.starts_with("VmRSS:")) {
            return std::stol(line.substr(6));
        }
    }
    return -1;
}

inline int free_port() {
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

// A nats-server of the test's own on 127.0.0.1:port (so that the test can stop and restart
// it), with extra arguments (authentication), logging to `log`; or -1 if it did not come up.
// Up means this very process says so in its log ("Server is ready"): something else that
// listens on the port (another test's server that took the same free port first, while this
// one exits with "address already in use") is not this server, and a test that talked to it
// would fail for nothing it did.
inline pid_t spawn_nats(int port, std::vector<std::string> extra, const std::filesystem::path& log) {
    std::vector<std::string> args{"-a", "127.0.0.1", "-p", std::to_string(port)};
    args.insert(args.end(), extra.begin(), extra.end());
    std::error_code ec;
    const auto from = std::filesystem::exists(log) ? std::filesystem::file_size(log, ec) : 0;
    pid_t pid = spawn("nats-server", args, log.string());
    for (int i = 0; i < 200; ++i) {
        std::ifstream f(log);
        f.seekg(static_cast<std::streamoff>(from));
        const std::string said((std::istreambuf_iterator<char>(f)),
                               std::istreambuf_iterator<char>());
        if (said.find("Server is ready") != std::string::npos) {
            return pid;
        }
        if (waitpid(pid, nullptr, WNOHANG) == pid) {
            return -1;  // it could not start (the port taken, a bad configuration)
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
}

// A nats-server of a test's own (not the one scripts/test starts, which others share): on
// 127.0.0.1 and a free port, with extra arguments (authentication) and, when given, a config
// file's text (`max_payload: 8192`). Started by the constructor (up() says whether it came
// up), stopped by stop() and started again on the same port by start(); stopped with SIGTERM
// and waited for when destroyed.
class own_nats {
  public:
    explicit own_nats(std::vector<std::string> extra = {}, const std::string& config = "")
        : extra_(std::move(extra)) {
        if (!config.empty()) {
            std::ofstream(dir_.path() / "nats.conf") << config << "\n";
            extra_.insert(extra_.end(), {"-c", (dir_.path() / "nats.conf").string()});
        }
        // A free port may be taken by another test's server before this one binds it: then
        // another free port.
        for (int attempt = 0; attempt < 5 && !up(); ++attempt) {
            port_ = free_port();
            start();
        }
    }
    ~own_nats() { stop(); }
    own_nats(const own_nats&) = delete;

    bool start() {
        pid_ = port_ > 0 ? spawn_nats(port_, extra_, dir_.path() / "nats.log") : -1;
        return up();
    }
    // SIGTERM; the exit status (-1: it did not exit within 10 s, and was killed).
    int stop() {
        if (pid_ <= 0) {
            return -1;
        }
        kill(pid_, SIGTERM);
        const int status = wait_exit(pid_, std::chrono::seconds(10));
        pid_ = 0;
        return status;
    }
    // SIGKILL (a node that dies), and waited for.
    void kill_now() {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            wait_exit(pid_, std::chrono::seconds(10));
            pid_ = 0;
        }
    }
    bool up() const { return pid_ > 0; }
    int port() const { return port_; }
    // nats://[credentials@]127.0.0.1:<port>
    std::string url(const std::string& credentials = "") const {
        return "nats://" + (credentials.empty() ? "" : credentials + "@") +
               "127.0.0.1:" + std::to_string(port_);
    }

  private:
    temp_dir dir_;
    int port_ = 0;
    std::vector<std::string> extra_;
    pid_t pid_ = 0;
};

// A wuhu-worker process of one test: its script, subject prefix and log file (printed if the
// test fails); a data directory of its own unless `data_dir` is given (workers of one host);
// killed if the test ends early.
class worker_process {
  public:
    struct config {
        std::string worker_id = "proc-1";
        std::filesystem::path data_dir;  // empty: a directory of its own
        std::string prefix;              // empty: wuhu_<tag><pid>
        std::string store;               // empty: sqlite://<data dir>
        std::vector<std::string> args;   // more flags
        std::optional<rlim_t> max_file_bytes;
    };

    worker_process(const std::string& tag, const std::string& script_json)
        : worker_process(tag, script_json, config{}) {}
    worker_process(const std::string& tag, const std::string& script_json, config c)
        : config_(std::move(c)),
          prefix_(config_.prefix.empty() ? "wuhu_" + tag + std::to_string(getpid())
                                         : config_.prefix) {
        std::ofstream(script()) << script_json;
    }
    ~worker_process() {
        if (running()) {
            kill(pid_, SIGCONT);
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        if (::testing::Test::HasFailure()) {
            std::ifstream f(log());
            std::cerr << "worker " << config_.worker_id << " log:\n" << f.rdbuf();
        }
    }
    worker_process(const worker_process&) = delete;

    void start(const std::string& url = nats_url()) {
        std::vector<std::string> args{
            "--nats",      url,
            "--store",     config_.store.empty() ? "sqlite://" + data().string() : config_.store,
            "--script",    script(),
            "--prefix",    prefix_,
            "--worker-id", config_.worker_id,
            "--metrics-addr", "127.0.0.1:0"};
        args.insert(args.end(), config_.args.begin(), config_.args.end());
        pid_ = spawn(worker_bin(), args, spawn_options{log(), config_.max_file_bytes, {}});
    }
    // SIGTERM; the exit status (-1: it did not exit within 15 s).
    int stop() {
        kill(pid_, SIGCONT);
        kill(pid_, SIGTERM);
        const int status = wait_exit(pid_, std::chrono::seconds(15));
        pid_ = 0;
        return status;
    }
    // SIGKILL, and waits for it.
    void crash() {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        pid_ = 0;
    }
    void signal(int sig) { kill(pid_, sig); }
    bool running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
    pid_t pid() const { return pid_; }

    const std::string& prefix() const { return prefix_; }
    const std::string& id() const { return config_.worker_id; }
    std::string log() const { return (dir_.path() / "worker.log").string(); }
    const std::filesystem::path& dir() const { return dir_.path(); }
    std::filesystem::path data() const {
        return config_.data_dir.empty() ? dir_.path() / "data" : config_.data_dir;
    }
    // Whether a log line so far contains `text`.
    bool has_logged(std::string_view text) const { return logged(json_lines(log()), text); }
    // Waits (bounded) until a log line contains `text`.
    bool wait_logged(std::string_view text, std::chrono::seconds limit) const {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (!has_logged(text)) {
            if (std::chrono::steady_clock::now() > deadline) {
                return false;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return true;
    }
    // Waits (bounded) for the process to exit by itself; its status (-1: killed after `limit`).
    int wait(std::chrono::seconds limit) {
        const int status = wait_exit(pid_, limit);
        pid_ = 0;
        return status;
    }
    // The subject of a request sent to this worker only (the forwarding subject).
    std::string direct(const std::string& sid, const std::string& verb) const {
        return prefix_ + ".worker." + config_.worker_id + ".session." + sid + "." + verb;
    }

  private:
    std::string script() const { return (dir_.path() / "script.json").string(); }

    temp_dir dir_;
    config config_;
    std::string prefix_;
    pid_t pid_ = 0;
};

// Waits until `nc` gets an answer from a worker on `subject` (bounded: 30 s); the answer.
inline boost::json::value answer_when_up(nats::connection& nc, const std::string& subject,
                                         const std::string& body = "{}") {
    for (int i = 0; i < 100; ++i) {
        if (auto r = nc.request(subject, body, std::chrono::milliseconds(200))) {
            return boost::json::parse(*r);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "no worker answered " << subject;
    return boost::json::object{};
}

// Waits (bounded: 30 s) until the session's loop is idle with nothing to do, asking `subject`
// (a subscribe subject).
inline bool wait_idle(nats::connection& nc, const std::string& subject) {
    for (int i = 0; i < 300; ++i) {
        if (auto r = nc.request(subject, "{}", std::chrono::seconds(1))) {
            auto v = boost::json::parse(*r);
            if (v.at("ok") == true && v.at("status").at("state") == "idle" &&
                v.at("status").at("has_work") == false) {
                return true;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

// The ids of the items a subscribe reply's patch holds (enqueued, pending or materialized).
inline std::set<std::string> item_ids(const boost::json::value& reply) {
    std::set<std::string> ids;
    const auto& p = reply.at("patch");
    for (const char* lane : {"system", "steer", "followUp"}) {
        for (const auto& f : p.at("journal").at(lane).as_array()) {
            if (const auto* item = f.as_object().if_contains("item")) {
                ids.insert(boost::json::value_to<std::string>(item->at("id")));
            }
        }
    }
    for (const auto& e : p.at("transcript").as_array()) {
        if (const auto* id = e.as_object().if_contains("item")) {
            ids.insert(boost::json::value_to<std::string>(*id));
        }
    }
    return ids;
}

// The p-quantile (0..1) of `xs` (0 when empty): the value at index p * n of the sorted values.
inline double percentile(std::vector<double> xs, double p) {
    if (xs.empty()) {
        return 0;
    }
    std::sort(xs.begin(), xs.end());
    return xs[std::min(xs.size() - 1, static_cast<std::size_t>(p * static_cast<double>(xs.size())))];
}

}  // namespace wuhu::testing
