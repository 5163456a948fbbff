// Leases in PostgreSQL, in the same database and schema as the sessions (storage/
// postgres_store.hpp): the hosted fleet's backend, shared by workers on any number of hosts.
//
// Table `leases` (session_id, owner, epoch, expires in ms since the epoch) and the sequence
// `lease_epoch`, created by this backend's own migrations (table `lease_migrations`). Time is
// the database's clock, so the workers' clocks do not matter. acquire is one transaction: the
// current row is locked, then replaced only if it is missing, expired or the caller's own; the
// epoch comes from the sequence, so an epoch is never handed out twice, across restarts and
// across workers. The first migration starts the sequence above every epoch the session store
// has recorded (a database that ran with in-memory leases keeps working).
//
// One connection, used under a mutex (leases are renewed in batches: a few transactions a
// second per worker); a broken connection is opened again on the next call. Thread-safe.
#pragma once

#include "ownership/generations.hpp"
#include "ownership/lease.hpp"
#include "storage/postgres_store.hpp"

#include <memory>
#include <mutex>

namespace wuhu::ownership {

struct postgres_lease_options {
    std::string dsn;              // libpq connection string or URL
    std::string schema = "wuhu";  // the session store's schema
    // Tests only: read this clock instead of the database's.
    wall_clock test_clock;
    storage::pg_timeouts timeouts = {};  // storage/postgres_store.hpp
};

class postgres_lease final : public lease_store {
  public:
    // Connects and migrates; throws std::runtime_error if the database cannot be reached.
    explicit postgres_lease(postgres_lease_options options);
    ~postgres_lease() override;

    result<acquisition> acquire(const session_id& id, std::string_view owner,
                                std::chrono::milliseconds ttl) override;
    // One transaction for all (one commit).
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
    std::string_view backend() const override { return "postgres"; }

  private:
    // Runs `f` on the connection (opened if needed); a database failure is
    // storage::errc::unavailable (the outcome is unknown: the caller treats the lease as not
    // held) and drops the connection.
    template <class F>
    auto with_connection(F&& f);
    // Now in ms: the test clock's, or NULL (the SQL then reads the database's clock).
    std::optional<std::int64_t> test_now() const;

    postgres_lease_options options_;
    std::mutex mu_;
    generations stamped_;  // this worker's (ownership/generations.hpp), under mu_
    struct connection;  // a libpqxx connection with its prepared statements
    std::unique_ptr<connection> c_;
};

}  // namespace wuhu::ownership
