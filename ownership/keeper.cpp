#include "ownership/keeper.hpp"

#include "ownership/generations.hpp"

#include "session/overloaded.hpp"

#include <algorithm>
#include <stdexcept>

namespace wuhu::ownership {

std::string_view lease_event_name(lease_event e) {
    switch (e) {
        case lease_event::acquired:
            return "acquired";
        case lease_event::taken_over:
            return "taken_over";
        case lease_event::lost:
            return "lost";
        case lease_event::released:
            return "released";
    }
    return "unknown";
}

keeper::keeper(lease_store& store, std::string worker_id, lease_settings settings,
               steady_clock clock)
    : store_(store),
      worker_id_(std::move(worker_id)),
      settings_(settings),
      clock_(std::move(clock)) {
    if (!session::is_id_token(worker_id_)) {
        throw std::invalid_argument("worker id must be 1-64 characters of [A-Za-z0-9_-]: " +
                                    worker_id_);
    }
}

void keeper::tell(lease_event e, const lease& l) const {
    if (listener_) {
        listener_(e, l);
    }
}

void keeper::keep(const lease& l, std::chrono::steady_clock::time_point began) {
    lease kept = l;
    kept.taken_from.clear();  // a fact of the acquisition, not of the lease
    const auto until = deadline(began);
    digest_ ^= generations::key(kept);
    if (auto it = held_.find(l.id.str()); it != held_.end()) {
        digest_ ^= generations::key(it->second.l);
        it->second = held_lease{std::move(kept), until, rounds_};
    } else {
        held_.emplace(l.id.str(), held_lease{std::move(kept), until, rounds_});
    }
    earliest_ = std::min(earliest_, until);
    kept_in_round_ = std::min(kept_in_round_, until);
}

std::map<std::string, keeper::held_lease>::iterator keeper::drop(
    std::map<std::string, held_lease>::iterator it) {
    digest_ ^= generations::key(it->second.l);
    return held_.erase(it);
}

result<bool> keeper::still_held(const session_id& id) {
    const auto began = clock_();
    std::optional<lease> overdue;
    {
        std::lock_guard lock(mu_);
        auto it = held_.find(id.str());
        if (it == held_.end()) {
            return false;
        }
        if (began < until(it->second)) {
            return true;
        }
        overdue = it->second.l;
    }
    const lease& mine = *overdue;
    // Past the deadline: the store decides (a newer owner may have taken the session).
    auto lost = store_.renew({mine}, settings_.ttl);
    if (!lost) {
        return result<bool>(boost::system::in_place_error, lost.error());
    }
    std::unique_lock lock(mu_);
    auto it = held_.find(id.str());
    if (it == held_.end() || it->second.l.epoch != mine.epoch) {
        return false;  // forgotten meanwhile
    }
    if (lost->empty()) {
        it->second.serve_until = std::max(it->second.serve_until, deadline(began));
        return true;
    }
    drop(it);
    lock.unlock();
    tell(lease_event::lost, mine);
    return false;
}

std::optional<keeper::placement> keeper::here_now(const session_id& id) const {
    std::lock_guard lock(mu_);
    auto it = held_.find(id.str());
    if (it == held_.end() || clock_() >= until(it->second)) {
        return std::nullopt;
    }
    return placement{here{it->second.l.epoch}};
}

result<std::optional<keeper::placement>> keeper::locate(const session_id& id) {
    auto mine = still_held(id);
    if (!mine) {
        return mine.error();
    }
    if (*mine) {
        if (auto e = epoch_of(id)) {
            return std::optional<placement>{here{*e}};
        }
    }
    auto owner = store_.owner_of(id);
    if (!owner) {
        return owner.error();
    }
    if (*owner && (*owner)->owner != worker_id_) {
        return std::optional<placement>{
            elsewhere{(*owner)->owner, (*owner)->epoch, (*owner)->expires}};
    }
    return std::optional<placement>{};  // nobody live (a lease of an earlier run of this id
                                        // is replaced by place())
}

result<keeper::placement> keeper::place(const session_id& id) {
    return std::move(place_all({id}).front());
}

std::vector<result<keeper::placement>> keeper::place_all(const std::vector<session_id>& ids) {
    std::vector<std::optional<result<placement>>> out(ids.size());
    std::vector<session_id> to_take;
    std::vector<std::size_t> taken_for;  // the index in `ids` of each of to_take
    for (std::size_t i = 0; i < ids.size(); ++i) {
        auto mine = still_held(ids[i]);
        if (!mine) {
            out[i] = mine.error();
        } else if (*mine) {
            if (auto e = epoch_of(ids[i])) {
                out[i] = placement{here{*e}};
            }
        }
        if (!out[i]) {
            to_take.push_back(ids[i]);
            taken_for.push_back(i);
        }
    }
    if (!to_take.empty()) {
        const auto began = clock_();
        auto got = store_.acquire_all(to_take, worker_id_, settings_.ttl);
        for (std::size_t k = 0; k < got.size(); ++k) {
            auto& answer = out[taken_for[k]];
            if (!got[k]) {
                answer = got[k].error();
                continue;
            }
            answer = std::visit(
                session::overloaded{
                    [&](const lease& l) -> placement {
                        {
                            std::lock_guard lock(mu_);
                            keep(l, began);
                        }
                        tell(l.taken_from.empty() ? lease_event::acquired
                                                  : lease_event::taken_over,
                             l);
                        return here{l.epoch};
                    },
                    [](const held_elsewhere& h) -> placement {
                        return elsewhere{h.owner, h.epoch, h.expires};
                    },
                },
                *got[k]);
        }
    }
    std::vector<result<placement>> answers;
    answers.reserve(out.size());
    for (auto& o : out) {
        answers.push_back(std::move(*o));
    }
    return answers;
}

result<std::vector<lease>> keeper::claim(const std::vector<session_id>& candidates,
                                         std::size_t limit) {
    std::vector<session_id> free;
    {
        std::lock_guard lock(mu_);
        for (const auto& id : candidates) {
            if (!held_.contains(id.str())) {
                free.push_back(id);
            }
        }
    }
    const auto began = clock_();
    auto got = store_.claim(free, worker_id_, settings_.ttl, limit);
    if (!got) {
        return got.error();
    }
    {
        std::lock_guard lock(mu_);
        for (const auto& l : *got) {
            keep(l, began);
        }
    }
    for (const auto& l : *got) {
        tell(l.taken_from.empty() ? lease_event::acquired : lease_event::taken_over, l);
    }
    return got;
}

result<lease_epoch> keeper::epoch_of(const session_id& id) const {
    std::lock_guard lock(mu_);
    if (auto it = held_.find(id.str()); it != held_.end()) {
        return it->second.l.epoch;
    }
    return errc::not_held;
}

std::size_t keeper::held() const {
    std::lock_guard lock(mu_);
    return held_.size();
}

std::vector<session_id> keeper::held_ids() const {
    std::lock_guard lock(mu_);
    std::vector<session_id> out;
    out.reserve(held_.size());
    for (const auto& [id, h] : held_) {
        out.push_back(h.l.id);
    }
    return out;
}

bool keeper::serving(const session_id& id) const {
    std::lock_guard lock(mu_);
    auto it = held_.find(id.str());
    return it != held_.end() && clock_() < until(it->second);
}

std::optional<std::chrono::steady_clock::time_point> keeper::next_deadline() const {
    std::lock_guard lock(mu_);
    if (held_.empty()) {
        return std::nullopt;
    }
    return earliest_;
}

void keeper::expire_overdue() {
    const auto now = clock_();
    std::vector<lease> gone;
    {
        std::lock_guard lock(mu_);
        earliest_ = std::chrono::steady_clock::time_point::max();
        for (auto it = held_.begin(); it != held_.end();) {
            if (const auto u = until(it->second); now >= u) {
                gone.push_back(it->second.l);
                it = drop(it);
            } else {
                earliest_ = std::min(earliest_, u);
                ++it;
            }
        }
    }
    for (const auto& l : gone) {
        tell(lease_event::lost, l);
    }
}

result<std::vector<session_id>> keeper::renew() {
    std::uint64_t round = 0;
    std::size_t count = 0;
    std::uint64_t digest = 0;
    {
        std::lock_guard lock(mu_);
        round = ++rounds_;
        kept_in_round_ = time_point::max();
        count = held_.size();
        digest = digest_;
    }
    const auto began = clock_();
    if (count > 0) {
        // The whole generation, if the store stamped exactly what is held: no lease named.
        auto whole = store_.renew_generation(worker_id_, count, digest, settings_.ttl);
        if (!whole) {
            expire_overdue();
            return whole.error();
        }
        if (*whole) {
            std::lock_guard lock(mu_);
            if (round > covered_.round) {
                covered_ = {round, deadline(began)};
            }
            if (round == rounds_) {
                // Exact: the leases kept before the round are served until covered_.until (or
                // later), the ones kept since until kept_in_round_ or later.
                earliest_ = std::min(covered_.until, kept_in_round_);
            }
            return std::vector<session_id>{};
        }
    }
    std::vector<lease> all;
    {
        std::lock_guard lock(mu_);
        all.reserve(held_.size());
        for (const auto& [id, h] : held_) {
            all.push_back(h.l);
        }
    }
    auto lost = store_.renew(all, settings_.ttl);
    if (!lost) {
        // Stop serving what can no longer be renewed in time: its lease may expire any moment
        // and another worker take the session.
        expire_overdue();
        return lost.error();
    }
    std::vector<lease> gone;
    {
        // Only the leases renewed as they were: one forgotten or taken again meanwhile is not
        // this renewal's. `all` is in held_'s order (by id), so both are walked together: a
        // round of 100,000 leases makes no map of them.
        std::lock_guard lock(mu_);
        const auto by_id = [](const lease& l, const std::string& id) { return l.id.str() < id; };
        for (const auto& id : *lost) {
            auto it = held_.find(id.str());
            auto was = std::lower_bound(all.begin(), all.end(), id.str(), by_id);
            if (it != held_.end() && was != all.end() && was->id == id &&
                it->second.l.epoch == was->epoch) {
                gone.push_back(it->second.l);
                drop(it);
            }
        }
        const auto renewed_until = deadline(began);
        earliest_ = std::chrono::steady_clock::time_point::max();
        auto r = all.begin();
        for (auto& [id, h] : held_) {
            while (r != all.end() && r->id.str() < id) {
                ++r;
            }
            if (r != all.end() && r->id.str() == id && r->epoch == h.l.epoch) {
                h.serve_until = std::max(h.serve_until, renewed_until);
            }
            earliest_ = std::min(earliest_, until(h));
        }
    }
    for (const auto& l : gone) {
        tell(lease_event::lost, l);
    }
    return lost;
}

std::optional<lease> keeper::forget(const session_id& id, lease_event why,
                                    std::optional<lease_epoch> epoch) {
    std::optional<lease> out;
    {
        std::lock_guard lock(mu_);
        if (auto it = held_.find(id.str());
            it != held_.end() && (!epoch || it->second.l.epoch == *epoch)) {
            out = it->second.l;
            drop(it);
        }
    }
    if (out) {
        tell(why, *out);
    }
    return out;
}

std::vector<lease> keeper::forget_all() {
    std::map<std::string, held_lease> all;
    {
        std::lock_guard lock(mu_);
        all.swap(held_);
        digest_ = 0;
    }
    std::vector<lease> out;
    out.reserve(all.size());
    for (auto& [id, h] : all) {
        tell(lease_event::released, h.l);
        out.push_back(std::move(h.l));
    }
    return out;
}

void keeper::release(const session_id& id) {
    if (auto l = forget(id, lease_event::released)) {
        (void)store_.release(*l);  // a failed release only delays the next owner (TTL)
    }
}

void keeper::release_all() {
    for (const auto& l : forget_all()) {
        (void)store_.release(l);
    }
}

result<void> keeper::remove(const session_id& id, lease_epoch epoch) {
    {
        std::lock_guard lock(mu_);
        if (auto it = held_.find(id.str()); it != held_.end() && it->second.l.epoch <= epoch) {
            drop(it);
        }
    }
    return store_.remove(id, epoch);
}

}  // namespace wuhu::ownership
