// What the SQLite store's files share and its interface does not show: an open session file
// (sqlite_store::handle), the rows of its `meta` table, and the session log of one session.
#pragma once

#include "storage/sqlite_db.hpp"
#include "storage/sqlite_store.hpp"

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace wuhu::storage {

// One open session file. `dev`/`ino` identify the file this connection opened, so that a
// path that now names another file (the session was removed and created again) is never
// mistaken for it.
struct sqlite_store::handle {
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
    // Whether this connection gave the WAL its working size (sqlite_store::size_wal), and the
    // frames in the WAL after its last commit (its WAL hook, which also checkpoints).
    bool wal_sized = false;
    int wal_frames = 0;
    int checkpoint_frames = 0;

    // Closing with a persistent WAL (unless sqlite_store::retire turned that off) leaves the
    // WAL file behind: checkpointed and truncated to nothing, with the limit set now (set for
    // the handle's whole life, it would truncate the WAL after every checkpoint: half the
    // commit rate of one session). Or, for a file closed to make room, as it is (at most
    // wal_checkpoint_pages pages and a commit's): the next connection reads it back.
    ~handle() {
        if (!db) {
            return;
        }
        if (checkpoint_on_close) {
            sqlite3_exec(db->raw(), "PRAGMA journal_size_limit=0", nullptr, nullptr, nullptr);
        } else {
            sqlite3_db_config(db->raw(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
        }
    }
};

namespace sqlite_files {

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

// Unlinks the session's three files if `path` still names the file (dev, ino). Other
// processes may hold connections to it: they keep their descriptors (and SQLite never deletes
// a WAL or shared-memory file by name on close, PERSIST_WAL), and new connections get new
// files. Another owner's new file at the same path is never touched.
void unlink_if_same(const std::filesystem::path& lock_file, const std::filesystem::path& path,
                    dev_t dev, ino_t ino);

// fdatasync of a connection's database file through SQLite's own descriptor: opening and
// closing another would drop every fcntl lock this process holds on the file, SQLite's.
void sync_database(sqlite::db& db);

// The `meta` row `key` of a session file ("" when there is none), and writing it.
std::string meta(sqlite::db& db, const char* key);
void set_meta(sqlite::db& db, const char* key, std::string_view value);

// The state a session file holds, read in the caller's read transaction (sqlite_log.cpp).
result<session_state> load_rows(sqlite::db& db);

// The log of session `id`, fenced at `epoch` (sqlite_log.cpp).
std::unique_ptr<session_log> make_log(sqlite_store& store, session_id id, lease_epoch epoch);

}  // namespace sqlite_files

}  // namespace wuhu::storage
