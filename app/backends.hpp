// The session store and the lease backend that wuhu-worker's flags name (docs/operations.md),
// and the lease settings; each refuses a combination that cannot work with
// std::invalid_argument, whose message names the flags.
#pragma once

#include "ownership/lease.hpp"
#include "storage/postgres_store.hpp"
#include "storage/store.hpp"

#include <memory>
#include <string>

namespace wuhu::app {

// sqlite:///<data-dir> (at most `sqlite_open_files` session files open at once, and no more
// than a share of the open-file limit, which is raised to the hard one), postgresql://...
// (`pool` connections, `pg_schema`), or memory. `synchronous`: full or normal (SQLite).
std::unique_ptr<storage::session_store> open_store(const std::string& url, std::size_t pool,
                                                   const std::string& synchronous,
                                                   std::size_t sqlite_open_files,
                                                   const std::string& pg_schema,
                                                   const storage::pg_timeouts& timeouts);

// `auto` (`sqlite` with a SQLite store, `postgres` with a PostgreSQL store, `memory` with the
// memory store), `sqlite` (the catalog of the SQLite store's data directory), `sqlite://<dir>`,
// `postgres` (the PostgreSQL store's database), or `memory` (tests only: nothing is shared, and
// a restarted worker hands out epochs its sessions refuse; refused with a persistent store
// unless `force_memory`).
std::unique_ptr<ownership::lease_store> open_leases(const std::string& lease,
                                                    const std::string& store_url,
                                                    bool force_memory,
                                                    const std::string& pg_schema,
                                                    const storage::pg_timeouts& timeouts);

// The lease settings the flags name (0: derived from the TTL); std::invalid_argument when a
// lease could lapse between two renewals before its owner stops serving it.
ownership::lease_settings lease_settings_of(long ttl_ms, long renew_ms, long margin_ms);

}  // namespace wuhu::app
