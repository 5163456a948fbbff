// The PostgreSQL store: the hosted fleet's backend, where any worker can own any session.
//
// Schema (created by versioned migrations in `schema`): `sessions` (epoch, version, registers),
// `transcript`, `journal` and `timers`, keyed by (session_id, seq) or (session_id, id). Every
// operation is one transaction at Read Committed whose first statement is the fence: a guarded
// UPDATE of the session row on (epoch, version). No row updated means lease_lost (a newer
// epoch) or conflict. Values go in as bound parameters only; bodies are the codec's compact
// JSON text. No stored text holds \u0000 (the codec and the rules refuse or replace it), which
// the settings (jsonb) would refuse.
//
// Connections come from a pool of `pool_size`; thread-safe.
#pragma once

#include "storage/store.hpp"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

namespace wuhu::storage {

// How long the server lets one of the worker's connections wait (DESIGN.md "Bounds"), set on
// each connection the store and the lease store open: a statement (statement_timeout), a row
// lock (lock_timeout: a frozen or cut-off owner's transaction never blocks its successor
// longer), a transaction left open and idle (idle_in_transaction_session_timeout: the server
// ends such a session and its locks go). Past one, the operation fails with `unavailable`
// (nothing committed) and is retried by the next request or the loop's next owner. 0: none.
struct pg_timeouts {
    std::chrono::milliseconds statement{30'000};
    std::chrono::milliseconds lock{5'000};
    std::chrono::milliseconds idle_in_transaction{60'000};
};

struct postgres_options {
    std::string dsn;              // libpq connection string or URL
    std::string schema = "wuhu";  // [a-z_][a-z0-9_]*, created if missing
    std::size_t pool_size = 8;
    std::chrono::milliseconds acquire_timeout{10'000};
    pg_timeouts timeouts = {};
};

class postgres_store final : public session_store {
  public:
    // Connects and migrates; throws std::runtime_error if the database cannot be reached.
    explicit postgres_store(postgres_options options);
    ~postgres_store() override;

    result<void> remove(const session_id& id, lease_epoch epoch) override;
    result<bool> exists(const session_id& id) override;
    result<std::optional<session_state>> read(const session_id& id) override;
    std::string_view backend() const override { return "postgres"; }

    result<std::vector<catalog_entry>> sessions(const catalog_query& q) override;

    struct connection;  // a libpqxx connection with its prepared statements
    class pooled;       // a connection from the pool, given back when destroyed

  protected:
    result<std::unique_ptr<session_log>> do_open(const session_id& id, lease_epoch epoch,
                                                 open_mode mode) override;

  private:
    friend class postgres_log;
    pooled acquire();
    std::unique_ptr<connection> connect();
    enum class health { usable, broken };
    void give_back(std::unique_ptr<connection> c, health h);

    postgres_options options_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::unique_ptr<connection>> idle_;
    std::size_t total_ = 0;
};

}  // namespace wuhu::storage
