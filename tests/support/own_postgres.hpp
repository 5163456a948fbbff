// A PostgreSQL server of a test's own (not the one scripts/test starts, which others share), so
// that the test can stop and restart it: initdb in a temporary directory with password
// authentication (scram-sha-256) for the user `postgres` and `password`, on 127.0.0.1 and a
// free port. Run as the `postgres` user when the test runs as root (initdb refuses root).
// Started by the constructor (up() says whether it came up), stopped by stop() and started again
// by start(); stopped when destroyed.
#pragma once

#include "tests/support/process.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

namespace wuhu::testing {

class own_postgres {
  public:
    explicit own_postgres(std::string password) : port_(free_port()), password_(std::move(password)) {
        if (::getuid() == 0) {
            if (const passwd* pw = ::getpwnam("postgres"); pw != nullptr) {
                ::chown(dir_.path().c_str(), pw->pw_uid, pw->pw_gid);
            }
        }
        ::chmod(dir_.path().c_str(), 0700);
        const auto pwfile = dir_.path() / "pwfile";
        std::ofstream(pwfile) << password_ << "\n";
        if (::getuid() == 0) {
            if (const passwd* pw = ::getpwnam("postgres"); pw != nullptr) {
                ::chown(pwfile.c_str(), pw->pw_uid, pw->pw_gid);
            }
        }
        const int init = wait_exit(
            run(bin("initdb"), {"-D", data(), "-U", "postgres", "--auth=scram-sha-256",
                                "--pwfile=" + pwfile.string(), "-E", "UTF8", "--locale=C.UTF-8"},
                "initdb.log"),
            std::chrono::seconds(120));
        initialized_ = init == 0;
        start();
    }
    ~own_postgres() { stop(); }
    own_postgres(const own_postgres&) = delete;

    // Whether it came up.
    bool start() {
        if (!initialized_) {
            return false;
        }
        const std::string opts = "-k " + dir_.path().string() + " -p " + std::to_string(port_) +
                                 " -c listen_addresses=127.0.0.1";
        up_ = wait_exit(run(bin("pg_ctl"),
                            {"-D", data(), "-l", (dir_.path() / "server.log").string(), "-w",
                             "-t", "60", "-o", opts, "start"},
                            "pg_ctl.log"),
                        std::chrono::seconds(90)) == 0;
        return up_;
    }
    // A fast shutdown; whether it stopped.
    bool stop() {
        if (!up_) {
            return true;
        }
        up_ = wait_exit(run(bin("pg_ctl"), {"-D", data(), "-m", "fast", "-w", "stop"}, "pg_ctl.log"),
                        std::chrono::seconds(60)) != 0;
        return !up_;
    }
    bool up() const { return up_; }
    int port() const { return port_; }
    // postgresql://postgres:<password>@127.0.0.1:<port>/postgres
    std::string url() const {
        return "postgresql://postgres:" + password_ + "@127.0.0.1:" + std::to_string(port_) +
               "/postgres";
    }
    std::string log() const {
        std::ifstream f(dir_.path() / "server.log");
        return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    }

  private:
    static std::string bin(const char* name) {
        return std::string("/usr/lib/postgresql/15/bin/") + name;
    }
    std::string data() const { return (dir_.path() / "data").string(); }
    // `program` with `args`, as the postgres user when this is root; stderr to `log`.
    pid_t run(const std::string& program, std::vector<std::string> args,
              const char* log) const {
        const auto log_path = (dir_.path() / log).string();
        if (::getuid() == 0) {
            args.insert(args.begin(), {"-u", "postgres", "--", program});
            return spawn("runuser", args, spawn_options{log_path, std::nullopt, log_path + ".out"});
        }
        return spawn(program.c_str(), args, spawn_options{log_path, std::nullopt, log_path + ".out"});
    }

    temp_dir dir_;
    int port_ = 0;
    std::string password_;
    bool initialized_ = false;
    bool up_ = false;
};

}  // namespace wuhu::testing
