// The session files a SQLite store has open (internal to storage/): one connection a session,
// shared by the operations of this process, at most `max_open_files` of them (the least
// recently used idle one is closed first, its WAL left for its next connection), and each
// closed with its WAL and shared memory once its session is unloaded.
#pragma once

#include "storage/sqlite_files.hpp"

#include <chrono>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

namespace wuhu::storage::sqlite {

// Thread-safe. `mu_` guards the four fields below it, and is never held while a file opens,
// closes, syncs or checkpoints: other sessions' files open (and are created, with their fsyncs)
// at the same time.
class open_files {
  public:
    open_files(session_files& files, std::size_t max_open) : files_(files), max_open_(max_open) {}

    // The open handle of a session; opens the file (creating it only when `create`) if it is
    // not open. Throws sqlite::error; returns nullptr when the file does not exist.
    std::shared_ptr<handle> acquire(const session_id& id, open_mode mode);
    // acquire(), but never a cached handle of a file that is no longer at the session's path.
    std::shared_ptr<handle> acquire_current(const session_id& id, open_mode mode);
    // Drops `h` from the open files if it is still the session's (it names a removed file).
    void forget(const session_id& id, const std::shared_ptr<handle>& h);
    // Closes the session's file unless an operation is using it (its log was closed), with its
    // WAL and shared memory; or deletes the WAL a file closed to make room left.
    void close_unused(const session_id& id);
    // The store is stopping: the WALs of sessions unloaded from now on are not deleted (a stop
    // is not made longer for that), and those left stay for their next connection.
    void stopping();
    std::size_t size() const;
    // Closes the files no operation has used since `unused_since` (and none uses now), each
    // with its WAL and shared memory as an unloaded session's: what they held goes back.
    // Walks the files from the least recently used to the first one used since; at most 256
    // a call (the caller calls again). Returns how many it closed.
    std::size_t close_idle(std::chrono::steady_clock::time_point unused_since);

  private:
    // Closes `h`, the last reference to the session's file here, deleting its WAL (see
    // session_files::close_deleting_wal) unless the store is stopping.
    void retire(const session_id& id, std::shared_ptr<handle> h);
    // Checkpoints and deletes the WAL (and shared memory) a file closed to make room left (see
    // wal_left_), through a connection of its own, closed at once.
    void tidy_wal(const session_id& id);

    session_files& files_;
    const std::size_t max_open_;
    mutable std::mutex mu_;
    std::list<std::string> lru_;  // most recent first
    struct open_file {
        std::shared_ptr<handle> h;
        std::list<std::string>::iterator at;  // in lru_
        std::chrono::steady_clock::time_point used;
    };
    std::map<std::string, open_file> open_;
    // Sessions whose file was closed to make room, its WAL left for their next connection:
    // deleted when the session is unloaded first (close_unused), unless the store is stopping.
    std::set<std::string> wal_left_;
    bool stopping_ = false;
};

}  // namespace wuhu::storage::sqlite
