// The SQLite store's catalog, `<data-dir>/catalog.sqlite` (internal to storage/): the index, a
// row per session (session/summary.hpp; a hint for the recovery sweep and the fleet view, the
// session files are authoritative), the epoch each removal ran at (a floor under every later
// open), and the boot id of the machine that last opened it. The lease store keeps its own
// tables in the same file (ownership/sqlite_lease.cpp).
#pragma once

#include "storage/sqlite_db.hpp"
#include "storage/store.hpp"

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wuhu::storage::sqlite {

// The statement that finds the sessions needing an owner (catalog_query::needing_owner_by,
// the recovery sweep's every round): for a test of its plan.
std::string_view needing_owner_statement();

// Thread-safe. `mu_` guards the connection and the rows not yet written (`unwritten_`).
class catalog {
  public:
    // Opens (and migrates) the catalog; throws sqlite::error if it cannot.
    catalog(const std::filesystem::path& file, int busy_timeout_ms);
    // Writes the rows left behind (flush()).
    ~catalog();

    // The session's index row as of a commit (or a load) at `epoch`: written at once when
    // `urgent` (what the recovery sweep reads changed: has_work or the timers), else with the
    // next urgent write or read of the catalog, so that most commits of a turn cost no catalog
    // commit. A row is never overwritten by an older epoch's. A write that fails keeps the
    // rows for the next one, and is counted (failures()).
    void note(const session_id& id, lease_epoch epoch, const session::session_summary& sum,
              bool urgent);
    // The row of a session just loaded: rewritten if it says otherwise.
    void note_loaded(const session_id& id, lease_epoch epoch, const session::session_summary& sum);
    // Writes the session's row now if a commit left it behind; every row left behind.
    void write_unwritten(const session_id& id);
    void flush();
    // A session opened at `epoch` has a row (at that epoch, if new); `after_removal`: it was
    // opened above a removal's floor, which has done its work.
    void note_opened(const session_id& id, lease_epoch epoch, bool after_removal);
    // The session was removed at `epoch`: its row goes, and opens at this epoch or older are
    // refused from now on (durable: written with FULL).
    void note_removed(const session_id& id, lease_epoch epoch);
    // The epoch the session was last removed at, if it was.
    std::optional<lease_epoch> removed_at(const session_id& id);
    // The index rows `q` asks for (this process's unwritten rows written first).
    result<std::vector<catalog_entry>> sessions(const catalog_query& q);

    // The boot id the catalog last saw ("" if none), and setting it (durable).
    std::string boot_id();
    void set_boot_id(const std::string& boot);
    // After a restart of the machine: raises the session's row to what its file says (has
    // work, holds timers: then due at once), never lowers it. Whether the row changed.
    bool raise(const session_id& id, lease_epoch epoch, bool has_work, std::int64_t timers);

    // Catalog writes that failed (the catalog locked past the busy timeout, a full disk).
    std::size_t failures() const { return failures_.load(); }

  private:
    // REQUIRES: mu_ held.
    void write_unwritten();

    std::mutex mu_;
    db db_;
    std::map<std::string, std::pair<lease_epoch, session::session_summary>> unwritten_;
    std::atomic<std::size_t> failures_{0};
};

}  // namespace wuhu::storage::sqlite
