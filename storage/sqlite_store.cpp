#include "storage/sqlite_store.hpp"

#include "storage/sqlite_internal.hpp"

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <thread>

namespace wuhu::storage {

using sqlite_files::files_lock;
using sqlite_files::meta;
using sqlite_files::names;
using sqlite_files::set_meta;
using sqlite_files::sync_database;
using sqlite_files::unlink_if_same;

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

// A removed session's file keeps a tombstone until it is unlinked: every old handle fails its
// epoch check (no epoch is higher), and open() knows the file is on its way out.
constexpr std::string_view tombstone_epoch = "9223372036854775807";

bool is_tombstone(sqlite::db& db) {
    return meta(db, "epoch") == tombstone_epoch;
}

// When the machine booted (`btime` in /proc/stat), as a file time; the earliest one when
// unknown.
std::filesystem::file_time_type boot_time() {
    std::ifstream stat("/proc/stat");
    for (std::string key; stat >> key;) {
        if (std::int64_t seconds = 0; key == "btime" && stat >> seconds) {
            return std::chrono::file_clock::from_sys(
                std::chrono::sys_seconds{std::chrono::seconds{seconds}});
        }
        stat.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    return std::filesystem::file_time_type::min();
}

}  // namespace

sqlite_store::sqlite_store(sqlite_options options) : options_(std::move(options)) {
    if (options_.synchronous != "FULL" && options_.synchronous != "NORMAL" &&
        options_.synchronous != "EXTRA") {
        throw std::invalid_argument("sqlite synchronous must be FULL, NORMAL or EXTRA");
    }
    std::filesystem::create_directories(options_.data_dir / "sessions");
    sqlite::keep_private(options_.data_dir, 0700);
    sqlite::keep_private(options_.data_dir / "sessions", 0700);
    new_file_ = sqlite::new_wal_file_image(session_migrations, std::size(session_migrations),
                                           options_.page_size);
    // The index rows are hints: no commit of theirs waits for an fsync (see the header).
    catalog_ = std::make_unique<sqlite::db>((options_.data_dir / "catalog.sqlite").string(),
                                            "NORMAL", options_.busy_timeout_ms);
    sqlite::migrate_catalog(*catalog_);
    check_after_reboot();
}

void sqlite_store::check_after_reboot() {
    std::string boot = "unknown";
    if (std::ifstream f(options_.boot_id_file); f) {
        std::getline(f, boot);
    }
    std::string seen;
    {
        std::lock_guard lock(catalog_mu_);
        auto& q = catalog_->prepare("SELECT value FROM store_state WHERE key = 'boot_id'");
        seen = q.step() ? std::string(q.text(0)) : std::string();
        q.reset();
    }
    if (seen == boot && boot != "unknown") {
        return;
    }
    const auto booted = boot_time();
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(options_.data_dir / "sessions", ec)) {
        const auto& path = e.path();
        if (const auto name = path.filename().string();
            name.starts_with(".") && name.ends_with(sqlite_files::new_file_suffix)) {
            // A new file its process never named (killed between the two): one written before
            // the machine booted, or a minute ago (such a name lives while its open waits for
            // the files lock, normally well under a second; a younger one may be another
            // worker's of this host, starting at once).
            std::error_code old;
            const auto written = std::filesystem::last_write_time(path, old);
            if (!old &&
                (written < booted || written < std::filesystem::file_time_type::clock::now() -
                                                   std::chrono::minutes(1))) {
                std::filesystem::remove(path, old);
            }
            continue;
        }
        if (path.extension() != ".sqlite") {
            continue;
        }
        auto id = session_id::parse_key(path.stem().string());
        if (!id) {
            continue;
        }
        try {
            auto h = acquire(*id, open_mode::existing);
            if (!h) {
                continue;
            }
            std::string epoch, has_work;
            std::int64_t timers = 0;
            {
                std::lock_guard file(h->mu);
                if (!h->db) {
                    continue;
                }
                sqlite::read_transaction read(*h->db);
                epoch = meta(*h->db, "epoch");
                has_work = meta(*h->db, "has_work");
                auto& q = h->db->prepare("SELECT count(*) FROM timers");
                timers = q.step() ? q.int64(0) : 0;
                q.reset();
            }
            h.reset();
            close_unused(*id);
            ++checked_at_start_;
            if (epoch == tombstone_epoch) {
                continue;
            }
            // Only ever raised: a row that says too much costs the sweep a load, which
            // rewrites it; one that says too little would hide a session with work. A session
            // with timers is due at once (a lost row may have held an earlier due time): its
            // load rewrites the row with the real one.
            std::lock_guard lock(catalog_mu_);
            catalog_
                ->prepare(
                    "INSERT INTO sessions (id, epoch, has_work, timers, next_timer) "
                    "VALUES (?1, ?2, ?3, ?4, CASE WHEN ?4 > 0 THEN 0 END) "
                    "ON CONFLICT (id) DO UPDATE SET has_work = max(has_work, excluded.has_work), "
                    "timers = max(timers, excluded.timers), next_timer = CASE WHEN "
                    "excluded.timers > 0 THEN 0 ELSE next_timer END "
                    "WHERE excluded.has_work > has_work OR (excluded.timers > 0 AND "
                    "(next_timer IS NULL OR next_timer > 0))")
                .bind(1, id->str())
                .bind(2, static_cast<std::int64_t>(std::stoull(epoch.empty() ? "0" : epoch)))
                .bind(3, has_work == "1" ? 1 : 0)
                .bind(4, timers)
                .run();
            raised_at_start_ += static_cast<std::size_t>(sqlite3_changes(catalog_->raw()));
        } catch (const sqlite::error&) {
            // A file that cannot be read now is checked when it is loaded.
        }
    }
    std::lock_guard lock(catalog_mu_);
    catalog_->exec("PRAGMA synchronous=FULL");
    catalog_
        ->prepare(
            "INSERT INTO store_state (key, value) VALUES ('boot_id', ?1) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value")
        .bind(1, boot)
        .run();
    catalog_->exec("PRAGMA synchronous=NORMAL");
}

