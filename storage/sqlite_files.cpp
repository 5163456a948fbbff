// The files of a session on disk (docs/storage.md): the lock that opens and unlinks take turns
// on, unlinking a removed session's files, syncing a file SQLite made, and making a new file
// from the image.
#include "storage/sqlite_internal.hpp"
#include "storage/sqlite_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace wuhu::storage {

namespace sqlite_files {

bool names(const std::filesystem::path& path, dev_t dev, ino_t ino) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

files_lock::files_lock(const std::filesystem::path& file, mode m)
    : fd_(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ < 0) {
        throw sqlite::error(SQLITE_CANTOPEN, "open " + file.string() + ": " + std::strerror(errno));
    }
    if (struct stat st {}; ::fstat(fd_, &st) == 0 && (st.st_mode & 07777) != 0600) {
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
        throw sqlite::error(SQLITE_IOERR, "flock " + file.string() + ": " + std::strerror(e));
    }
}

files_lock::~files_lock() {
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

void unlink_if_same(const std::filesystem::path& lock_file, const std::filesystem::path& path,
                    dev_t dev, ino_t ino) {
    files_lock exclusive(lock_file, files_lock::mode::exclusive);
    if (!names(path, dev, ino)) {
        return;
    }
    // The shared-memory index and the WAL first: a new connection must never pair the new
    // file with the old ones (the file itself carries the tombstone meanwhile).
    for (const char* suffix : {"-shm", "-wal", ""}) {
        std::error_code ec;
        std::filesystem::remove(path.string() + suffix, ec);
    }
}

void sync_database(sqlite::db& db) {
    sqlite3_file* f = nullptr;
    if (sqlite3_file_control(db.raw(), "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK ||
        f == nullptr || f->pMethods == nullptr) {
        throw sqlite::error(SQLITE_IOERR, "sync a new session file: no file");
    }
    if (const int rc = f->pMethods->xSync(f, SQLITE_SYNC_NORMAL); rc != SQLITE_OK) {
        throw sqlite::error(rc, "sync a new session file");
    }
}

}  // namespace sqlite_files

namespace {

// The name a new file is linked at before it is renamed to its session's: hidden, never a
// session's (no .sqlite), this process's and this call's alone. Only a process killed
// between the link and the rename leaves one; the store removes them after a reboot.
std::filesystem::path name_while_new(const std::filesystem::path& path) {
    static std::atomic<std::uint64_t> made{0};
    return path.parent_path() /
           ("." + path.filename().string() + "." + std::to_string(::getpid()) + "." +
            std::to_string(made++) + std::string(sqlite_files::new_file_suffix));
}

}  // namespace

std::filesystem::path sqlite_store::prepare_new_file(const std::filesystem::path& path) {
    const int fd = ::open(path.parent_path().c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {
            image_unsupported_ = true;  // no unnamed files here: SQLite makes the files from now
            return {};
        }
        throw sqlite::error(SQLITE_CANTOPEN, "create a file in " + path.parent_path().string() +
                                                 ": " + std::strerror(errno));
    }
    auto fail = [&](const char* what) {
        const int e = errno;
        ::close(fd);
        throw sqlite::error(SQLITE_IOERR,
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

sqlite_store::new_file sqlite_store::name_new_file(std::filesystem::path& hidden,
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
    throw sqlite::error(SQLITE_IOERR, "rename " + hidden.string() + ": " + std::strerror(e));
}

}  // namespace wuhu::storage
