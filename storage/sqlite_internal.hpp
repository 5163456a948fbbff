// What the SQLite store's files share and its interface does not show: an open session file
// (sqlite_store::handle), the rows of its `meta` table, and the session log of one session.
#pragma once

#include "storage/sqlite_db.hpp"
#include "storage/sqlite_store.hpp"

#include <sys/types.h>

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

// The `meta` row `key` of a session file ("" when there is none), and writing it.
std::string meta(sqlite::db& db, const char* key);
void set_meta(sqlite::db& db, const char* key, std::string_view value);

// The log of session `id`, fenced at `epoch` (sqlite_log.cpp).
std::unique_ptr<session_log> make_log(sqlite_store& store, session_id id, lease_epoch epoch);

}  // namespace sqlite_files

}  // namespace wuhu::storage
