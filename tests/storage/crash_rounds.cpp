// The crash test's driver (see crash_rounds.hpp).
#include "tests/storage/crash_rounds.hpp"
#include "session/reducer.hpp"
#include "tests/storage/store_for.hpp"
#include "tests/support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <iostream>
#include <random>
#include <set>
#include <sstream>

#include <poll.h>

namespace wuhu::testing {

namespace {

struct child_run {
    std::vector<std::string> acked;
    std::string error;
};

// Runs the child for about `ms` milliseconds of acknowledged work, then SIGKILLs it.
child_run run_child(const std::string& url, const std::string& sid, std::uint64_t epoch,
                    const std::string& prefix, int ms) {
    int out[2];
    if (pipe(out) != 0) {
        return {{}, "pipe failed"};
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], STDOUT_FILENO);
        close(out[0]);
        close(out[1]);
        std::string e = std::to_string(epoch);
        execl(WUHU_CRASH_CHILD, WUHU_CRASH_CHILD, url.c_str(), sid.c_str(), e.c_str(),
              prefix.c_str(), nullptr);
        _exit(127);
    }
    close(out[1]);
    std::string buffer;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    bool started = false;
    auto hard_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    char chunk[4096];
    while (std::chrono::steady_clock::now() < (started ? deadline : hard_deadline)) {
        pollfd p{out[0], POLLIN, 0};
        if (poll(&p, 1, 5) > 0) {
            ssize_t n = read(out[0], chunk, sizeof chunk);
            if (n <= 0) {
                break;  // the child exited on its own: an error
            }
            buffer.append(chunk, static_cast<std::size_t>(n));
            if (!started) {
                started = true;  // count the time from its first acknowledgement
                deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
            }
        }
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    // Lines it wrote before dying are acknowledgements too.
    for (ssize_t n; (n = read(out[0], chunk, sizeof chunk)) > 0;) {
        buffer.append(chunk, static_cast<std::size_t>(n));
    }
    close(out[0]);
    child_run r;
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
        r.error = "the child exited by itself (status " + std::to_string(status) + ")";
    }
    std::istringstream lines(buffer);
    for (std::string line; std::getline(lines, line);) {
        if (!line.empty() && lines.good()) {  // a final partial line is not an acknowledgement
            r.acked.push_back(line);
        }
    }
    return r;
}

}  // namespace

void crash_rounds(const std::string& url, const std::string& name, int rounds) {
    std::mt19937 rng(12345);
    auto sid = session::session_id::parse("crash").value();
    std::set<std::string> acked;
    std::uint64_t total_acked = 0;
    for (int round = 0; round < rounds; ++round) {
        SCOPED_TRACE(name + " round " + std::to_string(round));
        auto r = run_child(url, sid.str(), 2 * round + 1, "r" + std::to_string(round),
                           5 + static_cast<int>(rng() % 60));
        ASSERT_TRUE(r.error.empty()) << r.error;
        ASSERT_FALSE(r.acked.empty()) << "the child acknowledged nothing";
        acked.insert(r.acked.begin(), r.acked.end());
        total_acked += r.acked.size();
        // Reopen as a new owner: every acknowledged item is there and the state is whole.
        auto store = store_for(url);
        auto log =
            store->open(sid, session::lease_epoch{2 * static_cast<std::uint64_t>(round) + 2});
        ASSERT_TRUE(log.has_value()) << log.error().message();
        auto state = (*log)->load();
        ASSERT_TRUE(state.has_value()) << state.error().message();
        for (const auto& id : acked) {
            ASSERT_NE(state->find_item(id), nullptr) << "acknowledged item lost: " << id;
        }
        // The stored state is what replaying its own patch from zero gives.
        auto p = (*log)->since({});
        ASSERT_TRUE(p.has_value());
        EXPECT_EQ(p->to, state->version());
    }
    std::cout << name << ": " << rounds << " SIGKILL rounds, " << total_acked
              << " acknowledged operations, none lost\n";
}

}  // namespace wuhu::testing
