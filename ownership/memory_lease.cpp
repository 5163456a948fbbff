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

result<bool> lease_store::renew_generation(std::string_view, std::size_t, std::uint64_t,
                                           std::chrono::milliseconds) {
    return false;
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

lease memory_lease::effective(const row& r) const {
    lease l = r.l;
    if (auto g = generations_.find({l.owner, r.generation}); g != generations_.end()) {
        l.expires = std::max(l.expires, g->second.expires);
    }
    return l;
}

result<acquisition> memory_lease::acquire(const session_id& id, std::string_view owner,
                                          std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu_);
    return take(id, owner, ttl, now_());
}

result<acquisition> memory_lease::take(const session_id& id, std::string_view owner,
                                       std::chrono::milliseconds ttl, unix_ms now) {
    auto it = leases_.find(id.str());
    if (it != leases_.end() && it->second.l.owner != owner) {
        if (const auto cur = effective(it->second); cur.expires > now) {
            return acquisition{held_elsewhere{cur.owner, cur.expires, cur.epoch}};
        }
    }
    std::string previous = it != leases_.end() && it->second.l.owner != owner
                               ? it->second.l.owner  // whose lease had expired
                               : std::string();
    if (stamped_.current(owner) == 0) {
        // The owner's first generation: live only once a renewal has extended it.
        stamped_.begin(owner, ++last_generation_);
        generations_[{std::string(owner), last_generation_}] = generation{unix_ms{0}};
    }
    if (it != leases_.end() && it->second.l.owner == owner &&
        it->second.generation != stamped_.current(owner)) {
        // An own lease of another of the owner's generations: renewed in one write no more.
        if (auto g = generations_.find({std::string(owner), it->second.generation});
            g != generations_.end()) {
            g->second.spoiled = true;
        }
    }
    lease l{id, std::string(owner), lease_epoch{++last_epoch_}, plus(now, ttl), {}};
    leases_.insert_or_assign(id.str(), row{l, stamped_.current(owner)});
    stamped_.add(l);
    l.taken_from = std::move(previous);
    return acquisition{l};
}

result<std::vector<lease>> memory_lease::claim(const std::vector<session_id>& candidates,
                                               std::string_view owner,
                                               std::chrono::milliseconds ttl, std::size_t limit) {
    std::lock_guard lock(mu_);
    const auto now = now_();
    std::vector<lease> out;
    for (const auto& id : candidates) {
        if (out.size() == limit) {
            break;
        }
        auto got = take(id, owner, ttl, now);
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
    if (held.empty()) {
        return lost;
    }
    const auto& owner = held.front().owner;
    if (stamped_.covers(held) && renew_current(owner, now, ttl)) {
        return lost;
    }
    // Lease by lease, into a new generation; the old one's row expires on its own.
    const auto next = ++last_generation_;
    std::vector<lease> renewed;
    for (const auto& h : held) {
        auto it = leases_.find(h.id.str());
        if (h.owner != owner || it == leases_.end() || it->second.l.owner != h.owner ||
            it->second.l.epoch != h.epoch || effective(it->second).expires <= now) {
            lost.push_back(h.id);
            continue;
        }
        it->second.l.expires = plus(now, ttl);
        it->second.generation = next;
        renewed.push_back(it->second.l);
    }
    std::erase_if(generations_, [&](const auto& g) {
        return g.second.expires <= now;  // dead: no lease lives by it
    });
    generations_[{owner, next}] = generation{plus(now, ttl)};
    stamped_.begin(owner, next, renewed);
    return lost;
}

result<bool> memory_lease::renew_generation(std::string_view owner, std::size_t count,
                                            std::uint64_t digest, std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu_);
    return stamped_.covers(owner, count, digest) && renew_current(owner, now_(), ttl);
}

bool memory_lease::renew_current(std::string_view owner, unix_ms now,
                                 std::chrono::milliseconds ttl) {
    // Exactly the current generation's leases: its row is renewed, if it is still live.
    auto g = generations_.find({std::string(owner), stamped_.current(owner)});
    if (g == generations_.end() || g->second.expires <= now || g->second.spoiled) {
        return false;
    }
    g->second.expires = plus(now, ttl);
    return true;
}

result<void> memory_lease::release(const lease& held) {
    std::lock_guard lock(mu_);
    auto it = leases_.find(held.id.str());
    if (it != leases_.end() && it->second.l.owner == held.owner &&
        it->second.l.epoch == held.epoch) {
        stamped_.drop(it->second.l);
        leases_.erase(it);
    }
    return {};
}

result<std::optional<lease>> memory_lease::owner_of(const session_id& id) {
    std::lock_guard lock(mu_);
    auto it = leases_.find(id.str());
    if (it == leases_.end()) {
        return std::optional<lease>{};
    }
    auto l = effective(it->second);
    return l.expires > now_() ? std::optional<lease>{std::move(l)} : std::optional<lease>{};
}

result<std::vector<lease>> memory_lease::live(const lease_query& q) {
    std::lock_guard lock(mu_);
    const auto now = now_();
    std::vector<lease> out;
    for (const auto& [id, r] : leases_) {
        if (out.size() == q.limit) {
            break;
        }
        if (auto l = effective(r); l.expires > now && matches(q, l)) {
            out.push_back(std::move(l));
        }
    }
    return out;
}

result<std::vector<std::string>> memory_lease::owners() {
    std::lock_guard lock(mu_);
    const auto now = now_();
    std::set<std::string> out;
    for (const auto& [id, r] : leases_) {
        if (effective(r).expires > now) {
            out.insert(r.l.owner);
        }
    }
    return std::vector<std::string>(out.begin(), out.end());
}

result<void> memory_lease::remove(const session_id& id, lease_epoch epoch) {
    std::lock_guard lock(mu_);
    if (auto it = leases_.find(id.str()); it != leases_.end() && it->second.l.epoch <= epoch) {
        stamped_.drop(it->second.l);
        leases_.erase(it);
    }
    return {};
}

}  // namespace wuhu::ownership
