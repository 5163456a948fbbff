// The files of a session on disk (docs/storage.md): the lock that opens and unlinks take turns
// on, opening a session's file (making a new one from the image), syncing a file SQLite made,
// and unlinking a removed session's files.
#include "storage/sqlite_files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace wuhu::storage::sqlite {

namespace {

// Versioned schema of a session file; PRAGMA user_version is the number of migrations applied.
const char* const session_migrations[] = {
    R"(CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;
       CREATE TABLE transcript (seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, body TEXT NOT NULL);
       CREATE TABLE journal (lane INTEGER NOT NULL, seq INTEGER NOT NULL, at INTEGER NOT NULL,
                             body TEXT NOT NULL, PRIMARY KEY (lane, seq)) WITHOUT ROWID;
       CREATE TABLE timers (id TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID;
       INSERT INTO meta VALUES ('epoch', '0'), ('version', '0,0,0,0'), ('paused', '0'),
                               ('has_work', '0'), ('settings', '');)",
};

}  // namespace

bool names(const std::filesystem::path& path, dev_t dev, ino_t ino) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

files_lock::files_lock(const std::filesystem::path& file, mode m)
    : fd_(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ < 0) {
        throw error(SQLITE_CANTOPEN, "open " + file.string() + ": " + std::strerror(errno));
    }
    if (struct stat st{}; ::fstat(fd_, &st) == 0 && (st.st_mode & 07777) != 0600) {
        ::fchmod(fd_, 0600);  // the worker's user's alone, whatever the umask
    }
    const int op = m == mode::shared ? LOCK_SH : m == mode::exclusive ? LOCK_EX : LOCK_EX | LOCK_NB;
    for (int tries = 1; ::flock(fd_, op) != 0;) {
        const int e = errno;
        if (e == EINTR) {
            continue;
        }
        if (m == mode::exclusive_if_free && e == EWOULDBLOCK && tries++ < 10) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
            continue;
        }
        ::close(fd_);
        fd_ = -1;
        if (m == mode::exclusive_if_free && e == EWOULDBLOCK) {
            return;  // not free: held() is false
        }
        throw error(SQLITE_IOERR, "flock " + file.string() + ": " + std::strerror(e));
    }
}

