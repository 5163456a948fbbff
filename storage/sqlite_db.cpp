#include "storage/sqlite_db.hpp"

#include "storage/errc.hpp"

#include <sys/stat.h>
#include <algorithm>
#include <chrono>
#include <thread>

namespace wuhu::storage::sqlite {

namespace {
[[noreturn]] void fail(sqlite3* db, int rc, std::string_view what) {
    throw error(
        rc, std::string(what) + ": " + (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
}
}  // namespace

stmt::~stmt() {
    sqlite3_finalize(s_);
}

stmt& stmt::bind(int i, std::int64_t v) {
    if (int rc = sqlite3_bind_int64(s_, i, v); rc != SQLITE_OK) {
        fail(db_, rc, "bind");
    }
    return *this;
}

stmt& stmt::bind(int i, std::string_view v) {
    if (int rc = sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
        rc != SQLITE_OK) {
        fail(db_, rc, "bind");
    }
    return *this;
}

stmt& stmt::bind_null(int i) {
    if (int rc = sqlite3_bind_null(s_, i); rc != SQLITE_OK) {
        fail(db_, rc, "bind");
    }
    return *this;
}

bool stmt::step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) {
        return true;
    }
    if (rc == SQLITE_DONE) {
        return false;
    }
    // Reset at once: a statement left mid-way (BEGIN IMMEDIATE that met SQLITE_BUSY stops
    // before it halts, to be retried) keeps the connection's next autocommit statements
    // from committing, and its later reset rolls them back.
    error e(rc, std::string("step: ") + sqlite3_errmsg(db_));
    sqlite3_reset(s_);
    throw e;
}

void stmt::run() {
    while (step()) {
    }
}

void stmt::reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
}

std::string_view stmt::text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    return p == nullptr
               ? std::string_view{}
               : std::string_view(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, col)));
}

db::db(const std::string& path, std::string_view synchronous, int busy_timeout_ms,
       if_missing missing, int page_size) {
    const int create = missing == if_missing::create ? SQLITE_OPEN_CREATE : 0;
    int rc = sqlite3_open_v2(path.c_str(), &db_,
                             SQLITE_OPEN_READWRITE | create | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
        std::string msg = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
        sqlite3_close(db_);
        db_ = nullptr;
        throw error(rc, "open " + path + ": " + msg);
    }
    // Before the switch to WAL: SQLite gives the WAL and the shared memory the file's mode.
    keep_private(path, 0600);
    busy_timeout_ = std::chrono::milliseconds(busy_timeout_ms);
    sqlite3_busy_handler(db_, &db::on_busy, this);
    try {
        if (page_size > 0) {
            exec("PRAGMA page_size=" + std::to_string(page_size));  // a new file only
        }
        // Before the switch to WAL, which writes a new file's header (through a rollback
        // journal, synced or not as this says).
        exec("PRAGMA synchronous=" + std::string(synchronous));
        // Switching a new file to WAL answers SQLITE_BUSY at once, without the busy handler,
        // while another process opens the same file (the workers of one host start together):
        // retry until the busy timeout.
        const auto give_up =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms);
        for (;;) {
            try {
                exec("PRAGMA journal_mode=WAL");
                break;
            } catch (const error& e) {
                if ((e.code() & 0xFF) != SQLITE_BUSY ||
                    std::chrono::steady_clock::now() >= give_up) {
                    throw;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        }
    } catch (...) {
        sqlite3_close(db_);  // the destructor does not run for a constructor that throws
        db_ = nullptr;
        throw;
    }
}

void keep_private(const std::filesystem::path& path, unsigned mode) {
    // By path, never through a descriptor of the process's own: closing one would drop the
    // fcntl locks SQLite holds on the file. A stat first: most opens change nothing.
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 07777) != mode) {
        ::chmod(path.c_str(), static_cast<mode_t>(mode));
    }
}

int db::on_busy(void* self, int attempts) {
    // SQLite's own busy timeout sleeps 1, 2, 5, 10 ms and more between attempts: a lock held
    // for the few hundred microseconds of a commit then stalls its waiter for milliseconds
    // (the lease's and the index's connections to the catalog meet at every new session).
    // 50 us, doubling to 1.6 ms.
    auto& d = *static_cast<db*>(self);
    const auto now = std::chrono::steady_clock::now();
    if (attempts == 0) {
        d.busy_since_ = now;
    }
    if (now - d.busy_since_ >= d.busy_timeout_) {
        return 0;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50 << std::min(attempts, 5)));
    return 1;
}

