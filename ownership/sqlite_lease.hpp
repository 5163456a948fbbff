// Leases in `<data-dir>/catalog.sqlite`: the embedded default, shared by the workers of one
// host (they read the same clock). Each operation is one BEGIN IMMEDIATE transaction whose
// writes are conditional updates, so two workers racing for a session cannot both win, and the
// next epoch comes from one counter row, so an epoch is never handed out twice.
#pragma once

#include "ownership/generations.hpp"
#include "ownership/lease.hpp"

#include <filesystem>
#include <memory>
#include <mutex>

namespace wuhu::storage::sqlite {
class db;
}

namespace wuhu::ownership {

class sqlite_lease final : public lease_store {
  public:
    // Opens (creating and migrating if needed) `<data_dir>/catalog.sqlite`; throws
    // std::runtime_error if it cannot.
    explicit sqlite_lease(const std::filesystem::path& data_dir, wall_clock now = system_now,
                          int busy_timeout_ms = 5000);
    ~sqlite_lease() override;

    result<acquisition> acquire(const session_id& id, std::string_view owner,
                                std::chrono::milliseconds ttl) override;
    // One transaction for all (one fsync).
    std::vector<result<acquisition>> acquire_all(const std::vector<session_id>& ids,
                                                 std::string_view owner,
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
    std::string_view backend() const override { return "sqlite"; }

  private:
    // acquire() inside the caller's transaction, stamping what it takes with `generation`.
    // REQUIRES: mu_ held, a transaction open.
    result<acquisition> take(const session_id& id, std::string_view owner,
                             std::chrono::milliseconds ttl, unix_ms now, std::int64_t generation);
    // The owner's current generation, made (not live until renewed) if it has none; `made` says
    // so, to record once the transaction commits. REQUIRES: mu_ held, a transaction open.
    std::int64_t generation_of(std::string_view owner, bool& made);
    std::int64_t next_generation();
    // Extends the owner's current generation to `expires` if it is live at `now`.
    // REQUIRES: mu_ held, a transaction open.
    bool renew_current(std::string_view owner, unix_ms now, unix_ms expires);

    wall_clock now_;
    std::mutex mu_;
    std::unique_ptr<storage::sqlite::db> db_;
    generations stamped_;  // this worker's (ownership/generations.hpp)
};

}  // namespace wuhu::ownership