files_lock::~files_lock() {
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

void session_files::unlink_if_same(const session_id& id, const handle& h) {
    files_lock exclusive(lock_file(), files_lock::mode::exclusive);
    const auto path = path_of(id);
    if (!names(path, h.dev, h.ino)) {
        return;
    }
    // The shared-memory index and the WAL first: a new connection must never pair the new
    // file with the old ones (the file itself carries the tombstone meanwhile).
    for (const char* suffix : {"-shm", "-wal", ""}) {
        std::error_code ec;
        std::filesystem::remove(path.string() + suffix, ec);
    }
}

void sync_database(db& d) {
    sqlite3_file* f = nullptr;
    if (sqlite3_file_control(d.raw(), "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK ||
        f == nullptr || f->pMethods == nullptr) {
        throw error(SQLITE_IOERR, "sync a new session file: no file");
    }
    if (const int rc = f->pMethods->xSync(f, SQLITE_SYNC_NORMAL); rc != SQLITE_OK) {
        throw error(rc, "sync a new session file");
    }
}

handle::~handle() {
    if (!db) {
        return;
    }
    if (checkpoint_on_close) {
        sqlite3_exec(db->raw(), "PRAGMA journal_size_limit=0", nullptr, nullptr, nullptr);
    } else {
        sqlite3_db_config(db->raw(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
    }
}

bool is_tombstone(db& d) {
    return meta(d, "epoch") == tombstone_epoch;
}

session_files::session_files(sqlite_options options) : options_(std::move(options)) {
    if (options_.synchronous != "FULL" && options_.synchronous != "NORMAL" &&
        options_.synchronous != "EXTRA") {
        throw std::invalid_argument("sqlite synchronous must be FULL, NORMAL or EXTRA");
    }
    std::filesystem::create_directories(options_.data_dir / "sessions");
    keep_private(options_.data_dir, 0700);
    keep_private(options_.data_dir / "sessions", 0700);
    new_file_ =
        new_wal_file_image(session_migrations, std::size(session_migrations), options_.page_size);
}

std::filesystem::path session_files::path_of(const session_id& id) const {
    return options_.data_dir / "sessions" / (id.str() + ".sqlite");
}

std::filesystem::path session_files::lock_file() const {
    return options_.data_dir / "sessions.lock";
}

std::shared_ptr<handle> session_files::open(const session_id& id, open_mode mode) {
    // A new file is written and synced before the files lock is taken: an unload or a removal
    // that waits for the lock exclusive waits for no fsync.
    auto path = path_of(id);
    std::filesystem::path prepared;
    struct drop_unnamed {
        std::filesystem::path& file;
        ~drop_unnamed() {
            std::error_code ec;
            if (!file.empty()) {
                std::filesystem::remove(file, ec);
            }
        }
    } unnamed{prepared};
    std::shared_ptr<handle> h;
    for (int attempt = 0; !h; ++attempt) {
        try {
            if (prepared.empty() && mode == open_mode::create && options_.new_files_from_image &&
                !image_unsupported_ && !std::filesystem::exists(path)) {
                prepared = prepare_new_file(path);
            }
            files_lock shared(lock_file(), files_lock::mode::shared);
            if (mode == open_mode::existing && !std::filesystem::exists(path)) {
                return nullptr;
            }
            h = open_file(path, mode, &prepared);
        } catch (const error& e) {
            // Another process removed the file while this one opened it (it may have created
            // the session again since): opening failed on a vanished file (an I/O error, or it
            // could not be opened). Open the path afresh; a failure that lasts is real.
            const int kind = e.code() & 0xFF;
            if ((kind != SQLITE_IOERR && kind != SQLITE_CANTOPEN) || attempt == 10) {
                throw;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    return h;
}

std::shared_ptr<handle> session_files::open_once(const session_id& id) {
    files_lock shared(lock_file(), files_lock::mode::shared);  // as every open
    return open_file(path_of(id), open_mode::existing, nullptr);
}

std::shared_ptr<handle> session_files::open_file(const std::filesystem::path& path, open_mode mode,
                                                 std::filesystem::path* prepared) {
    // A new file is written whole from new_file_, synced, and then given its name; its WAL's
    // header, a first frame and the fencing commit are written without a sync
    // (synced_from_now). The first commit of a command syncs the WAL with all of them (at
    // NORMAL, the first checkpoint), and SQLite syncs the directory (which names the file) with
    // the first sync of every WAL it opens. No rollback journal is made and deleted on the way (an inode allocated and
    // freed per session, which ext4's allocator pays for later). Nothing in the file is
    // acknowledged before that commit: a crash before it leaves a session nobody was told
    // about, or one at an older epoch, which its next owner fences again.
    //
    // Where the file system cannot write an unnamed file (or where a file that was there when
    // the open began is gone once it has the files lock), SQLite makes it, also without
    // waiting for fsyncs (it would sync its rollback journal twice, the directory, the file,
    // and the WAL for the schema), and the file is then synced once (its header says WAL).
    const bool missing = mode == open_mode::create && !std::filesystem::exists(path);
    const auto made = missing && prepared != nullptr && !prepared->empty()
                          ? name_new_file(*prepared, path)
                          : new_file::unsupported;
    const bool from_image = made == new_file::linked;
    // Another process's file is opened as any existing one: it may be in use already. At
    // NORMAL too: there the first command's commit syncs nothing either (SQLite syncs the WAL,
    // and the directory with its first sync, at the first checkpoint), and a fence synced
    // alone cost the WAL's header and the directory two fsyncs a new session.
    const bool fresh = missing && made != new_file::made_elsewhere;
    auto h = std::make_shared<handle>();
    h->db = std::make_unique<db>(
        path.string(), fresh ? "OFF" : options_.synchronous, options_.busy_timeout_ms,
        mode == open_mode::create ? if_missing::create : if_missing::fail, options_.page_size);
    // A removed session's files are unlinked while other processes may still have them open:
    // no connection may then delete a WAL or shared-memory file by name when it closes (it
    // would be the new session's). A WAL left behind is truncated on close (~handle); an
    // unloaded session's goes with its shared memory (close_deleting_wal).
    int persist = 1;
    sqlite3_file_control(h->db->raw(), "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        throw error(SQLITE_CANTOPEN, "stat " + path.string() + ": removed while opened");
    }
    h->dev = st.st_dev;
    h->ino = st.st_ino;
    migrate(*h->db, session_migrations, std::size(session_migrations));
    // A small WAL, checkpointed often and then written again from its start: a commit that
    // does not grow the file syncs no file-system metadata (docs/storage.md).
    h->checkpoint_frames = options_.wal_checkpoint_pages;
    sqlite3_wal_hook(h->db->raw(), on_wal_commit, h.get());
    if (fresh) {
        if (from_image) {
            // Starts the WAL: the epoch row written again as it is (another process may have
            // opened and fenced the file since it was linked). The fence follows unsynced too.
            h->db->exec("REPLACE INTO meta SELECT k, v FROM meta WHERE k = 'epoch'");
            h->fence_unsynced = true;
        } else {
            sync_database(*h->db);
            h->db->exec("PRAGMA synchronous=" + options_.synchronous);
        }
    }
    return h;
}

// A new session's fence is committed without a sync: the session had no owner to fence out,
// and the commit of its first command, which is acknowledged, syncs the WAL with every frame
// before it (and the directory that names the file and its WAL, the WAL's first sync); at
// NORMAL the first checkpoint does. A crash before then leaves a file at an older epoch, which
// the next owner's open fences again.
void session_files::synced_from_now(handle& h) {
    if (h.fence_unsynced) {
        h.fence_unsynced = false;
        h.db->exec("PRAGMA synchronous=" + options_.synchronous);
    }
}

namespace {

// The name a new file is linked at before it is renamed to its session's: hidden, never a
// session's (no .sqlite), this process's and this call's alone. Only a process killed
// between the link and the rename leaves one; the store removes them after a reboot.
std::filesystem::path name_while_new(const std::filesystem::path& path) {
    static std::atomic<std::uint64_t> made{0};
    return path.parent_path() / ("." + path.filename().string() + "." + std::to_string(::getpid()) +
                                 "." + std::to_string(made++) + std::string(new_file_suffix));
}

}  // namespace

std::filesystem::path session_files::prepare_new_file(const std::filesystem::path& path) {
    const int fd = ::open(path.parent_path().c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {
            image_unsupported_ = true;  // no unnamed files here: SQLite makes the files from now
            return {};
        }
        throw error(SQLITE_CANTOPEN, "create a file in " + path.parent_path().string() + ": " +
                                         std::strerror(errno));
    }
    auto fail = [&](const char* what) {
        const int e = errno;
        ::close(fd);
        throw error(SQLITE_IOERR,
                    std::string(what) + " " + path.string() + ": " + std::strerror(e));
    };
    if (::fchmod(fd, 0600) != 0) {  // the worker's user's alone, whatever the umask
        fail("chmod");
    }
    for (std::size_t done = 0; done < new_file_.size();) {
        const auto n = ::write(fd, new_file_.data() + done, new_file_.size() - done);
        if (n < 0 && errno != EINTR) {
            fail("write");
        }
        done += n > 0 ? static_cast<std::size_t>(n) : 0;
    }
    // Synced at every level: at NORMAL too, a WAL that outlived a power loss needs its file.
    if (::fdatasync(fd) != 0) {
        fail("fsync");
    }
    // Linked at a name of its own and closed: closing a descriptor of a file drops every fcntl
    // lock the process holds on it, and another thread's connection may open (and lock) the
    // file the moment it has the session's name.
    const auto self = "/proc/self/fd/" + std::to_string(fd);
    const auto hidden = name_while_new(path);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, hidden.c_str(), AT_SYMLINK_FOLLOW) != 0) {
        fail("link");
    }
    ::close(fd);
    return hidden;
}

session_files::new_file session_files::name_new_file(std::filesystem::path& hidden,
                                                     const std::filesystem::path& path) {
    if (options_.before_new_file_is_linked) {
        options_.before_new_file_is_linked();
    }
    // Named in whole or not at all: another process that made the file first wins (EEXIST).
    if (::renameat2(AT_FDCWD, hidden.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) {
        hidden.clear();
        return new_file::linked;
    }
    const int e = errno;
    if (e == EEXIST) {
        return new_file::made_elsewhere;
    }
    if (e == EINVAL || e == ENOSYS) {
        // No RENAME_NOREPLACE on this file system (or kernel): SQLite makes the files from now.
        image_unsupported_ = true;
        return new_file::unsupported;
    }
    throw error(SQLITE_IOERR, "rename " + hidden.string() + ": " + std::strerror(e));
}

}  // namespace wuhu::storage::sqlite
