// The wuhu-worker process turn_bench drives (bench/turn_bench.cpp): started on a store with the
// scripted model, libfsync_count.so preloaded, its metrics scraped for the store's commits, and
// stopped with SIGTERM.
#pragma once

#include "bench/turn_probes.hpp"
#include "nats/connection.hpp"
#include "tests/support/http_get.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace wuhu::bench {

inline int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
        port = ntohs(addr.sin_port);
    }
    close(fd);
    return port;
}

class worker_process {
  public:
    worker_process(const fs::path& dir, const std::string& nats_url, const std::string& store,
                   const std::string& synchronous, bool metrics, const std::string& prefix,
                   const fsync_counter& fsyncs) {
        {
            std::ofstream(dir / "script.json") << script_text_;
        }
        if (metrics) {
            metrics_addr_ = "127.0.0.1:" + std::to_string(free_port());
        }
        std::vector<std::string> args{
            WUHU_WORKER_BIN, "--nats", nats_url, "--store", store, "--sqlite-synchronous",
            synchronous, "--script", (dir / "script.json").string(), "--prefix", prefix,
            "--worker-id", "bench-" + prefix, "--passivate-after", "0", "--metrics-addr",
            metrics ? metrics_addr_ : "off"};
        args.insert(args.end(), extra_args_.begin(), extra_args_.end());
        const auto log = (dir / "worker.log").string();
        pid_ = fork();
        if (pid_ == 0) {
            const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            dup2(fd, STDERR_FILENO);
            setenv("LD_PRELOAD", WUHU_FSYNC_COUNT_LIB, 1);
            setenv("WUHU_FSYNC_COUNTER", fsyncs.file().c_str(), 1);
            // In a sanitizer build the preloaded library comes before the ASan runtime.
            const char* asan = std::getenv("ASAN_OPTIONS");
            setenv("ASAN_OPTIONS",
                   (std::string(asan != nullptr ? asan : "") + ":verify_asan_link_order=0")
                       .c_str(),
                   1);
            std::vector<char*> argv;
            for (auto& a : args) {
                argv.push_back(a.data());
            }
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
    }
    ~worker_process() { stop(); }
    static void set_script(std::string s) { script_text_ = std::move(s); }
    static void set_extra_args(std::vector<std::string> a) { extra_args_ = std::move(a); }

    // SIGTERM, then waits for the orderly stop; true when it exited 0.
    bool stop() {
        if (pid_ <= 0) {
            return true;
        }
        kill(pid_, SIGTERM);
        int status = 0;
        waitpid(pid_, &status, 0);
        pid_ = 0;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    pid_t pid() const { return pid_; }
    // Waits up to 20 s until the worker answers a request (a subscribe of an unknown session,
    // `<session_subject>warmup.subscribe`); false, said on stderr by `who`, when it does not.
    bool wait_until_up(wuhu::nats::connection& requests, const std::string& session_subject,
                       const fs::path& dir, const char* who) const {
        using namespace std::chrono_literals;
        const auto ready_by = clock_type::now() + 20s;
        while (!requests.request(session_subject + "warmup.subscribe", "{}", 500ms)) {
            if (clock_type::now() > ready_by) {
                std::fprintf(stderr, "%s: the worker did not come up; see %s\n", who,
                             (dir / "worker.log").c_str());
                return false;
            }
        }
        return true;
    }
    // The worker's store commits so far (-1: no metrics).
    double commits() const {
        if (metrics_addr_.empty()) {
            return -1;
        }
        const auto scrape = wuhu::testing::http_get(metrics_addr_, "/metrics").body;
        for (const char* backend : {"sqlite", "postgres", "memory"}) {
            const double v = wuhu::testing::metric_value(
                scrape,
                std::string("wuhu_store_commit_duration_seconds_count{backend=\"") + backend +
                    "\"}");
            if (v >= 0) {
                return v;
            }
        }
        return -1;
    }

  private:
    static inline std::string script_text_;
    static inline std::vector<std::string> extra_args_;
    pid_t pid_ = 0;
    std::string metrics_addr_;
};

}  // namespace wuhu::bench
