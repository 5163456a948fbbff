#include "ownership/keeper.hpp"

#include "session/overloaded.hpp"

#include <stdexcept>

namespace wuhu::ownership {

bool valid_worker_id(std::string_view id) {
    return session::session_id::parse(id).has_value();  // the same alphabet and length
}

keeper::keeper(lease_store& store, std::string worker_id, std::chrono::milliseconds ttl)
    : store_(store), worker_id_(std::move(worker_id)), ttl_(ttl) {
    if (!valid_worker_id(worker_id_)) {
        throw std::invalid_argument("worker id must be 1-64 characters of [A-Za-z0-9_-]: " +
                                    worker_id_);
    }
}

result<keeper::placement> keeper::place(const session_id& id) {
    if (auto it = held_.find(id.str()); it != held_.end()) {
        return placement{here{it->second.epoch}};
    }
    auto got = store_.acquire(id, worker_id_, ttl_);
    if (!got) {
        return got.error();
    }
    return std::visit(session::overloaded{
                          [&](const lease& l) -> placement {
                              held_.insert_or_assign(id.str(), l);
                              return here{l.epoch};
                          },
                          [](const held_elsewhere& h) -> placement { return elsewhere{h.owner}; },
                      },
                      *got);
}

result<lease_epoch> keeper::epoch_of(const session_id& id) const {
    if (auto it = held_.find(id.str()); it != held_.end()) {
        return it->second.epoch;
    }
    return errc::not_held;
}

result<std::vector<session_id>> keeper::renew() {
    std::vector<lease> all;
    all.reserve(held_.size());
    for (const auto& [id, l] : held_) {
        all.push_back(l);
    }
    auto lost = store_.renew(all, ttl_);
    if (!lost) {
        return lost.error();
    }
    for (const auto& id : *lost) {
        held_.erase(id.str());
    }
    return lost;
}

void keeper::release(const session_id& id) {
    if (auto it = held_.find(id.str()); it != held_.end()) {
        (void)store_.release(it->second);  // a failed release only delays the next owner (TTL)
        held_.erase(it);
    }
}

void keeper::release_all() {
    for (const auto& [id, l] : held_) {
        (void)store_.release(l);
    }
    held_.clear();
}

result<void> keeper::remove(const session_id& id) {
    held_.erase(id.str());
    return store_.remove(id);
}

}  // namespace wuhu::ownership
