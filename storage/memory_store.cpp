#include "storage/memory_store.hpp"

#include "session/reducer.hpp"

#include <algorithm>

namespace wuhu::storage {

class memory_log final : public session_log {
  public:
    memory_log(memory_store& store, session_id id, lease_epoch epoch)
        : session_log(std::move(id), epoch), store_(store) {}

  protected:
    result<session_state> do_load() override {
        std::lock_guard lock(store_.mu_);
        auto it = store_.sessions_.find(id().str());
        if (it == store_.sessions_.end() || it->second.epoch != epoch()) {
            return errc::lease_lost;  // removed, or a newer owner opened it
        }
        return it->second.state;
    }

    result<session::patch> do_since(const session::version_vector& from) override {
        std::lock_guard lock(store_.mu_);
        auto it = store_.sessions_.find(id().str());
        if (it == store_.sessions_.end()) {
            return errc::lease_lost;
        }
        return session::since(it->second.state, from);
    }

    result<void> do_commit(const session_state& before, const action_list& actions) override {
        std::lock_guard lock(store_.mu_);
        auto it = store_.sessions_.find(id().str());
        if (it == store_.sessions_.end() || it->second.epoch != epoch()) {
            return errc::lease_lost;
        }
        if (it->second.state.version() != before.version()) {
            return errc::conflict;
        }
        session::apply_actions(actions, it->second.state);
        ++store_.commits_;
        return {};
    }

  private:
    memory_store& store_;
};

result<std::unique_ptr<session_log>> memory_store::do_open(const session_id& id, lease_epoch epoch,
                                                           open_mode mode) {
    std::lock_guard lock(mu_);
    if (auto floor = removed_.find(id.str()); floor != removed_.end()) {
        if (epoch <= floor->second) {
            return errc::lease_lost;  // removed at this epoch or later
        }
    }
    auto it = sessions_.find(id.str());
    const bool created = it == sessions_.end();
    if (created) {
        if (mode == open_mode::existing) {
            return errc::not_found;
        }
        it = sessions_.emplace(id.str(), record{epoch, {}}).first;
        removed_.erase(id.str());
    } else {
        if (it->second.epoch > epoch) {
            return errc::lease_lost;
        }
        it->second.epoch = epoch;
    }
    auto log = std::make_unique<memory_log>(*this, id, epoch);
    log->set_created(created);
    return std::unique_ptr<session_log>(std::move(log));
}

result<void> memory_store::remove(const session_id& id, lease_epoch epoch) {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(id.str());
    if (it != sessions_.end() && it->second.epoch > epoch) {
        return errc::lease_lost;
    }
    // Handles find no record (lease_lost); an open at this epoch or older is refused, a later
    // one creates a new session.
    if (it != sessions_.end()) {
        sessions_.erase(it);
    }
    auto& floor = removed_[id.str()];
    floor = std::max(floor, epoch);
    return {};
}

result<bool> memory_store::exists(const session_id& id) {
    std::lock_guard lock(mu_);
    return sessions_.contains(id.str());
}

result<std::optional<session_state>> memory_store::read(const session_id& id) {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(id.str());
    if (it == sessions_.end()) {
        return std::optional<session_state>{};
    }
    return std::optional<session_state>{it->second.state};
}

std::uint64_t memory_store::commits() const {
    std::lock_guard lock(mu_);
    return commits_;
}

result<std::vector<catalog_entry>> memory_store::sessions(const catalog_query& q) {
    std::lock_guard lock(mu_);
    std::vector<catalog_entry> out;
    auto add = [&](const std::string& id, const record& r) {
        catalog_entry e{session_id::parse_key(id).value(), session::summarize(r.state)};
        if (matches(q, e) && after_cursor(q, e) && (q.by_cost || out.size() < q.limit)) {
            out.push_back(std::move(e));
        }
    };
    if (q.by_cost && !q.ids) {
        // Every session of the scope, then the page in cost order.
        const auto range = range_of(q.tenant, std::nullopt);
        for (auto it = sessions_.upper_bound(range.after);
             it != sessions_.end() && (range.before.empty() || it->first < range.before); ++it) {
            add(it->first, it->second);
        }
        in_query_order(q, out);
        if (out.size() > q.limit) {
            out.erase(out.begin() + static_cast<std::ptrdiff_t>(q.limit), out.end());
        }
        return out;
    }
    if (q.ids) {
        auto ids = *q.ids;
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        for (const auto& id : ids) {
            if (auto it = sessions_.find(id.str()); it != sessions_.end()) {
                add(it->first, it->second);
            }
        }
        in_query_order(q, out);
        if (out.size() > q.limit) {
            out.erase(out.begin() + static_cast<std::ptrdiff_t>(q.limit), out.end());
        }
        return out;
    }
    const auto range = range_of(q.tenant, q.after);
    auto it = sessions_.upper_bound(range.after);
    for (; it != sessions_.end() && out.size() < q.limit &&
           (range.before.empty() || it->first < range.before);
         ++it) {
        add(it->first, it->second);
    }
    return out;
}

}  // namespace wuhu::storage
