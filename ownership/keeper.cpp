#include "ownership/keeper.hpp"

#include "session/overloaded.hpp"

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
    held_.insert_or_assign(l.id.str(), held_lease{std::move(kept), deadline(began)});
}

result<bool> keeper::still_held(const session_id& id) {
    auto it = held_.find(id.str());
    if (it == held_.end()) {
        return false;
    }
    const auto began = clock_();
    if (began < it->second.serve_until) {
        return true;
    }
    // Past the deadline: the store decides (a newer owner may have taken the session).
    auto lost = store_.renew({it->second.l}, settings_.ttl);
    if (!lost) {
        return result<bool>(boost::system::in_place_error, lost.error());
    }
    if (lost->empty()) {
        it->second.serve_until = deadline(began);
        return true;
    }
    const lease gone = it->second.l;
    held_.erase(it);
    tell(lease_event::lost, gone);
    return false;
}

result<std::optional<keeper::placement>> keeper::locate(const session_id& id) {
    auto mine = still_held(id);
    if (!mine) {
        return mine.error();
    }
    if (*mine) {
        return std::optional<placement>{here{held_.at(id.str()).l.epoch}};
    }
    auto owner = store_.owner_of(id);
    if (!owner) {
        return owner.error();
    }
    if (*owner && (*owner)->owner != worker_id_) {
        return std::optional<placement>{elsewhere{(*owner)->owner}};
    }
    return std::optional<placement>{};  // nobody live (a lease of an earlier run of this id
                                        // is replaced by place())
}

result<keeper::placement> keeper::place(const session_id& id) {
    auto mine = still_held(id);
    if (!mine) {
        return mine.error();
    }
    if (*mine) {
        return placement{here{held_.at(id.str()).l.epoch}};
    }
    const auto began = clock_();
    auto got = store_.acquire(id, worker_id_, settings_.ttl);
    if (!got) {
        return got.error();
    }
    return std::visit(
        session::overloaded{
            [&](const lease& l) -> placement {
                keep(l, began);
                tell(l.taken_from.empty() ? lease_event::acquired : lease_event::taken_over, l);
                return here{l.epoch};
            },
            [](const held_elsewhere& h) -> placement { return elsewhere{h.owner}; },
        },
        *got);
}

result<lease_epoch> keeper::epoch_of(const session_id& id) const {
    if (auto it = held_.find(id.str()); it != held_.end()) {
        return it->second.l.epoch;
    }
    return errc::not_held;
}

std::vector<session_id> keeper::held_ids() const {
    std::vector<session_id> out;
    out.reserve(held_.size());
    for (const auto& [id, h] : held_) {
        out.push_back(h.l.id);
    }
    return out;
}

bool keeper::serving(const session_id& id) const {
    auto it = held_.find(id.str());
    return it != held_.end() && clock_() < it->second.serve_until;
}

std::optional<std::chrono::steady_clock::time_point> keeper::next_deadline() const {
    std::optional<std::chrono::steady_clock::time_point> first;
    for (const auto& [id, h] : held_) {
        if (!first || h.serve_until < *first) {
            first = h.serve_until;
        }
    }
    return first;
}

void keeper::expire_overdue() {
    const auto now = clock_();
    std::vector<lease> gone;
    for (auto it = held_.begin(); it != held_.end();) {
        if (now >= it->second.serve_until) {
            gone.push_back(it->second.l);
            it = held_.erase(it);
        } else {
            ++it;
        }
    }
    for (const auto& l : gone) {
        tell(lease_event::lost, l);
    }
}

result<std::vector<session_id>> keeper::renew() {
    std::vector<lease> all;
    all.reserve(held_.size());
    for (const auto& [id, h] : held_) {
        all.push_back(h.l);
    }
    const auto began = clock_();
    auto lost = store_.renew(all, settings_.ttl);
    if (!lost) {
        // Stop serving what can no longer be renewed in time: its lease may expire any moment
        // and another worker take the session.
        expire_overdue();
        return lost.error();
    }
    std::vector<lease> gone;
    for (const auto& id : *lost) {
        if (auto it = held_.find(id.str()); it != held_.end()) {
            gone.push_back(it->second.l);
            held_.erase(it);
        }
    }
    for (auto& [id, h] : held_) {
        h.serve_until = deadline(began);
    }
    for (const auto& l : gone) {
        tell(lease_event::lost, l);
    }
    return lost;
}

void keeper::lost(const session_id& id) {
    if (auto it = held_.find(id.str()); it != held_.end()) {
        const lease l = it->second.l;
        (void)store_.release(l);  // gone already, unless the store only refused one write
        held_.erase(it);
        tell(lease_event::lost, l);
    }
}

void keeper::release(const session_id& id) {
    if (auto it = held_.find(id.str()); it != held_.end()) {
        const lease l = it->second.l;
        (void)store_.release(l);  // a failed release only delays the next owner (TTL)
        held_.erase(it);
        tell(lease_event::released, l);
    }
}

void keeper::release_all() {
    auto all = std::move(held_);
    held_.clear();
    for (const auto& [id, h] : all) {
        (void)store_.release(h.l);
        tell(lease_event::released, h.l);
    }
}

result<void> keeper::remove(const session_id& id, lease_epoch epoch) {
    if (auto it = held_.find(id.str()); it != held_.end() && it->second.l.epoch <= epoch) {
        held_.erase(it);
    }
    return store_.remove(id, epoch);
}

}  // namespace wuhu::ownership
