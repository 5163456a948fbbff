// The WALs of the session files (docs/storage.md): checkpointed by the store's own hook once
// they hold wal_checkpoint_pages and then reused from their start, given their working size at
// FULL so that no commit extends the file, and deleted with the shared memory once the session
// is unloaded.
#include "storage/sqlite_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace wuhu::storage::sqlite {

// SQLite's own auto-checkpoint (which this hook replaces), and the WAL's size noted.
int session_files::on_wal_commit(void* arg, sqlite3* db, const char* name, int frames) {
    auto* h = static_cast<handle*>(arg);
    h->wal_frames = frames;
    if (h->checkpoint_frames > 0 && frames >= h->checkpoint_frames) {
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    }
    return SQLITE_OK;
}

void session_files::size_wal(handle& h, const session_id& id) {
    // A session at work: one that has written a few commits since it was opened (a session
    // created and left after its first command never pays for the zeros).
    constexpr int at_work_frames = 12;
    if (h.wal_sized || h.wal_frames < at_work_frames) {
        return;
    }
    h.wal_sized = true;
    if (options_.synchronous != "FULL" || options_.wal_prealloc_frames <= 0) {
        return;  // at NORMAL the WAL is synced only by checkpoints
    }
    const auto wal = path_of(id).string() + "-wal";
    const int fd = ::open(wal.c_str(), O_WRONLY | O_CLOEXEC);  // SQLite locks no WAL file
    if (fd < 0) {
        return;  // not there yet: SQLite makes it with this commit
    }
    auto& q = h.db->prepare("PRAGMA page_size");
    q.step();
    const auto frame = q.int64(0) + 24;
    q.reset();
    const off_t want = 32 + static_cast<off_t>(options_.wal_prealloc_frames) * frame;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size < want) {
        // Written, not only allocated: a write into an unwritten extent or past the end changes
        // the file's metadata, which an fdatasync then writes too.
        static const std::vector<char> zeros(64 * 1024);
        for (off_t at = st.st_size; at < want;) {
            const auto n = std::min<off_t>(want - at, static_cast<off_t>(zeros.size()));
            const auto w = ::pwrite(fd, zeros.data(), static_cast<std::size_t>(n), at);
            if (w <= 0) {
                break;  // the disk is full, say: the WAL grows as SQLite writes, as before
            }
            at += w;
        }
    }
    ::close(fd);
}

// SQLite's last connection to a file (of any process: each holds a shared lock on it while
// open) deletes its WAL and shared memory as it closes, unless they persist. Every connection
// here sets them to persist (open_file), since a connection to a file another process removed
// would delete the new session's by name; so they may go only when the path still names this
// file, checked under the exclusive files lock: no removal, and no open that could pair a new
// connection with them, runs until they are gone. Checkpointed first, outside the lock (its
// fsyncs), so that the checkpoint as it closes has nothing left to do. Best effort, never a
// wait: when the checkpoint could not copy every frame (another connection has the file
// open) or when the lock is not free, ~handle closes it as before and the two stay for the
// session's next connection.
void session_files::close_deleting_wal(const session_id& id, std::shared_ptr<handle> h) {
    if (!h->db || !h->checkpoint_on_close) {
        return;  // closed already, or to make room: ~handle
    }
    int in_wal = -1;
    int copied = -1;
    if (sqlite3_wal_checkpoint_v2(h->db->raw(), "main", SQLITE_CHECKPOINT_PASSIVE, &in_wal,
                                  &copied) != SQLITE_OK ||
        in_wal != copied) {
        return;
    }
    try {
        files_lock exclusive(lock_file(), files_lock::mode::exclusive_if_free);
        if (exclusive.held() && names(path_of(id), h->dev, h->ino)) {
            int persist = 0;
            sqlite3_file_control(h->db->raw(), "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
            h.reset();  // under the lock
        }
    } catch (const error&) {
        // No lock file: ~handle closes it with its WAL and shared memory kept.
    }
}

}  // namespace wuhu::storage::sqlite
