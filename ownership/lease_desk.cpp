#include "ownership/lease_desk.hpp"

#include "runtime/offload.hpp"

#include <boost/asio/post.hpp>

namespace wuhu::ownership {

using ownership::result;
using runtime::run_on;

void lease_desk::run_urgent() {
    for (;;) {
        std::function<void()> job;
        {
            std::lock_guard lock(urgent_mu_);
            if (urgent_.empty()) {
                return;
            }
            job = std::move(urgent_.front());
            urgent_.pop_front();
        }
        job();
    }
}

template <class R>
asio::awaitable<R> lease_desk::in_turn(std::function<R()> op) {
    auto task = run_on<R>(lease_ex_, [this, op = std::move(op)] {
        run_urgent();
        return op();
    });
    R out = co_await std::move(task);
    co_return out;
}

std::optional<lease_desk::placement> lease_desk::at_once(const session::session_id& id) const {
    if (waiting_.contains(id.str())) {
        return std::nullopt;
    }
    return keeper_.here_now(id);
}

asio::awaitable<result<lease_desk::placement>> lease_desk::place(session::session_id id) {
    if (auto now = at_once(id)) {
        co_return *now;
    }
    const bool behind_another = waiting_.contains(id.str());
    waiting in_line(this, id.str());
    if (behind_another) {
        auto task = in_turn<result<placement>>([this, id] { return keeper_.place(id); });
        auto out = co_await std::move(task);
        co_return out;
    }
    auto mine = std::make_shared<batched>(batched{id, std::nullopt});
    {
        std::lock_guard lock(batch_mu_);
        batch_.push_back(mine);
    }
    auto task = in_turn<bool>([this] {
        place_batch();
        return true;
    });
    co_await std::move(task);
    if (!mine->out) {
        co_return ownership::result<placement>(storage::errc::unavailable);
    }
    co_return std::move(*mine->out);
}

void lease_desk::place_batch() {
    std::vector<std::shared_ptr<batched>> batch;
    {
        std::lock_guard lock(batch_mu_);
        batch.swap(batch_);
    }
    if (batch.empty()) {
        return;  // placed by an earlier turn
    }
    std::vector<session::session_id> ids;
    ids.reserve(batch.size());
    for (const auto& b : batch) {
        ids.push_back(b->id);
    }
    try {
        auto placed = keeper_.place_all(ids);
        for (std::size_t i = 0; i < batch.size(); ++i) {
            batch[i]->out = std::move(placed[i]);
        }
    } catch (...) {
        // Every placement of the batch gets an answer, not only the one whose turn this is.
        for (auto& b : batch) {
            if (!b->out) {
                b->out = ownership::result<placement>(storage::errc::unavailable);
            }
        }
        throw;
    }
}

asio::awaitable<result<std::optional<lease_desk::placement>>> lease_desk::locate(
    session::session_id id) {
    if (auto now = at_once(id)) {
        co_return std::optional<placement>(*now);
    }
    waiting in_line(this, id.str());
    auto task =
        in_turn<result<std::optional<placement>>>([this, id] { return keeper_.locate(id); });
    auto out = co_await std::move(task);
    co_return out;
}

asio::awaitable<result<std::vector<session::session_id>>> lease_desk::renew() {
    // The renewal goes ahead of the operations already waiting on the strand: the next one to
    // start runs it first (a burst of acquisitions must not hold it up until the leases run
    // out). Its own turn runs it if none did, and returns once it has run.
    using renewed = result<std::vector<session::session_id>>;
    auto out = std::make_shared<std::optional<renewed>>();
    {
        std::lock_guard lock(urgent_mu_);
        urgent_.push_back([this, out] { *out = keeper_.renew(); });
    }
    auto task = in_turn<bool>([] { return true; });
    co_await std::move(task);
    co_return std::move(**out);
}

asio::awaitable<result<std::vector<ownership::lease>>> lease_desk::claim(
    std::vector<session::session_id> candidates, std::size_t limit) {
    // Not those waiting on the strand already: a request is placing them.
    std::erase_if(candidates, [this](const auto& id) { return waiting_.contains(id.str()); });
    auto task = in_turn<result<std::vector<ownership::lease>>>(
        [this, candidates = std::move(candidates), limit] {
            return keeper_.claim(candidates, limit);
        });
    auto out = co_await std::move(task);
    co_return out;
}

asio::awaitable<result<void>> lease_desk::remove(session::session_id id,
                                                 session::lease_epoch epoch) {
    waiting in_line(this, id.str());
    auto task = in_turn<result<void>>([this, id, epoch] { return keeper_.remove(id, epoch); });
    auto out = co_await std::move(task);
    co_return out;
}

void lease_desk::give_back(ownership::lease l) {
    // A failed release only delays the next owner (by the TTL).
    asio::post(lease_ex_, [this, l = std::move(l)] {
        run_urgent();
        (void)keeper_.store().release(l);
    });
}

void lease_desk::release(const session::session_id& id,
                         std::optional<session::lease_epoch> epoch) {
    if (!epoch && waiting_.contains(id.str())) {
        return;
    }
    if (auto l = keeper_.forget(id, ownership::lease_event::released, epoch)) {
        give_back(std::move(*l));
    }
}

void lease_desk::lost(const session::session_id& id, session::lease_epoch epoch) {
    // Gone already, unless the store only refused one write.
    if (auto l = keeper_.forget(id, ownership::lease_event::lost, epoch)) {
        give_back(std::move(*l));
    }
}

asio::awaitable<std::size_t> lease_desk::release_all() {
    auto all = keeper_.forget_all();
    const std::size_t n = all.size();
    auto task = in_turn<bool>([this, all = std::move(all)] {
        for (const auto& l : all) {
            (void)keeper_.store().release(l);
        }
        return true;
    });
    co_await std::move(task);
    co_return n;
}

}  // namespace wuhu::ownership