db::~db() {
    cache_.clear();
    sqlite3_close(db_);
}

void db::exec(const std::string& sql) {
    char* msg = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &msg);
    if (rc != SQLITE_OK) {
        std::string what = msg != nullptr ? msg : sqlite3_errstr(rc);
        sqlite3_free(msg);
        throw error(rc, sql + ": " + what);
    }
}

stmt& db::prepare(const char* sql) {
    auto it = cache_.find(sql);
    if (it == cache_.end()) {
        sqlite3_stmt* s = nullptr;
        int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr);
        if (rc != SQLITE_OK) {
            fail(db_, rc, sql);
        }
        it = cache_.emplace(sql, std::make_unique<stmt>(db_, s)).first;
    }
    it->second->reset();
    return *it->second;
}

// BEGIN and COMMIT are prepared once per connection: sqlite3_exec parses its SQL at every call
// (4% of a store thread's CPU in the turn benchmark).
transaction::transaction(db& d) : db_(d) {
    db_.prepare("BEGIN IMMEDIATE").run();
}

transaction::~transaction() {
    if (!done_) {
        sqlite3_exec(db_.raw(), "ROLLBACK", nullptr, nullptr, nullptr);
    }
}

void transaction::commit() {
    db_.prepare("COMMIT").run();
    done_ = true;
}

namespace {

std::size_t schema_version(db& d, std::size_t latest) {
    auto& q = d.prepare("PRAGMA user_version");
    q.step();
    auto applied = static_cast<std::size_t>(q.int64(0));
    q.reset();
    if (applied > latest) {
        throw error(SQLITE_CORRUPT, "schema is newer than this program");
    }
    return applied;
}

}  // namespace

void migrate(db& d, const char* const* migrations, std::size_t count) {
    while (schema_version(d, count) < count) {
        transaction tx(d);
        const auto applied = schema_version(d, count);
        if (applied < count) {
            d.exec(migrations[applied]);
            d.exec("PRAGMA user_version = " + std::to_string(applied + 1));
        }
        tx.commit();
    }
}

void migrate_part(db& d, std::string_view part, const char* const* migrations,
                  std::size_t count) {
    d.exec("CREATE TABLE IF NOT EXISTS schema_parts (part TEXT PRIMARY KEY, "
           "applied INTEGER NOT NULL) WITHOUT ROWID");
    for (;;) {
        transaction tx(d);
        auto& q = d.prepare("SELECT applied FROM schema_parts WHERE part = ?1");
        q.bind(1, part);
        const auto applied = q.step() ? static_cast<std::size_t>(q.int64(0)) : std::size_t{0};
        q.reset();
        if (applied > count) {
            throw error(SQLITE_CORRUPT, std::string(part) + " schema is newer than this program");
        }
        if (applied == count) {
            return;  // nothing written: the transaction rolls back
        }
        d.exec(migrations[applied]);
        d.prepare("INSERT INTO schema_parts (part, applied) VALUES (?1, ?2) "
                  "ON CONFLICT (part) DO UPDATE SET applied = excluded.applied")
            .bind(1, part)
            .bind(2, static_cast<std::int64_t>(applied + 1))
            .run();
        tx.commit();
    }
}

std::string new_wal_file_image(const char* const* migrations, std::size_t count, int page_size) {
    db d(":memory:", "OFF", 0, if_missing::create, page_size);
    migrate(d, migrations, count);
    sqlite3_int64 size = 0;
    unsigned char* bytes = sqlite3_serialize(d.raw(), "main", &size, 0);
    if (bytes == nullptr || size < 100) {
        sqlite3_free(bytes);
        throw error(SQLITE_NOMEM, "serialize a new database file");
    }
    std::string image(reinterpret_cast<const char*>(bytes), static_cast<std::size_t>(size));
    sqlite3_free(bytes);
    image[18] = 2;  // file format write version: WAL
    image[19] = 2;  // file format read version: WAL
    return image;
}

boost::system::error_code storage_error(const error& e) {
    switch (e.code() & 0xFF) {
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB:
        case SQLITE_FORMAT:
            return errc::corrupt;
        default:
            return errc::unavailable;
    }
}

}  // namespace wuhu::storage::sqlite
