#include "storage/sqlite_store.hpp"

#include "storage/sqlite_catalog.hpp"
#include "storage/sqlite_files.hpp"
#include "storage/sqlite_log.hpp"
#include "storage/sqlite_open_files.hpp"

#include <charconv>
#include <chrono>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <thread>

namespace wuhu::storage {

using sqlite::is_tombstone;
using sqlite::meta;
using sqlite::set_meta;
using sqlite::tombstone_epoch;

namespace {

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

sqlite_store::sqlite_store(sqlite_options options)
    : files_(std::make_unique<sqlite::session_files>(std::move(options))),
      catalog_(std::make_unique<sqlite::catalog>(files_->options().data_dir / "catalog.sqlite",
                                                 files_->options().busy_timeout_ms)),
      open_(std::make_unique<sqlite::open_files>(*files_, files_->options().max_open_files)) {
    check_after_reboot();
}

void sqlite_store::check_after_reboot() {
    const auto& options = files_->options();
    std::string boot = "unknown";
    if (std::ifstream f(options.boot_id_file); f) {
        std::getline(f, boot);
    }
    if (catalog_->boot_id() == boot && boot != "unknown") {
        return;
    }
    const auto booted = boot_time();
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(options.data_dir / "sessions", ec)) {
        const auto& path = e.path();
        if (const auto name = path.filename().string();
            name.starts_with(".") && name.ends_with(sqlite::new_file_suffix)) {
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
            auto h = open_->acquire(*id, open_mode::existing);
            if (!h) {
                continue;
            }
            std::string epoch, has_work, paused;
            std::int64_t timers = 0;
            {
                std::lock_guard file(h->mu);
                if (!h->db) {
                    continue;
                }
                sqlite::read_transaction read(*h->db);
                epoch = meta(*h->db, "epoch");
                has_work = meta(*h->db, "has_work");
                paused = meta(*h->db, "paused");
                auto& q = h->db->prepare("SELECT count(*) FROM timers");
                timers = q.step() ? q.int64(0) : 0;
                q.reset();
                // Calls waiting for approval have deadlines, which the row's due time holds
                // as it holds the timers': due at once, like a timer, the load puts it right.
                // (Absent in files whose last commit came before it was kept: 0.)
                const auto approvals = meta(*h->db, "approvals");
                std::int64_t waiting = 0;
                std::from_chars(approvals.data(), approvals.data() + approvals.size(), waiting);
                timers += waiting;
            }
            h.reset();
            open_->close_unused(*id);
            ++checked_at_start_;
            if (epoch == tombstone_epoch) {
                continue;
            }
            const auto at = lease_epoch{std::stoull(epoch.empty() ? "0" : epoch)};
            raised_at_start_ +=
                catalog_->raise(*id, at, has_work == "1", paused == "1", timers) ? 1 : 0;
        } catch (const sqlite::error&) {
            // A file that cannot be read now is checked when it is loaded.
        }
    }
    catalog_->set_boot_id(boot);
}

sqlite_store::~sqlite_store() {
    catalog_->flush();
}

std::filesystem::path sqlite_store::path_of(const session_id& id) const {
    return files_->path_of(id);
}

std::size_t sqlite_store::open_files() const {
    return open_->size();
}

std::size_t sqlite_store::catalog_failures() const {
    return catalog_->failures();
}

std::size_t sqlite_store::close_idle(std::chrono::steady_clock::time_point unused_since) {
    return open_->close_idle(unused_since);
}

void sqlite_store::stopping() {
    open_->stopping();
}

result<std::vector<catalog_entry>> sqlite_store::sessions(const catalog_query& q) {
    return catalog_->sessions(q);
}

result<std::unique_ptr<session_log>> sqlite_store::do_open(const session_id& id, lease_epoch epoch,
                                                           open_mode mode) {
    try {
        const auto give_up = std::chrono::steady_clock::now() +
                             std::chrono::milliseconds(files_->options().busy_timeout_ms);
        std::optional<lease_epoch> floor = catalog_->removed_at(id);
        if (floor && epoch <= *floor) {
            return errc::lease_lost;  // removed at this epoch or later: create nothing
        }
        bool created = false;
        for (;;) {
            auto h = open_->acquire_current(id, mode);
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
                open_->forget(id, h);
                if (std::chrono::steady_clock::now() >= give_up) {
                    files_->unlink_if_same(id, *h);
                }
                h->db.reset();
                lock.unlock();
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
                continue;
            }
            // Again under the file's write lock, so it is ordered with a removal of this file.
            floor = catalog_->removed_at(id);
            if (floor && epoch <= *floor) {
                if (meta(*h->db, "epoch") == "0") {
                    // This open created the file after the removal: take it back.
                    set_meta(*h->db, "epoch", tombstone_epoch);
                    tx.commit();
                    open_->forget(id, h);
                    h->db.reset();
                    files_->unlink_if_same(id, *h);
                }
                return errc::lease_lost;  // removed at this epoch or later
            }
            auto stored = std::stoull(meta(*h->db, "epoch"));
            if (stored > epoch.value) {
                return errc::lease_lost;
            }
            // Never fenced: nothing was ever committed to it (every commit is under an epoch
            // an open wrote first).
            created = stored == 0;
            set_meta(*h->db, "epoch", std::to_string(epoch.value));
            tx.commit();
            files_->synced_from_now(*h);
            break;
        }
        catalog_->note_opened(id, epoch, floor.has_value());
        auto log = std::make_unique<sqlite_log>(*files_, *open_, *catalog_, id, epoch);
        log->set_created(created);
        return std::unique_ptr<session_log>(std::move(log));
    } catch (const sqlite::error& e) {
        return sqlite::storage_error(e);
    } catch (const std::logic_error&) {
        return errc::corrupt;  // an epoch that is not a number
    }
}

result<void> sqlite_store::remove(const session_id& id, lease_epoch epoch) {
    try {
        auto h = open_->acquire_current(id, open_mode::existing);
        if (!h) {
            catalog_->note_removed(id, epoch);
            return {};
        }
        std::lock_guard lock(h->mu);  // after an operation in progress
        if (!h->db) {
            catalog_->note_removed(id, epoch);
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
        catalog_->note_removed(id, epoch);
        // The tombstone into the file itself (best effort: readers elsewhere may hold the WAL),
        // so that whoever opens the path before it is unlinked sees it without the WAL.
        sqlite3_wal_checkpoint_v2(h->db->raw(), "main", SQLITE_CHECKPOINT_TRUNCATE, nullptr,
                                  nullptr);
        open_->forget(id, h);
        h->db.reset();
        files_->unlink_if_same(id, *h);
        return {};
    } catch (const sqlite::error& e) {
        return sqlite::storage_error(e);
    } catch (const std::logic_error&) {
        return errc::corrupt;
    }
}

result<std::optional<session_state>> sqlite_store::read(const session_id& id) {
    std::shared_ptr<sqlite::handle> h;
    try {
        h = open_->acquire_current(id, open_mode::existing);
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
                    auto st = sqlite::load_rows(*h->db);
                    out = st ? result<std::optional<session_state>>(std::move(*st))
                             : result<std::optional<session_state>>(st.error());
                }
            }
        }
        h.reset();
        open_->close_unused(id);  // nobody here owns it: its file is not kept open for it
        return out;
    } catch (const sqlite::error& e) {
        if (h) {
            h.reset();
            open_->close_unused(id);
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
