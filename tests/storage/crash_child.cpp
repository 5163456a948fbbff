// The child of the store crash test: appends operations to one session as fast as it can and
// acknowledges each on stdout (one line, flushed) only after its commit returned. The parent
// kills it with SIGKILL at a random moment.
//
//   store_crash_child <store-url> <session-id> <epoch> <item-prefix>
//
// With `churn`, it creates, writes and removes one session `rounds` times instead (at epochs
// 2, 4, 6, ...), while the parent opens it; it exits 1 at the first operation that fails.
//
//   store_crash_child churn <store-url> <session-id> <rounds>
//
// With `share`, it prints "ready" once its store is open and waits until the file `go` exists
// (30 s at most); then it loads and unloads one session until `items` items are acknowledged
// (share_rounds.hpp) while the parent does the same. It prints each acknowledged item, then
// on stderr "fenced <rounds another epoch refused>", and exits 1 at the first error of the
// store.
//
//   store_crash_child share <store-url> <session-id> <items> <go>
//
// With `hold`, it opens one session (at epoch 1, making it), prints "opened", waits until the
// file `go` exists (30 s at most), then enqueues an item and prints "acknowledged" or the
// store's error code, and exits (1 if `go` never came).
//
//   store_crash_child hold <store-url> <session-id> <go>
//
// With `die-after-commit`, it opens one session of a SQLite store in `data-dir` (making it),
// enqueues an item, and exits with 9 right after the session file's commit, before the store
// writes the catalog row after it (as if killed between the two).
//
//   store_crash_child die-after-commit <data-dir> <session-id>
#include "storage/sqlite_store.hpp"
#include "session/reducer.hpp"
#include "tests/storage/share_rounds.hpp"
#include "tests/storage/store_for.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

using namespace wuhu;

