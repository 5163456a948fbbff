// The per-session SQLite store: the embedded default.
//
// Layout: `<data_dir>/sessions/<sid>.sqlite`, one file per session (WAL, synchronous=FULL by
// default, busy timeout), holding the fencing epoch, the transcript, the journals, the timers
// and the registers; `<data_dir>/catalog.sqlite` lists the sessions with their index row (has
// work, lane depths, timers, last activity: session/summary.hpp) for the recovery sweep and the
// fleet view (a hint: the session file is authoritative), and holds the leases of the host.
// The session id is validated before it becomes a path, and files are opened without URI
// parsing.
//
// Many sessions, few descriptors: a session's file is open while its log is (the session is
// loaded), and at most `max_open_files` session files stay open (3 file descriptors each, with
// -wal and -shm): past that the least recently used idle one is closed first.
//
// The catalog's index rows are hints, written without waiting for an fsync (synchronous=NORMAL:
// a crash of the process loses none, a power loss or a crash of the machine may lose the last
// ones); the removal floors are written with FULL. So when the store opens a data directory
// after the machine restarted (its boot id is not the one the catalog last saw), it checks
// the rows against the session files first: a session whose file says it has work, or holds
// timers, gets a row that says so (the recovery sweep then finds it, and its load rewrites the
// row exactly).
//
// Thread-safe: operations on different sessions run in parallel; one session's operations are
// serialized by its handle. The parts are in sqlite_files.hpp (the files on disk),
// sqlite_open_files.hpp (those open here), sqlite_catalog.hpp and sqlite_log.hpp.
#pragma once

#include "storage/store.hpp"

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace wuhu::storage {

namespace sqlite {
class catalog;
class open_files;
class session_files;
}  // namespace sqlite

struct sqlite_options {
    std::filesystem::path data_dir;
    std::string synchronous = "FULL";  // FULL or NORMAL (NORMAL may lose the last commits on
                                       // power loss, not on a process crash)
    int busy_timeout_ms = 5000;
    std::size_t max_open_files = 256;
    // The page size of new session files: every commit writes each page it touches to the WAL
    // whole, so small pages write (and fsync) less per turn.
    int page_size = 1024;
    // A session's WAL is checkpointed once it holds this many pages, and then reused from its
    // start: it stops growing after a few turns, and a commit that does not grow the file
    // syncs no file-system metadata.
    int wal_checkpoint_pages = 128;
    // At synchronous FULL, the WAL of a session at work (a dozen frames written since its file
    // was opened) is given the size of this many frames, written as zeros, once per open: a
    // commit that grows the file makes its fdatasync write the file's inode too (0: the WAL
    // grows as SQLite writes).
    int wal_prealloc_frames = 144;
    // A new session file is written whole from a prepared image (false: SQLite makes it, as
    // where the file system has no unnamed files; tests run both).
    bool new_files_from_image = true;
    // Tests: runs after a new file is written and synced, before it is named (another
    // process may make the file meanwhile).
    std::function<void()> before_new_file_is_linked = nullptr;
    // Tests: runs after a commit of a session's file, before the catalog row is lowered (a
    // test process exits there, as if killed between the two).
    std::function<void()> after_file_commit = nullptr;
    // Where the machine's boot id is read (tests point it elsewhere): the catalog is checked
    // against the session files when it changed (see sqlite_store).
    std::filesystem::path boot_id_file = "/proc/sys/kernel/random/boot_id";
};

class sqlite_store final : public session_store {
  public:
    // Creates the directories and the catalog; throws std::runtime_error if it cannot.
    explicit sqlite_store(sqlite_options options);
    ~sqlite_store() override;

    result<void> remove(const session_id& id, lease_epoch epoch) override;
    result<bool> exists(const session_id& id) override;
    result<std::optional<session_state>> read(const session_id& id) override;
    std::string_view backend() const override { return "sqlite"; }
    void stopping() override;

    // Sessions in the catalog (a hint: see sqlite_catalog.hpp; the session file is authoritative).
    result<std::vector<catalog_entry>> sessions(const catalog_query& q) override;
    std::filesystem::path path_of(const session_id& id) const;
    std::size_t open_files() const;
    std::size_t close_idle(std::chrono::steady_clock::time_point unused_since) override;
    // Session files checked, and index rows raised, when the store opened (both 0 unless the
    // machine restarted since the catalog was last used).
    std::size_t files_checked_at_start() const { return checked_at_start_; }
    std::size_t rows_raised_at_start() const { return raised_at_start_; }
    // Catalog writes that failed (the catalog locked past the busy timeout, a full disk): their
    // rows wait for the next write.
    std::size_t catalog_failures() const;
    std::size_t index_write_failures() const override { return catalog_failures(); }

  protected:
    result<std::unique_ptr<session_log>> do_open(const session_id& id, lease_epoch epoch,
                                                 open_mode mode) override;

  private:
    // After a restart of the machine: raises the index rows the session files contradict.
    void check_after_reboot();

    // Three parts, each guarding its own (see their headers): the files on disk and the host's
    // files lock; the catalog and its mutex; the files open here, their LRU and its mutex.
    // Destroyed in reverse: the open files close (after ~sqlite_store wrote the catalog's rows
    // left behind), then the catalog, then nothing is left that names a file.
    std::unique_ptr<sqlite::session_files> files_;
    std::unique_ptr<sqlite::catalog> catalog_;
    std::unique_ptr<sqlite::open_files> open_;
    std::size_t checked_at_start_ = 0;
    std::size_t raised_at_start_ = 0;
};

}  // namespace wuhu::storage
