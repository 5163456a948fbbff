// Thin RAII wrappers over the SQLite C API, for the SQLite store and its benchmark.
// A `db` is used by one thread at a time (its owner serializes access).
#pragma once

#include <sqlite3.h>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace wuhu::storage::sqlite {

// An SQLite failure: the store maps it to errc::unavailable (busy, IO) or errc::corrupt.
class error : public std::runtime_error {
  public:
    error(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
    int code() const { return code_; }

  private:
    int code_;
};

class stmt {
  public:
    stmt(sqlite3* db, sqlite3_stmt* s) : db_(db), s_(s) {}
    stmt(const stmt&) = delete;
    ~stmt();

    stmt& bind(int i, std::int64_t v);
    stmt& bind(int i, std::string_view v);
    stmt& bind_null(int i);
    // Steps once: true when a row is available.
    bool step();
    // Steps to completion (for statements without rows).
    void run();
    void reset();

    std::int64_t int64(int col) const { return sqlite3_column_int64(s_, col); }
    std::string_view text(int col) const;
    bool is_null(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }

  private:
    sqlite3* db_;
    sqlite3_stmt* s_;
};

// What opening a file that does not exist does.
enum class if_missing { create, fail };

class db {
  public:
    // Opens the file at `path` (creating it if missing, unless `missing` says to fail: SQLite's
    // SQLITE_CANTOPEN): no URI parsing, read-write, no mutex (one user at a time). Applies the
    // pragmas: WAL, the given synchronous mode, busy timeout; and, for a file it creates,
    // `page_size` (0: SQLite's default).
    db(const std::string& path, std::string_view synchronous, int busy_timeout_ms,
       if_missing missing = if_missing::create, int page_size = 0);
    db(const db&) = delete;
    ~db();

    void exec(const std::string& sql);
    // A cached prepared statement, reset and with bindings cleared.
    stmt& prepare(const char* sql);
    sqlite3* raw() { return db_; }

  private:
    // Waits for another connection's lock in short sleeps, up to the busy timeout.
    static int on_busy(void* self, int attempts);

    sqlite3* db_ = nullptr;
    std::map<const char*, std::unique_ptr<stmt>> cache_;
    std::chrono::milliseconds busy_timeout_{0};
    std::chrono::steady_clock::time_point busy_since_{};
};

// Makes `path` (a file or a directory, if it exists) have exactly `mode` (0600, 0700), whatever
// the umask: the data directory and the session files are the worker's user's alone. Opening
// a db does it for its file (and so for its WAL and shared memory, which SQLite makes with the
// file's mode).
void keep_private(const std::filesystem::path& path, unsigned mode);

// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed without commit().
class transaction {
  public:
    explicit transaction(db& d);
    transaction(const transaction&) = delete;
    ~transaction();
    void commit();

  private:
    db& db_;
    bool done_ = false;
};

// BEGIN (deferred: a consistent snapshot for reads) ... COMMIT when destroyed.
class read_transaction {
  public:
    explicit read_transaction(db& d) : db_(d) { db_.exec("BEGIN"); }
    read_transaction(const read_transaction&) = delete;
    ~read_transaction() { sqlite3_exec(db_.raw(), "COMMIT", nullptr, nullptr, nullptr); }

  private:
    db& db_;
};

// Applies the versioned schema: PRAGMA user_version is the number of `migrations` applied.
// Several processes may open a fresh file at once (the workers of one host share the
// catalog): each step re-reads the version under the write lock, so a step another process
// applied meanwhile is not applied twice. A file of a newer schema is SQLITE_CORRUPT. Throws
// sqlite::error.
void migrate(db& d, const char* const* migrations, std::size_t count);

// As migrate(), for another owner of tables in the same file (the SQLite lease's tables in the
// catalog, ownership/sqlite_lease.cpp): the number of `part`'s migrations applied is its row
// of the `schema_parts` table, not user_version.
void migrate_part(db& d, std::string_view part, const char* const* migrations, std::size_t count);

// The bytes of a new database file with `migrations` applied, pages of `page_size` (0: SQLite's
// default), in WAL mode: written to a path and opened, it is what opening a missing path and
// migrating it would have made, without a rollback journal created and deleted on the way.
// (The image is made in memory by SQLite; its header's read and write versions are then set to
// 2, which is what switching a file to WAL does.) Throws sqlite::error.
std::string new_wal_file_image(const char* const* migrations, std::size_t count, int page_size);

// What a store operation answers for an SQLite failure: corrupt for damaged data, unavailable
// for the rest (busy, IO: the outcome is unknown).
boost::system::error_code storage_error(const error& e);

}  // namespace wuhu::storage::sqlite
