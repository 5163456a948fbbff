// Two processes that load and unload one session by turns, as two workers of a host do when a
// session moves between them: each round opens the session at a new epoch, enqueues an item and
// closes it again (the session unloaded). Used by store_crash_child (`share`) and its test.
#pragma once

#include "session/ids.hpp"
#include "storage/errc.hpp"
#include "storage/store.hpp"

#include <time.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace wuhu::testing {

struct shared_rounds {
    std::vector<std::string> acknowledged;  // the items enqueued
    int fenced = 0;                         // rounds another process's later epoch refused
    std::string failure;                    // the first error of the store, if any
};

// The host's monotonic clock in nanoseconds: the same in every process.
inline std::uint64_t host_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

// Rounds on session `sid` until `items` items are acknowledged (or 60 s went by: a failure),
// each at an epoch from the host's clock (twice its nanoseconds plus `side`, 0 or 1: two
// processes never take the same one, and a later round fences out every earlier one), its item
// named `prefix` and a number.
inline shared_rounds share_rounds(storage::session_store& store, const session::session_id& sid,
                                  int items, int side, const std::string& prefix) {
    shared_rounds out;
    auto now_epoch = [side] {
        return session::lease_epoch{2 * host_ns() + static_cast<std::uint64_t>(side)};
    };
    const auto fenced = storage::make_error_code(storage::errc::lease_lost);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (out.acknowledged.size() < static_cast<std::size_t>(items) && out.failure.empty()) {
        if (std::chrono::steady_clock::now() > give_up) {
            out.failure = std::to_string(out.acknowledged.size()) + " of " + std::to_string(items) +
                          " items acknowledged in 60 s";
            break;
        }
        auto log = store.open(sid, now_epoch());
        if (!log) {
            if (log.error() != fenced) {
                out.failure = "open: " + log.error().message();
            }
            ++out.fenced;
            continue;
        }
        auto state = (*log)->load();
        if (!state) {
            if (state.error() != fenced) {
                out.failure = "load: " + state.error().message();
            }
            ++out.fenced;
            continue;
        }
        const auto item = prefix + std::to_string(out.acknowledged.size());
        auto done =
            (*log)->enqueue(*state,
                            session::enqueue_input{
                                session::lane::steer, session::queue_item_id::parse(item).value(),
                                session::user_input{session::unknown_author{}, item}},
                            session::unix_ms{1});
        if (done) {
            out.acknowledged.push_back(item);
        } else if (done.error() == fenced) {
            ++out.fenced;
        } else {
            out.failure = "enqueue: " + done.error().message();
        }
    }
    return out;
}

}  // namespace wuhu::testing
