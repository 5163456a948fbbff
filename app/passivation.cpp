#include "app/passivation.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <malloc.h>

#include <algorithm>

namespace wuhu::app {

using std::chrono::milliseconds;

asio::awaitable<void> passivation::run([[maybe_unused]] runtime::work_gate::pass pass) {
    const auto tick = settings_.after.count() > 0
                          ? std::clamp(settings_.after / 4, milliseconds(50), milliseconds(1000))
                          : milliseconds(1000);
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
        timer.expires_after(tick);
        co_await timer.async_wait(asio::use_awaitable);
        if (stopping_) {
            co_return;
        }
        round();
    }
}

void passivation::round() {
    const auto& o = settings_;
    const auto now = std::chrono::steady_clock::now();
    const std::size_t loaded = registry_.size();
    std::size_t over = o.max_loaded > 0 && loaded > o.max_loaded ? loaded - o.max_loaded : 0;
    // Least recently used first: those idle long enough, then more of the idle ones while the
    // worker holds too many. A session whose timer is due within two sweep rounds stays; a
    // later one is loaded again by the sweep one round before it is due.
    const session::unix_ms keep_timers_until{clock_.now().value + 2 * o.sweep_interval.count()};
    // Only the sessions unused for `after` (none when 0), or, while the worker holds too many,
    // the least recently used of all: the walk stops at the first session used since.
    const bool by_age = o.after.count() > 0;
    auto idle = over > 0 || by_age ? registry_.passivable(over > 0 ? now : now - o.after,
                                                          keep_timers_until, o.batch)
                                   : std::vector<worker::session_registry::idle_session>{};
    std::size_t n = 0;
    releasing_ = true;
    for (const auto& [id, used] : idle) {
        const bool stale = by_age && used <= now - o.after;
        if (!stale && over == 0) {
            break;  // the rest were used more recently still
        }
        registry_.unload(id);
        leases_.release(id);
        over -= over > 0 ? 1 : 0;
        ++n;
    }
    releasing_ = false;
    if (n > 0) {
        log_->info("passivated {} idle sessions; {} loaded", n, registry_.size());
    }
    // glibc keeps the memory of freed sessions for later allocations, mostly in the store
    // threads' heaps where their files were opened and closed. Once sessions have been freed
    // since the last round, the free pages go back to the system, so that resident memory
    // follows the sessions loaded rather than the most ever loaded.
    if (const auto freed = registry_.freed(); freed != trimmed_at_) {
        malloc_trim(0);
        trimmed_at_ = freed;
    }
}

}  // namespace wuhu::app
