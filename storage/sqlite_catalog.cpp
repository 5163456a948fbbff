// The SQLite store's catalog, `<data-dir>/catalog.sqlite`: its schema (shared with the lease
// store, ownership/sqlite_lease), and everything the session store keeps there: which sessions
// exist with their has_work and has_timers flags (a hint for the recovery sweep and the fleet
// view; the session files are authoritative), and the epoch each removal ran at.
#include "storage/sqlite_db.hpp"
#include "storage/sqlite_store.hpp"

namespace wuhu::storage {

namespace {

// `lease_epoch` is the last epoch handed out for any session: epochs only grow, even across a
// session's deletion.
const char* const catalog_migrations[] = {
    R"(CREATE TABLE sessions (id TEXT PRIMARY KEY, has_work INTEGER NOT NULL DEFAULT 0)
       WITHOUT ROWID;)",
    R"(CREATE TABLE leases (id TEXT PRIMARY KEY, owner TEXT NOT NULL, epoch INTEGER NOT NULL,
                            expires INTEGER NOT NULL) WITHOUT ROWID;
       CREATE TABLE lease_epoch (one INTEGER PRIMARY KEY CHECK (one = 1), last INTEGER NOT NULL);
       INSERT INTO lease_epoch VALUES (1, 0);)",
    R"(ALTER TABLE sessions ADD COLUMN has_timers INTEGER NOT NULL DEFAULT 0;)",
    // The epoch each removal ran at: opens at that epoch or older are refused.
    R"(CREATE TABLE removed (id TEXT PRIMARY KEY, epoch INTEGER NOT NULL) WITHOUT ROWID;)",
};

}  // namespace

void sqlite::migrate_catalog(db& d) {
    migrate(d, catalog_migrations, std::size(catalog_migrations));
}

void sqlite_store::note_catalog(const session_id& id, bool has_work, bool has_timers) {
    try {
        std::lock_guard lock(catalog_mu_);
        catalog_
            ->prepare(
                "INSERT INTO sessions (id, has_work, has_timers) VALUES (?1, ?2, ?3) "
                "ON CONFLICT (id) DO UPDATE SET has_work = excluded.has_work, "
                "has_timers = excluded.has_timers")
            .bind(1, id.str())
            .bind(2, has_work ? 1 : 0)
            .bind(3, has_timers ? 1 : 0)
            .run();
    } catch (const sqlite::error&) {
        // The catalog is a hint for the recovery sweep; the session file is authoritative.
    }
}

void sqlite_store::note_opened(const session_id& id, lease_epoch epoch, bool after_removal) {
    std::lock_guard lock(catalog_mu_);
    catalog_->prepare("INSERT INTO sessions (id) VALUES (?1) ON CONFLICT (id) DO NOTHING")
        .bind(1, id.str())
        .run();
    if (after_removal) {
        // A newer session: the removal's floor has done its work.
        catalog_->prepare("DELETE FROM removed WHERE id = ?1 AND epoch < ?2")
            .bind(1, id.str())
            .bind(2, static_cast<std::int64_t>(epoch.value))
            .run();
    }
}

void sqlite_store::note_removed(const session_id& id, lease_epoch epoch) {
    // Opens at this epoch or older are refused from now on, in every process of the host: a
    // request that waited behind this removal cannot bring the session back.
    std::lock_guard lock(catalog_mu_);
    catalog_
        ->prepare(
            "INSERT INTO removed (id, epoch) VALUES (?1, ?2) "
            "ON CONFLICT (id) DO UPDATE SET epoch = max(epoch, excluded.epoch)")
        .bind(1, id.str())
        .bind(2, static_cast<std::int64_t>(epoch.value))
        .run();
    catalog_->prepare("DELETE FROM sessions WHERE id = ?1").bind(1, id.str()).run();
}

std::optional<lease_epoch> sqlite_store::removed_at(const session_id& id) {
    std::lock_guard lock(catalog_mu_);
    auto& q = catalog_->prepare("SELECT epoch FROM removed WHERE id = ?1");
    q.bind(1, id.str());
    std::optional<lease_epoch> out;
    if (q.step()) {
        out = lease_epoch{static_cast<std::uint64_t>(q.int64(0))};
    }
    q.reset();
    return out;
}

result<std::vector<catalog_entry>> sqlite_store::sessions(catalog_filter filter) {
    try {
        std::lock_guard lock(catalog_mu_);
        auto& q =
            catalog_->prepare(filter == catalog_filter::needing_owner
                                  ? "SELECT id, has_work, has_timers FROM sessions "
                                    "WHERE has_work = 1 OR has_timers = 1 ORDER BY id"
                                  : "SELECT id, has_work, has_timers FROM sessions ORDER BY id");
        std::vector<catalog_entry> out;
        while (q.step()) {
            auto sid = session_id::parse(q.text(0));
            if (!sid) {
                return errc::corrupt;
            }
            out.push_back({*sid, q.int64(1) != 0, q.int64(2) != 0});
        }
        return out;
    } catch (const sqlite::error& e) {
        return sqlite::storage_error(e);
    }
}

}  // namespace wuhu::storage
