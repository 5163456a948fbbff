// A lease store that hands every call to another one: a test overrides the calls it wants to
// slow down, hold or record.
#pragma once

#include "ownership/lease.hpp"

namespace wuhu::testing {

class forwarding_lease : public ownership::lease_store {
  public:
    explicit forwarding_lease(ownership::lease_store& inner) : inner_(inner) {}

    ownership::result<ownership::acquisition> acquire(const session::session_id& id,
                                                      std::string_view owner,
                                                      std::chrono::milliseconds ttl) override {
        return inner_.acquire(id, owner, ttl);
    }
    ownership::result<std::vector<session::session_id>> renew(
        const std::vector<ownership::lease>& held, std::chrono::milliseconds ttl) override {
        return inner_.renew(held, ttl);
    }
    ownership::result<std::vector<ownership::lease>> claim(
        const std::vector<session::session_id>& candidates, std::string_view owner,
        std::chrono::milliseconds ttl, std::size_t limit) override {
        return inner_.claim(candidates, owner, ttl, limit);
    }
    ownership::result<void> release(const ownership::lease& held) override {
        return inner_.release(held);
    }
    ownership::result<std::optional<ownership::lease>> owner_of(
        const session::session_id& id) override {
        return inner_.owner_of(id);
    }
    ownership::result<std::vector<ownership::lease>> live(
        const ownership::lease_query& q) override {
        return inner_.live(q);
    }
    ownership::result<std::vector<std::string>> owners() override { return inner_.owners(); }
    ownership::result<void> remove(const session::session_id& id,
                                   session::lease_epoch epoch) override {
        return inner_.remove(id, epoch);
    }
    std::string_view backend() const override { return inner_.backend(); }

  private:
    ownership::lease_store& inner_;
};

}  // namespace wuhu::testing
