// The session files a SQLite store has open: one connection a session, an LRU of idle ones
// closed past max_open_files, and their WALs deleted once their session is unloaded.
#include "storage/sqlite_open_files.hpp"

#include <vector>

namespace wuhu::storage::sqlite {

std::size_t open_files::size() const {
    std::lock_guard lock(mu_);
    return open_.size();
}

std::shared_ptr<handle> open_files::acquire(const session_id& id, open_mode mode) {
    {
        std::lock_guard lock(mu_);
        if (auto it = open_.find(id.str()); it != open_.end()) {
            lru_.splice(lru_.begin(), lru_, it->second.at);
            it->second.used = std::chrono::steady_clock::now();
            return it->second.h;
        }
    }
    // Opened without the lock: other sessions' files open (and are created, with their
    // fsyncs) at the same time.
    auto h = files_.open(id, mode);
    if (!h) {
        return nullptr;
    }
    std::vector<std::shared_ptr<handle>> closing;  // closed once the lock is released
    std::lock_guard lock(mu_);
    if (auto it = open_.find(id.str()); it != open_.end()) {
        // Another thread opened it meanwhile: one handle a session (this one closes).
        lru_.splice(lru_.begin(), lru_, it->second.at);
        it->second.used = std::chrono::steady_clock::now();
        return it->second.h;
    }
    lru_.push_front(id.str());
    open_.emplace(id.str(), open_file{h, lru_.begin(), std::chrono::steady_clock::now()});
    wal_left_.erase(id.str());  // this handle closes it
    // Close the least recently used files nobody is using.
    for (auto it = std::prev(lru_.end()); open_.size() > max_open_ && it != lru_.begin();) {
        auto victim = open_.find(*it);
        auto prev = std::prev(it);
        if (victim->second.h.use_count() == 1) {
            victim->second.h->checkpoint_on_close = false;
            wal_left_.insert(*it);
            closing.push_back(std::move(victim->second.h));
            open_.erase(victim);
            lru_.erase(it);
        }
        it = prev;
    }
    return h;
}

std::shared_ptr<handle> open_files::acquire_current(const session_id& id, open_mode mode) {
    const auto path = files_.path_of(id);
    for (;;) {
        auto h = acquire(id, mode);
        if (!h || names(path, h->dev, h->ino)) {
            return h;
        }
        // A cached handle of a file that is no longer at the path (another process removed
        // the session, and perhaps created it again): drop it and open the path.
        forget(id, h);
    }
}

void open_files::forget(const session_id& id, const std::shared_ptr<handle>& h) {
    std::lock_guard lock(mu_);
    if (auto it = open_.find(id.str()); it != open_.end() && it->second.h == h) {
        lru_.erase(it->second.at);
        open_.erase(it);
    }
}

void open_files::close_unused(const session_id& id) {
    bool wal_left = false;
    std::shared_ptr<handle> closing;  // closed (checkpointed: fsyncs) once unlocked
    {
        std::lock_guard lock(mu_);
        if (auto it = open_.find(id.str()); it == open_.end()) {
            wal_left = wal_left_.erase(id.str()) > 0 && !stopping_;
        } else if (it->second.h.use_count() == 1) {
            closing = std::move(it->second.h);
            lru_.erase(it->second.at);
            open_.erase(it);
        }
    }
    if (closing) {
        retire(id, std::move(closing));
    } else if (wal_left) {
        tidy_wal(id);
    }
}

std::size_t open_files::close_idle(std::chrono::steady_clock::time_point unused_since) {
    std::vector<std::pair<std::string, std::shared_ptr<handle>>> closing;
    {
        std::lock_guard lock(mu_);
        if (stopping_) {
            return 0;
        }
        // At most 256 a call (a checkpoint and a few fsyncs each): the files of a burst of
        // sessions that went idle together close over some seconds, and the store thread that
        // closes them goes back to commits in between.
        constexpr std::size_t at_most = 256;
        for (auto it = lru_.rbegin(); it != lru_.rend() && closing.size() < at_most;) {
            auto f = open_.find(*it);
            if (f->second.used > unused_since) {
                break;  // the rest were used more recently still
            }
            if (f->second.h.use_count() != 1) {
                ++it;  // in use now
                continue;
            }
            closing.emplace_back(*it, std::move(f->second.h));
            open_.erase(f);
            it = std::make_reverse_iterator(lru_.erase(std::next(it).base()));
        }
    }
    for (auto& [key, h] : closing) {
        if (auto id = session_id::parse_key(key)) {
            retire(*id, std::move(h));
        }  // (every key here is a session's: ~handle closes it otherwise)
    }
    return closing.size();
}

void open_files::stopping() {
    std::lock_guard lock(mu_);
    stopping_ = true;
    wal_left_.clear();  // their next connection reads them back
}

void open_files::retire(const session_id& id, std::shared_ptr<handle> h) {
    {
        std::lock_guard lock(mu_);
        if (stopping_) {
            return;  // ~handle: closed with its WAL kept
        }
    }
    files_.close_deleting_wal(id, std::move(h));
}

// A file closed to make room kept its WAL, frames and working size, for its session's next
// connection. Once the session is unloaded none may come for long: the WAL is checkpointed and
// deleted now with the shared memory, as any unloaded session's are (retire), rather than left
// on disk for as long as the session stays unused.
void open_files::tidy_wal(const session_id& id) {
    std::shared_ptr<handle> h;
    try {
        h = files_.open_once(id);
    } catch (const error&) {
        return;  // removed meanwhile, or busy past the busy timeout: its next connection reads it
    }
    retire(id, std::move(h));
}

}  // namespace wuhu::storage::sqlite
