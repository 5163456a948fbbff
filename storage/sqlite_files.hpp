// The session files of the SQLite store on disk (docs/storage.md): where they are, how a new
// one is made (from an image, synced once, linked at a hidden name, renamed), how one is opened
// and fenced-ready, how its WAL is sized, and how a closing connection deletes the WAL and the
// shared memory, or a removal unlinks all three. Internal to storage/: sqlite_store composes it
// with the open files (sqlite_open_files.hpp) and the catalog (sqlite_catalog.hpp).
#pragma once

#include "storage/sqlite_db.hpp"
#include "storage/sqlite_store.hpp"

#include <sys/types.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace wuhu::storage::sqlite {

// One open session file. `mu` guards `db` and the WAL fields: one operation at a time uses the
// connection, and a removal (or an open that finds a tombstone) resets `db` under it, so an
// operation that waited finds no file. `dev`/`ino` never change once it is open: they identify
// the file this connection opened, so that a path that now names another file (the session was
// removed and created again) is never mistaken for it. `checkpoint_on_close` is set by the open
// files (under their mutex) only on a handle nobody else holds, and read as it closes.
struct handle {
    std::mutex mu;
    std::unique_ptr<sqlite::db> db;
    dev_t dev = 0;
    ino_t ino = 0;

    // Whether closing checkpoints the WAL (see ~handle). A file closed to stay under the
    // open-file limit is not: its session is still at work, and it would pay two fsyncs.
    bool checkpoint_on_close = true;
    // A file made from the image commits its fence without a sync (sqlite_store::do_open):
    // the connection's synchronous level is set once that commit is done.
    bool fence_unsynced = false;
    // Whether this connection gave the WAL its working size (session_files::size_wal), and the
    // frames in the WAL after its last commit (its WAL hook, which also checkpoints).
    bool wal_sized = false;
    int wal_frames = 0;
    int checkpoint_frames = 0;

    // Closing with a persistent WAL (unless session_files::close_deleting_wal turned that off)
    // leaves the WAL file behind: checkpointed and truncated to nothing, with the limit set now
    // (set for the handle's whole life, it would truncate the WAL after every checkpoint: half
    // the commit rate of one session). Or, for a file closed to make room, as it is (at most
    // wal_checkpoint_pages pages and a commit's): the next connection reads it back.
    ~handle();
};

// The end of the hidden name a new session file has before it is named (sqlite_files.cpp).
inline constexpr std::string_view new_file_suffix = ".new";

// Whether `path` names the file (dev, ino).
bool names(const std::filesystem::path& path, dev_t dev, ino_t ino);

// Opening a session file and unlinking one take turns, across the processes of a host.
// SQLite opens a database and, a moment later, its WAL and shared-memory files by name: were
// the three unlinked in between (and the session created again), one connection would pair
// the old database with the new session's shared memory, and the two would corrupt each other
// (or die of SIGBUS when one truncates the memory the other has mapped). So an open holds a
// shared lock until its connection has all three files open, and an unlink an exclusive one.
// flock on a descriptor of its own: closing it never drops SQLite's fcntl locks, and two
// threads of one process contend like two processes.
class files_lock {
  public:
    // `exclusive_if_free`: an exclusive lock that does not wait for long (about a millisecond,
    // in short tries): held() says whether it was had. Throws sqlite::error otherwise.
    enum class mode { shared, exclusive, exclusive_if_free };
    files_lock(const std::filesystem::path& file, mode m);
    files_lock(const files_lock&) = delete;
    files_lock& operator=(const files_lock&) = delete;
    ~files_lock();
    bool held() const { return fd_ >= 0; }

  private:
    int fd_;
};

// fdatasync of a connection's database file through SQLite's own descriptor: opening and
// closing another would drop every fcntl lock this process holds on the file, SQLite's.
void sync_database(db& d);

// The session files of one data directory. What keeps them consistent across threads and
// processes is the host's files lock (`sessions.lock`, files_lock above), which opens and
// unlinks take turns on; each open file's connection is guarded by its handle's `mu`. The
// object itself holds only what never changes once it is made (the options, the new file's
// image) and one flag, atomic: thread-safe.
class session_files {
  public:
    // Creates the sessions directory; throws std::runtime_error (or std::invalid_argument, for
    // a synchronous level it does not know) if it cannot.
    explicit session_files(sqlite_options options);

    const sqlite_options& options() const { return options_; }
    std::filesystem::path path_of(const session_id& id) const;

    // A new connection to the session's file, migrated, with the store's WAL hook: made first
    // when `mode` is create and there is none (from the image if it can be). nullptr when the
    // file does not exist and is not to be made. A file another process removes while it is
    // opened is opened afresh (a few tries). Throws sqlite::error.
    std::shared_ptr<handle> open(const session_id& id, open_mode mode);
    // One try at a new connection to the session's existing file, under the shared files lock
    // (throws sqlite::error, SQLITE_CANTOPEN when it is gone).
    std::shared_ptr<handle> open_once(const session_id& id);
    // Sets the connection's synchronous level after the unsynced fence of a new file.
    void synced_from_now(handle& h);
    // Gives the session's WAL its working size (wal_prealloc_frames), once per connection.
    // REQUIRES: in a write transaction of `h` that passed its fence (no other connection
    // writes the WAL meanwhile, and only past its end is written).
    void size_wal(handle& h, const session_id& id);
    // Closes `h`, the last reference to the session's file in this process, and with it the
    // file's WAL and shared memory when no other connection has the file open and the path
    // still names it (sqlite_wal.cpp). Best effort, never a wait.
    void close_deleting_wal(const session_id& id, std::shared_ptr<handle> h);
    // Unlinks the session's three files if its path still names h's file (dev, ino), under
    // the exclusive files lock. Other processes may hold connections to it: they keep their
    // descriptors (and SQLite never deletes a WAL or shared-memory file by name on close,
    // PERSIST_WAL), and new connections get new files. Another owner's new file at the same
    // path is never touched.
    void unlink_if_same(const session_id& id, const handle& h);

  private:
    std::filesystem::path lock_file() const;
    // Opens the file at `path` as a handle (throws sqlite::error; SQLITE_CANTOPEN when it
    // is missing and not to be created, or was removed while it was opened). A file to be
    // created is named from `prepared` (prepare_new_file) if there is one (see name_new_file).
    std::shared_ptr<handle> open_file(const std::filesystem::path& path, open_mode mode,
                                      std::filesystem::path* prepared);
    static int on_wal_commit(void* arg, sqlite3* db, const char* name, int frames);
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

    const sqlite_options options_;
    std::string new_file_;  // a new session file's bytes (sqlite::new_wal_file_image); then fixed
    std::atomic<bool> image_unsupported_{false};  // found out by prepare/name_new_file
};

// The rows of a session file (sqlite_log.cpp): its `meta` row `key` ("" when there is none),
// writing it, and the state the file holds, read in the caller's read transaction.
std::string meta(db& d, const char* key);
void set_meta(db& d, const char* key, std::string_view value);
result<session_state> load_rows(db& d);

// A removed session's file keeps a tombstone epoch until it is unlinked: every old handle fails
// its epoch check (no epoch is higher), and an open knows the file is on its way out.
inline constexpr std::string_view tombstone_epoch = "9223372036854775807";
bool is_tombstone(db& d);

}  // namespace wuhu::storage::sqlite
