// The per-session SQLite store: the embedded default.
//
// Layout: `<data_dir>/sessions/<sid>.sqlite`, one file per session (WAL, synchronous=FULL by
// default, busy timeout), holding the fencing epoch, the transcript, the journals, the timers
// and the registers; `<data_dir>/catalog.sqlite` lists the sessions with their index row (has
// work, lane depths, timers, last activity: session/summary.hpp) for the recovery sweep and the
// fleet view (a hint: the session file is authoritative), and holds the leases of the host. The session id is validated
// before it becomes a path, and files are opened without URI parsing.
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
// serialized by its handle.
#pragma once

#include "storage/store.hpp"

struct sqlite3;

#include <atomic>
#include <filesystem>
#include <list>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

namespace wuhu::storage {

namespace sqlite {
class db;
}

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

    // Sessions in the catalog (a hint: see note_catalog; the session file is authoritative).
    result<std::vector<catalog_entry>> sessions(const catalog_query& q) override;
    std::filesystem::path path_of(const session_id& id) const;
    std::size_t open_files() const;
    // Session files checked, and index rows raised, when the store opened (both 0 unless the
    // machine restarted since the catalog was last used).
    std::size_t files_checked_at_start() const { return checked_at_start_; }
    std::size_t rows_raised_at_start() const { return raised_at_start_; }
    // Catalog writes that failed (the catalog locked past the busy timeout, a full disk): their
    // rows wait for the next write.
    std::size_t catalog_failures() const { return catalog_failures_.load(); }
    std::size_t index_write_failures() const override { return catalog_failures(); }

  protected:
    result<std::unique_ptr<session_log>> do_open(const session_id& id, lease_epoch epoch,
                                                 open_mode mode) override;

  private:
    // Opening a session file and unlinking one take turns on this file (sqlite_store.cpp).
    std::filesystem::path lock_file() const;
    friend class sqlite_log;
    struct handle;

    // The open handle of a session; opens the file (creating it only when `create`), applies
    // the migrations. Throws sqlite::error; returns nullptr when the file does not exist.
    std::shared_ptr<handle> acquire(const session_id& id, open_mode mode);
    // Closes the session's file unless an operation is using it (its log was closed).
    void close_unused(const session_id& id);
    // Closes `h`, the last reference to the session's file in this store (its session is
    // unloaded), and with it the file's WAL and shared memory when no other connection has
    // the file open.
    void retire(const session_id& id, std::shared_ptr<handle> h);
    // Drops `h` from the open files if it is still the session's (it names a removed file).
    void forget(const session_id& id, const std::shared_ptr<handle>& h);
    // Gives the session's WAL its working size (wal_prealloc_frames), once per connection.
    // REQUIRES: in a write transaction of `h` that passed its fence (no other connection
    // writes the WAL meanwhile, and only past its end is written).
    void size_wal(handle& h, const session_id& id);
    static int on_wal_commit(void* arg, sqlite3* db, const char* name, int frames);
    // Checkpoints and deletes the WAL (and shared memory) a file closed to make room left (see
    // wal_left_).
    void tidy_wal(const session_id& id);
    // Sets the connection's synchronous level after the unsynced fence of a new file.
    void synced_from_now(handle& h);
    // Opens the file at `path` as a handle (throws sqlite::error; SQLITE_CANTOPEN when it
    // is missing and not to be created, or was removed while it was opened). A file to be
    // created is named from `prepared` (prepare_new_file) if there is one (see name_new_file).
    std::shared_ptr<handle> open_file(const std::filesystem::path& path, open_mode mode,
                                      std::filesystem::path* prepared = nullptr);
    // acquire(), but never a cached handle of a file that is no longer at the session's path.
    std::shared_ptr<handle> acquire_current(const session_id& id, open_mode mode);
    // The epoch the session was last removed at, if it was (the catalog's `removed`).
    std::optional<lease_epoch> removed_at(const session_id& id);
    // The catalog (sqlite_catalog.cpp). The session's index row as of a commit (or a load) at
    // `epoch`: written at once when `urgent` (what the recovery sweep reads changed: has_work
    // or the timers), else with the next urgent write or read of the catalog, so that most
    // commits of a turn cost no catalog commit. A row is never overwritten by an older epoch's.
    void note_catalog(const session_id& id, lease_epoch epoch,
                      const session::session_summary& sum, bool urgent);
    // The catalog row of a session just loaded: rewritten if it says otherwise.
    void note_loaded(const session_id& id, lease_epoch epoch, const session::session_summary& sum);
    // With catalog_mu_ held. A write that fails keeps the rows for the next one, and is counted
    // (catalog_failures()).
    void write_unwritten();
    // Writes the session's row now if a commit left it behind.
    void write_unwritten(const session_id& id);
    void note_opened(const session_id& id, lease_epoch epoch, bool after_removal);
    void note_removed(const session_id& id, lease_epoch epoch);
    // After a restart of the machine: raises the index rows the session files contradict.
    void check_after_reboot();

    // A new session file for `path`, written from new_file_ and synced, at a hidden name of its
    // own (no lock needed: nobody else knows it); empty when the file system cannot make an
    // unnamed file (O_TMPFILE), and SQLite makes the file (and every later one:
    // image_unsupported_).
    std::filesystem::path prepare_new_file(const std::filesystem::path& path);
    // Renames the prepared file `hidden` to `path` unless a file is there (under the shared
    // files lock), and then clears `hidden`; otherwise leaves it to its preparer to remove.
    // made_elsewhere: another process made the file first (it is used as it is); unsupported:
    // the file system cannot rename without replacing, and SQLite makes the file.
    enum class new_file { linked, made_elsewhere, unsupported };
    new_file name_new_file(std::filesystem::path& hidden, const std::filesystem::path& path);

    sqlite_options options_;
    std::string new_file_;  // a new session file's bytes (sqlite::new_wal_file_image)
    std::atomic<bool> image_unsupported_{false};  // found out by prepare/name_new_file
    std::unique_ptr<sqlite::db> catalog_;
    std::mutex catalog_mu_;
    std::map<std::string, std::pair<lease_epoch, session::session_summary>> unwritten_;
    std::size_t checked_at_start_ = 0;
    std::size_t raised_at_start_ = 0;
    std::atomic<std::size_t> catalog_failures_{0};
    mutable std::mutex mu_;
    std::list<std::string> lru_;  // most recent first
    std::map<std::string, std::pair<std::shared_ptr<handle>, std::list<std::string>::iterator>>
        open_;
    // Sessions whose file was closed to make room, its WAL left for their next connection:
    // deleted when the session is unloaded first (close_unused), unless the store is stopping.
    std::set<std::string> wal_left_;
    bool stopping_ = false;
};

}  // namespace wuhu::storage