sqlite_store::~sqlite_store() {
    std::lock_guard lock(catalog_mu_);
    write_unwritten();
}

std::filesystem::path sqlite_store::path_of(const session_id& id) const {
    return options_.data_dir / "sessions" / (id.str() + ".sqlite");
}

std::filesystem::path sqlite_store::lock_file() const {
    return options_.data_dir / "sessions.lock";
}

std::size_t sqlite_store::open_files() const {
    std::lock_guard lock(mu_);
    return open_.size();
}

void sqlite_store::close_unused(const session_id& id) {
    bool wal_left = false;
    std::shared_ptr<handle> closing;  // closed (checkpointed: fsyncs) once unlocked
    {
        std::lock_guard lock(mu_);
        if (auto it = open_.find(id.str()); it == open_.end()) {
            wal_left = wal_left_.erase(id.str()) > 0 && !stopping_;
        } else if (it->second.first.use_count() == 1) {
            closing = std::move(it->second.first);
            lru_.erase(it->second.second);
            open_.erase(it);
        }
    }
    if (closing) {
        retire(id, std::move(closing));
    } else if (wal_left) {
        tidy_wal(id);
    }
}

void sqlite_store::stopping() {
    std::lock_guard lock(mu_);
    stopping_ = true;
    wal_left_.clear();  // their next connection reads them back
}

std::shared_ptr<sqlite_store::handle> sqlite_store::acquire(const session_id& id, open_mode mode) {
    {
        std::lock_guard lock(mu_);
        if (auto it = open_.find(id.str()); it != open_.end()) {
            lru_.splice(lru_.begin(), lru_, it->second.second);
            return it->second.first;
        }
    }
    // Opened without the lock: other sessions' files open (and are created, with their
    // fsyncs) at the same time. A new file is written and synced before the files lock is
    // taken: an unload or a removal that waits for the lock exclusive waits for no fsync.
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
        } catch (const sqlite::error& e) {
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
    std::vector<std::shared_ptr<handle>> closing;  // closed once the lock is released
    std::lock_guard lock(mu_);
    if (auto it = open_.find(id.str()); it != open_.end()) {
        // Another thread opened it meanwhile: one handle a session (this one closes).
        lru_.splice(lru_.begin(), lru_, it->second.second);
        return it->second.first;
    }
    lru_.push_front(id.str());
    open_.emplace(id.str(), std::make_pair(h, lru_.begin()));
    wal_left_.erase(id.str());  // this handle closes it
    // Close the least recently used files nobody is using.
    for (auto it = std::prev(lru_.end());
         open_.size() > options_.max_open_files && it != lru_.begin();) {
        auto victim = open_.find(*it);
        auto prev = std::prev(it);
        if (victim->second.first.use_count() == 1) {
            victim->second.first->checkpoint_on_close = false;
            wal_left_.insert(*it);
            closing.push_back(std::move(victim->second.first));
            open_.erase(victim);
            lru_.erase(it);
        }
        it = prev;
    }
    return h;
}

