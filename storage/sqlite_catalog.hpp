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
    // A bound on the rows left unwritten (note()): no write of them holds the catalog, where
    // the host's leases are too, for long.
    static constexpr std::size_t max_unwritten = 512;

    // Opens (and migrates) the catalog; throws sqlite::error if it cannot.
    catalog(const std::filesystem::path& file, int busy_timeout_ms);
    // Writes the rows left behind (flush()).
    ~catalog();

    // The session's index row as of a commit (or a load) at `epoch`. `raise`: the row must
    // say this much before the commit (work, more timers, an earlier one): written at once,
    // alone, unless the row as this process last wrote it at this epoch already says as much.
    // Else (a row that says less, or only other columns) written with the next read of the
    // catalog by this process (the recovery sweep's, every sweep interval) or the session's unload,
    // so that the commits of a session at work cost no catalog commit: its row stays raised
    // from its first command until then. A row is never overwritten by an older epoch's. A
    // write that fails keeps the rows, is counted (failures()), and the next raise writes
    // them all. Fewer than max_unwritten rows wait: the note that would make them as many
    // writes them all.
    void note(const session_id& id, lease_epoch epoch, const session::session_summary& sum,
              bool raise);
    // The row of a session just loaded: rewritten if it says otherwise.
    void note_loaded(const session_id& id, lease_epoch epoch, const session::session_summary& sum);
    // The session is unloaded: its row is written now if a commit left it behind (every row
    // left behind is), and what this process wrote of it is forgotten.
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
    // work, and is not paused; holds timers: then due at once), never lowers it. Whether the
    // row changed.
    bool raise(const session_id& id, lease_epoch epoch, bool has_work, bool paused,
               std::int64_t timers);

    // Catalog writes that failed (the catalog locked past the busy timeout, a full disk).
    std::size_t failures() const { return failures_.load(); }

  private:
    using rows = std::map<std::string, std::pair<lease_epoch, session::session_summary>>;

    // REQUIRES: mu_ held.
    void write_unwritten();
    // Writes the unwritten rows [first, last) in one transaction. REQUIRES: mu_ held.
    void write(rows::iterator first, rows::iterator last);

    std::mutex mu_;
    db db_;
    rows unwritten_;
    // The rows this process last wrote that say the sweep has something to do (work or
    // timers), recorded by a raise and kept as later writes of the row leave it, while the
    // session is loaded here: a raise they cover writes nothing.
    rows raised_;
    // A write failed: the next raise writes every row (a raise kept must not wait for a read),
    // and no note writes them for the bound meanwhile (each would wait the busy timeout).
    bool write_failed_ = false;
    std::atomic<std::size_t> failures_{0};
};

}  // namespace wuhu::storage::sqlite
