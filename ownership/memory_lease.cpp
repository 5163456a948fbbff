#include "ownership/memory_lease.hpp"

#include <algorithm>
#include <set>

namespace wuhu::ownership {

unix_ms system_now() {
    return unix_ms{std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count()};
}

std::vector<result<acquisition>> lease_store::acquire_all(const std::vector<session_id>& ids,
                                                         std::string_view owner,
                                                         std::chrono::milliseconds ttl) {
    std::vector<result<acquisition>> out;
    out.reserve(ids.size());
    for (const auto& id : ids) {
        out.push_back(acquire(id, owner, ttl));
    }
    return out;
}

bool matches(const lease_query& q, const lease& l) {
    return (!q.owner || l.owner == *q.owner) && (!q.after || l.id > *q.after) &&
           storage::in_scope(q.tenant, l.id) &&
           (!q.ids || std::find(q.ids->begin(), q.ids->end(), l.id) != q.ids->end());
}

namespace {
unix_ms plus(unix_ms t, std::chrono::milliseconds d) {
    return unix_ms{t.value + d.count()};
}
}  // namespace

result<acquisition> memory_lease::acquire(const session_id& id, std::string_view owner,
                                          std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu_);
    const auto now = now_();
    auto it = leases_.find(id.str());
    if (it != leases_.end() && it->second.expires > now && it->second.owner != owner) {
        return acquisition{held_elsewhere{it->second.owner, it->second.expires, it->second.epoch}};
    }
    std::string previous = it != leases_.end() && it->second.owner != owner
                               ? it->second.owner  // whose lease had expired
                               : std::string();
    lease l{id, std::string(owner), lease_epoch{++last_epoch_}, plus(now, ttl), {}};
    leases_.insert_or_assign(id.str(), l);
    l.taken_from = std::move(previous);
    return acquisition{l};
}

result<std::vector<lease>> memory_lease::claim(const std::vector<session_id>& candidates,
                                               std::string_view owner,
                                               std::chrono::milliseconds ttl, std::size_t limit) {
    std::vector<lease> out;
    for (const auto& id : candidates) {
        if (out.size() == limit) {
            break;
        }
        auto got = acquire(id, owner, ttl);
        if (got && std::holds_alternative<lease>(*got)) {
            out.push_back(std::get<lease>(*got));
        }
    }
    return out;
}

result<std::vector<session_id>> memory_lease::renew(const std::vector<lease>& held,
                                                    std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu_);
    const auto now = now_();
    std::vector<session_id> lost;
    for (const auto& h : held) {
        auto it = leases_.find(h.id.str());
        if (it == leases_.end() || it->second.owner != h.owner || it->second.epoch != h.epoch ||
            it->second.expires <= now) {
            lost.push_back(h.id);
            continue;
        }
        it->second.expires = plus(now, ttl);
    }
    return lost;
}

result<void> memory_lease::release(const lease& held) {
    std::lock_guard lock(mu_);
    auto it = leases_.find(held.id.str());
    if (it != leases_.end() && it->second.owner == held.owner && it->second.epoch == held.epoch) {
        leases_.erase(it);
    }
    return {};
}

result<std::optional<lease>> memory_lease::owner_of(const session_id& id) {
    std::lock_guard lock(mu_);
    auto it = leases_.find(id.str());
    if (it == leases_.end() || it->second.expires <= now_()) {
        return std::optional<lease>{};
    }
    return std::optional<lease>{it->second};
}

result<std::vector<lease>> memory_lease::live(const lease_query& q) {
    std::lock_guard lock(mu_);
    const auto now = now_();
    std::vector<lease> out;
    for (const auto& [id, l] : leases_) {
        if (out.size() == q.limit) {
            break;
        }
        if (l.expires > now && matches(q, l)) {
            out.push_back(l);
        }
    }
    return out;
}

result<std::vector<std::string>> memory_lease::owners() {
    std::lock_guard lock(mu_);
    const auto now = now_();
    std::set<std::string> out;
    for (const auto& [id, l] : leases_) {
        if (l.expires > now) {
            out.insert(l.owner);
        }
    }
    return std::vector<std::string>(out.begin(), out.end());
}

result<void> memory_lease::remove(const session_id& id, lease_epoch epoch) {
    std::lock_guard lock(mu_);
    if (auto it = leases_.find(id.str()); it != leases_.end() && it->second.epoch <= epoch) {
        leases_.erase(it);
    }
    return {};
}

}  // namespace wuhu::ownership