std::shared_ptr<sqlite_store::handle> sqlite_store::open_file(const std::filesystem::path& path,
                                                              open_mode mode,
                                                              std::filesystem::path* prepared) {
    // A new file is written whole from new_file_, synced, and then given its name; its WAL's
    // header, a first frame and the fencing commit are written without a sync
    // (synced_from_now). The first commit of a command syncs the WAL with all of them, and
    // SQLite syncs the directory (which names the file) with the first sync of every WAL it
    // opens. No rollback journal is made and deleted on the way (an inode allocated and
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
    // Another process's file is opened as any existing one: it may be in use already.
    const bool fresh =
        missing && made != new_file::made_elsewhere && options_.synchronous != "NORMAL";
    auto h = std::make_shared<handle>();
    h->db = std::make_unique<sqlite::db>(
        path.string(), fresh ? "OFF" : options_.synchronous, options_.busy_timeout_ms,
        mode == open_mode::create ? sqlite::if_missing::create : sqlite::if_missing::fail,
        options_.page_size);
    // A removed session's files are unlinked while other processes may still have them open:
    // no connection may then delete a WAL or shared-memory file by name when it closes (it
    // would be the new session's). A WAL left behind is truncated on close (~handle); an
    // unloaded session's goes with its shared memory (retire).
    int persist = 1;
    sqlite3_file_control(h->db->raw(), "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        throw sqlite::error(SQLITE_CANTOPEN, "stat " + path.string() + ": removed while opened");
    }
    h->dev = st.st_dev;
    h->ino = st.st_ino;
    sqlite::migrate(*h->db, session_migrations, std::size(session_migrations));
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
// before it (and the directory that names the file and its WAL, the WAL's first sync). A crash
// before then leaves a file at an older epoch, which the next owner's open fences again.
void sqlite_store::synced_from_now(handle& h) {
    if (h.fence_unsynced) {
        h.fence_unsynced = false;
        h.db->exec("PRAGMA synchronous=" + options_.synchronous);
    }
}

void sqlite_store::forget(const session_id& id, const std::shared_ptr<handle>& h) {
    std::lock_guard lock(mu_);
    if (auto it = open_.find(id.str()); it != open_.end() && it->second.first == h) {
        lru_.erase(it->second.second);
        open_.erase(it);
    }
}

std::shared_ptr<sqlite_store::handle> sqlite_store::acquire_current(const session_id& id,
                                                                    open_mode mode) {
    const auto path = path_of(id);
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

result<std::unique_ptr<session_log>> sqlite_store::do_open(const session_id& id, lease_epoch epoch,
                                                           open_mode mode) {
    try {
        const auto give_up =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.busy_timeout_ms);
        std::optional<lease_epoch> floor = removed_at(id);
        if (floor && epoch <= *floor) {
            return errc::lease_lost;  // removed at this epoch or later: create nothing
        }
        for (;;) {
            auto h = acquire_current(id, mode);
            if (!h) {
                return errc::not_found;
            }
            std::unique_lock lock(h->mu);
            if (!h->db) {
                continue;  // removed meanwhile: open the path again
            }
            sqlite::transaction tx(*h->db);
            if (is_tombstone(*h->db)) {
                // Removed: its remover unlinks it next. Open the file at the path again (a
                // new one once it is unlinked). If the remover died before unlinking, this
                // owner (a later epoch than the remover's) finishes the removal.
                tx.commit();
                forget(id, h);
                if (std::chrono::steady_clock::now() >= give_up) {
                    unlink_if_same(lock_file(), path_of(id), h->dev, h->ino);
                }
                h->db.reset();
                lock.unlock();
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
                continue;
            }
            // Again under the file's write lock, so it is ordered with a removal of this file.
            floor = removed_at(id);
            if (floor && epoch <= *floor) {
                if (meta(*h->db, "epoch") == "0") {
                    // This open created the file after the removal: take it back.
                    set_meta(*h->db, "epoch", tombstone_epoch);
                    tx.commit();
                    forget(id, h);
                    h->db.reset();
                    unlink_if_same(lock_file(), path_of(id), h->dev, h->ino);
                }
                return errc::lease_lost;  // removed at this epoch or later
            }
            auto stored = std::stoull(meta(*h->db, "epoch"));
            if (stored > epoch.value) {
                return errc::lease_lost;
            }
            set_meta(*h->db, "epoch", std::to_string(epoch.value));
            tx.commit();
            synced_from_now(*h);
            break;
        }
        note_opened(id, epoch, floor.has_value());
        return sqlite_files::make_log(*this, id, epoch);
    } catch (const sqlite::error& e) {
        return sqlite::storage_error(e);
    } catch (const std::logic_error&) {
        return errc::corrupt;  // an epoch that is not a number
    }
}

result<void> sqlite_store::remove(const session_id& id, lease_epoch epoch) {
    try {
        auto h = acquire_current(id, open_mode::existing);
        if (!h) {
            note_removed(id, epoch);
            return {};
        }
        std::lock_guard lock(h->mu);  // after an operation in progress
        if (!h->db) {
            note_removed(id, epoch);
            return {};  // removed meanwhile
        }
        {
            sqlite::transaction tx(*h->db);
            if (!is_tombstone(*h->db)) {
                if (std::stoull(meta(*h->db, "epoch")) > epoch.value) {
                    return errc::lease_lost;
                }
                // The fence first, durable: from here on no handle of this file, in any
                // process, commits again.
                set_meta(*h->db, "epoch", tombstone_epoch);
            }
            tx.commit();
        }
        note_removed(id, epoch);
        // The tombstone into the file itself (best effort: readers elsewhere may hold the WAL),
        // so that whoever opens the path before it is unlinked sees it without the WAL.
        sqlite3_wal_checkpoint_v2(h->db->raw(), "main", SQLITE_CHECKPOINT_TRUNCATE, nullptr,
                                  nullptr);
        forget(id, h);
        h->db.reset();
        unlink_if_same(lock_file(), path_of(id), h->dev, h->ino);
        return {};
    } catch (const sqlite::error& e) {
        return sqlite::storage_error(e);
    } catch (const std::logic_error&) {
        return errc::corrupt;
    }
}

result<std::optional<session_state>> sqlite_store::read(const session_id& id) {
    std::shared_ptr<handle> h;
    try {
        h = acquire_current(id, open_mode::existing);
        if (!h) {
            return std::optional<session_state>{};
        }
        result<std::optional<session_state>> out = std::optional<session_state>{};
        {
            std::lock_guard lock(h->mu);  // after an operation of this process in progress
            if (h->db) {
                // Not fenced: no epoch is checked or written. A removed file's tombstone
                // reads as no session.
                sqlite::read_transaction read(*h->db);
                if (!is_tombstone(*h->db)) {
                    auto st = sqlite_files::load_rows(*h->db);
                    out = st ? result<std::optional<session_state>>(std::move(*st))
                             : result<std::optional<session_state>>(st.error());
                }
            }
        }
        h.reset();
        close_unused(id);  // nobody here owns it: its file is not kept open for it
        return out;
    } catch (const sqlite::error& e) {
        if (h) {
            h.reset();
            close_unused(id);
        }
        return sqlite::storage_error(e);
    }
}

result<bool> sqlite_store::exists(const session_id& id) {
    std::error_code ec;
    const bool there = std::filesystem::exists(path_of(id), ec);
    if (ec) {
        return errc::unavailable;
    }
    return there;
}

}  // namespace wuhu::storage
