// In-memory leases, for tests: one process, the given clock.
#pragma once

#include "ownership/generations.hpp"
#include "ownership/lease.hpp"

#include <map>
#include <mutex>

namespace wuhu::ownership {

class memory_lease final : public lease_store {
  public:
    explicit memory_lease(wall_clock now = system_now) : now_(std::move(now)) {}

    result<acquisition> acquire(const session_id& id, std::string_view owner,
                                std::chrono::milliseconds ttl) override;
    result<std::vector<session_id>> renew(const std::vector<lease>& held,
                                          std::chrono::milliseconds ttl) override;
    result<bool> renew_generation(std::string_view owner, std::size_t count, std::uint64_t digest,
                                  std::chrono::milliseconds ttl) override;
    result<std::vector<lease>> claim(const std::vector<session_id>& candidates,
                                     std::string_view owner, std::chrono::milliseconds ttl,
                                     std::size_t limit) override;
    result<void> release(const lease& held) override;
    result<std::optional<lease>> owner_of(const session_id& id) override;
    result<std::vector<lease>> live(const lease_query& q) override;
    result<std::vector<std::string>> owners() override;
    result<void> remove(const session_id& id, lease_epoch epoch) override;
    std::string_view backend() const override { return "memory"; }

  private:
    struct row {
        lease l;  // l.expires: its own expiry
        std::int64_t generation = 0;
    };
    // The row's lease with its effective expiry (ownership/generations.hpp).
    lease effective(const row& r) const;
    result<acquisition> take(const session_id& id, std::string_view owner,
                             std::chrono::milliseconds ttl, unix_ms now);
    // Extends the owner's current generation if it is live. REQUIRES: mu_ held.
    bool renew_current(std::string_view owner, unix_ms now, std::chrono::milliseconds ttl);

    wall_clock now_;
    std::mutex mu_;
    std::uint64_t last_epoch_ = 0;
    std::int64_t last_generation_ = 0;
    std::map<std::string, row> leases_;
    struct generation {
        unix_ms expires;
        bool spoiled = false;  // another run of the owner took one of its leases afresh
    };
    std::map<std::pair<std::string, std::int64_t>, generation> generations_;
    generations stamped_;
};

}  // namespace wuhu::ownership
