#include "app/recovery_sweep.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <map>

namespace wuhu::app {

asio::awaitable<void> recovery_sweep::run([[maybe_unused]] runtime::work_gate::pass pass) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (;;) {
        timer.expires_after(settings_.interval);
        co_await timer.async_wait(asio::use_awaitable);
        if (stopping_) {
            co_return;
        }
        co_await round();
    }
}

asio::awaitable<void> recovery_sweep::round() {
    // A timer due within two rounds is loaded now (rounds are a little more than an interval
    // apart), so that it fires on time; passivation keeps the same horizon.
    storage::catalog_query due;
    due.needing_owner_by =
        session::unix_ms{clock_.now().value + 2 * settings_.interval.count()};
    auto listing = registry_.catalog(std::move(due));
    auto candidates = co_await std::move(listing);
    if (!candidates) {
        co_return;  // the store is away (its watcher logs it)
    }
    // This worker's but not loaded (its loop failed, or a request that took the lease could
    // not load it): this sweep's to load. The others: claimed if no live lease holds them (the
    // claim skips those another worker owns).
    std::vector<std::pair<storage::catalog_entry, session::lease_epoch>> recovering;
    std::vector<session::session_id> orphans;
    std::map<std::string, storage::catalog_entry> why;
    std::size_t needing = 0;  // not loaded here
    for (const auto& c : *candidates) {
        if (registry_.contains(c.id)) {
            continue;
        }
        ++needing;
        if (auto held = keeper_.epoch_of(c.id)) {
            if (recovering.size() < settings_.batch) {
                recovering.emplace_back(c, *held);
            }
        } else {
            orphans.push_back(c.id);
            why.emplace(c.id.str(), c);
        }
    }
    std::shuffle(orphans.begin(), orphans.end(), rng_);
    // Timers first: they have a time to keep, work can wait a round.
    std::stable_partition(orphans.begin(), orphans.end(), [&](const session::session_id& id) {
        return !why.at(id.str()).summary.has_work;
    });
    if (recovering.size() < settings_.batch && !orphans.empty()) {
        const std::size_t room = settings_.batch - recovering.size();
        auto claiming = leases_.claim(std::move(orphans), room);
        auto claimed = co_await std::move(claiming);
        if (claimed) {
            for (const auto& l : *claimed) {
                recovering.emplace_back(why.at(l.id.str()), l.epoch);
            }
            metrics_.without_owner(claimed->size());
        }  // else the lease store is away: the leases' own callers log it
    } else if (orphans.empty()) {
        metrics_.without_owner(0);
    }
    if (!recovering.empty()) {
        log_->info(
            "sweep: recovering {} sessions (at most {} a round) of {} that need an owner or a "
            "load",
            recovering.size(), settings_.batch, needing);
    }
    for (const auto& [c, epoch] : recovering) {
        if (stopping_) {
            co_return;  // the stop releases what this round took
        }
        auto getting = registry_.get(c.id, epoch, storage::open_mode::existing);
        auto loop = co_await std::move(getting);
        if (!loop) {
            if (loop.error() != storage::errc::not_found) {
                log_->warn("could not recover session {}: {}", c.id.str(),
                           loop.error().message());
            }
            leases_.release(c.id, epoch);  // another worker may do better
            continue;
        }
        metrics_.recovery();
        if (c.summary.has_work) {
            log_->info("recovered session {} (epoch {}): it has work to do", c.id.str(),
                       epoch.value);
        } else {
            log_->info("recovered session {} (epoch {}): its timer is due in {} ms", c.id.str(),
                       epoch.value,
                       c.summary.next_timer.value_or(session::unix_ms{0}).value -
                           clock_.now().value);
        }
    }
}

}  // namespace wuhu::app