namespace {

int churn(const std::string& url, const std::string& session, int rounds) {
    auto store = testing::store_for(url);
    auto sid = session::session_id::parse(session).value();
    for (std::uint64_t e = 2; e < 2 + 2 * static_cast<std::uint64_t>(rounds); e += 2) {
        auto log = store->open(sid, session::lease_epoch{e});
        if (!log) {
            std::cerr << "open at " << e << ": " << log.error().message() << "\n";
            return 1;
        }
        auto state = (*log)->load();
        if (!state) {
            std::cerr << "load at " << e << ": " << state.error().message() << "\n";
            return 1;
        }
        auto id = session::queue_item_id::parse("x").value();
        auto out = (*log)->enqueue(
            *state,
            session::enqueue_input{session::lane::steer, id,
                                   session::user_input{session::unknown_author{}, "y"}},
            session::unix_ms{1});
        if (!out) {
            std::cerr << "enqueue at " << e << ": " << out.error().message() << "\n";
            return 1;
        }
        if (auto removed = store->remove(sid, session::lease_epoch{e}); !removed) {
            std::cerr << "remove at " << e << ": " << removed.error().message() << "\n";
            return 1;
        }
    }
    return 0;
}

// Waits until the file `go` exists (30 s at most); whether it does.
bool wait_for(const std::string& go) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!std::filesystem::exists(go)) {
        if (std::chrono::steady_clock::now() > give_up) {
            std::cerr << go << " never came\n";
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// A session's log, opened and loaded.
struct loaded {
    std::unique_ptr<storage::session_log> log;
    session::session_state state;
};

// Opens and loads session `session` of `store` at `epoch`; nothing when either fails (said on
// stderr).
std::optional<loaded> open_and_load(storage::session_store& store, const std::string& session,
                                    session::lease_epoch epoch) {
    auto log = store.open(session::session_id::parse(session).value(), epoch);
    if (!log) {
        std::cerr << "open: " << log.error().message() << "\n";
        return std::nullopt;
    }
    auto state = (*log)->load();
    if (!state) {
        std::cerr << "load: " << state.error().message() << "\n";
        return std::nullopt;
    }
    return loaded{std::move(*log), std::move(*state)};
}

int hold(const std::string& url, const std::string& session, const std::string& go) {
    auto store = testing::store_for(url);
    auto held = open_and_load(*store, session, session::lease_epoch{1});
    if (!held) {
        return 1;
    }
    std::printf("opened\n");
    std::fflush(stdout);
    if (!wait_for(go)) {
        return 1;
    }
    auto out = held->log->enqueue(
        held->state,
        session::enqueue_input{session::lane::steer, session::queue_item_id::parse("held").value(),
                               session::user_input{session::unknown_author{}, "held"}},
        session::unix_ms{1});
    const std::string said =
        out ? "acknowledged"
            : std::string(storage::code_name(static_cast<storage::errc>(out.error().value())));
    std::printf("%s\n", said.c_str());
    return 0;
}

int die_after_commit(const std::string& data_dir, const std::string& session) {
    storage::sqlite_options o;
    o.data_dir = data_dir;
    o.after_file_commit = [] { std::_Exit(9); };  // the first commit is the enqueue's
    storage::sqlite_store store(o);
    auto held = open_and_load(store, session, session::lease_epoch{1});
    if (!held) {
        return 1;
    }
    auto out = held->log->enqueue(
        held->state,
        session::enqueue_input{session::lane::follow_up,
                               session::queue_item_id::parse("work").value(),
                               session::user_input{session::unknown_author{}, "work"}},
        session::unix_ms{1});
    std::cerr << "the commit returned: " << (out ? "ok" : out.error().message()) << "\n";
    return 1;  // not reached when the hook ran
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 4 && std::string(argv[1]) == "die-after-commit") {
        return die_after_commit(argv[2], argv[3]);
    }
    if (argc == 5 && std::string(argv[1]) == "churn") {
        return churn(argv[2], argv[3], std::stoi(argv[4]));
    }
    if (argc == 6 && std::string(argv[1]) == "share") {
        auto store = testing::store_for(argv[2]);
        std::printf("ready\n");
        std::fflush(stdout);
        if (!wait_for(argv[5])) {
            return 1;
        }
        auto out = testing::share_rounds(*store, session::session_id::parse(argv[3]).value(),
                                         std::stoi(argv[4]), 0, "child-");
        for (const auto& item : out.acknowledged) {
            std::printf("%s\n", item.c_str());
        }
        std::cerr << "fenced " << out.fenced << "\n";
        if (!out.failure.empty()) {
            std::cerr << out.failure << "\n";
            return 1;
        }
        return 0;
    }
    if (argc == 5 && std::string(argv[1]) == "hold") {
        return hold(argv[2], argv[3], argv[4]);
    }
    if (argc != 5) {
        std::cerr << "usage: store_crash_child <store-url> <session-id> <epoch> <prefix>\n";
        return 2;
    }
    auto store = testing::store_for(argv[1]);
    auto opened = open_and_load(*store, argv[2], session::lease_epoch{std::stoull(argv[3])});
    if (!opened) {
        return 1;
    }
    auto& log = opened->log;
    session::session_state s = std::move(opened->state);
    const std::string prefix = argv[4];
    for (std::uint64_t n = 0;; ++n) {
        // Alternate the operations a session sees most: enqueue, then drain.
        auto id = session::queue_item_id::parse(prefix + "-" + std::to_string(n)).value();
        auto out =
            log->enqueue(s,
                         session::enqueue_input{
                             session::lane::follow_up, id,
                             session::user_input{session::unknown_author{}, "work " + id.str()}},
                         session::unix_ms{static_cast<std::int64_t>(n)});
        if (!out) {
            std::cerr << "enqueue: " << out.error().message() << "\n";
            return 1;
        }
        session::apply_actions(out->actions, s);
        std::printf("%s\n", id.str().c_str());
        std::fflush(stdout);
        if (n % 3 == 2) {
            auto drained = log->drain(s, session::checkpoint::follow_up,
                                      session::unix_ms{static_cast<std::int64_t>(n)});
            if (!drained) {
                std::cerr << "drain: " << drained.error().message() << "\n";
                return 1;
            }
            session::apply_actions(*drained, s);
        }
    }
}
