#include "app/backends.hpp"

#include "ownership/memory_lease.hpp"
#include "ownership/postgres_lease.hpp"
#include "ownership/sqlite_lease.hpp"
#include "storage/memory_store.hpp"
#include "storage/postgres_store.hpp"
#include "storage/sqlite_store.hpp"

#include <sys/resource.h>
#include <algorithm>
#include <stdexcept>

namespace wuhu::app {

namespace {

// The SQLite data directory of a sqlite:// store URL, or empty.
std::string sqlite_dir(const std::string& url) {
    const std::string sqlite = "sqlite://";
    return url.rfind(sqlite, 0) == 0 ? url.substr(sqlite.size()) : std::string();
}

bool postgres_url(const std::string& url) {
    return url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0;
}

// How many session files may stay open (three descriptors each: the file, its WAL and its
// shared memory): the soft limit of open files is raised to the hard one, and a third of it
// goes to session files, past 1,024 descriptors kept for the rest (at least 256 files, at
// most 2,000: SQLite walks a list of all the files it has open at every open, which took a
// third of the CPU of making sessions with 8,000 open). A session whose file was closed opens
// it again at its next commit.
std::size_t session_files_allowed() {
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) {
        return 256;
    }
    if (lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &lim);
        ::getrlimit(RLIMIT_NOFILE, &lim);
    }
    const rlim_t spare = lim.rlim_cur > 1024 ? (lim.rlim_cur - 1024) / 3 : 0;
    return static_cast<std::size_t>(std::clamp<rlim_t>(spare, 256, 2000));
}

}  // namespace

std::unique_ptr<storage::session_store> open_store(const std::string& url, std::size_t pool,
                                                   const std::string& synchronous,
                                                   std::size_t sqlite_open_files,
                                                   const std::string& pg_schema,
                                                   const storage::pg_timeouts& timeouts) {
    if (auto dir = sqlite_dir(url); !dir.empty()) {
        storage::sqlite_options o{dir};
        o.synchronous = synchronous == "normal" ? "NORMAL" : "FULL";
        o.max_open_files = std::min(sqlite_open_files, session_files_allowed());
        return std::make_unique<storage::sqlite_store>(o);
    }
    if (url == "memory") {
        return std::make_unique<storage::memory_store>();
    }
    if (postgres_url(url)) {
        storage::postgres_options o;
        o.dsn = url;
        o.pool_size = pool;
        o.schema = pg_schema;
        o.timeouts = timeouts;
        return std::make_unique<storage::postgres_store>(o);
    }
    throw std::invalid_argument("--store must be sqlite:///<dir>, postgresql://... or memory");
}

// `auto` (`sqlite` with a SQLite store, `postgres` with a PostgreSQL store, `memory` with the
// memory store), `sqlite` (the
// catalog of the SQLite store's data directory), `sqlite://<dir>`, `postgres` (the PostgreSQL
// store's database), or `memory` (tests only: nothing is shared, and a restarted worker hands
// out epochs its sessions refuse; refused with a persistent store unless `force_memory`).
std::unique_ptr<ownership::lease_store> open_leases(
    const std::string& lease, const std::string& store_url, bool force_memory,
    const std::string& pg_schema, const storage::pg_timeouts& timeouts) {
    if (lease == "auto") {
        return open_leases(postgres_url(store_url) ? "postgres"
                           : store_url == "memory" ? "memory"
                                                   : "sqlite",
                           store_url, force_memory || store_url == "memory", pg_schema, timeouts);
    }
    if (lease == "memory") {
        if (!force_memory && store_url != "memory") {
            throw std::invalid_argument(
                "--lease memory is for tests: with a persistent store a restarted worker's "
                "epochs start again at 1 and its sessions refuse it, and no other worker can "
                "share them; use --lease auto, or add --force-memory-lease");
        }
        return std::make_unique<ownership::memory_lease>();
    }
    if (lease == "postgres") {
        if (!postgres_url(store_url)) {
            throw std::invalid_argument("--lease postgres needs a postgresql:// store");
        }
        return std::make_unique<ownership::postgres_lease>(
            ownership::postgres_lease_options{store_url, pg_schema, {}, timeouts});
    }
    std::string dir = lease == "sqlite" ? sqlite_dir(store_url) : sqlite_dir(lease);
    if (dir.empty()) {
        throw std::invalid_argument(
            "--lease must be auto, sqlite (with a sqlite:// store), sqlite:///<dir>, postgres "
            "(with a postgresql:// store) or memory");
    }
    return std::make_unique<ownership::sqlite_lease>(dir);
}

// The lease settings the flags name (0: derived from the TTL); std::invalid_argument when a
// lease could lapse between two renewals before its owner stops serving it.
ownership::lease_settings lease_settings_of(long ttl_ms, long renew_ms, long margin_ms) {
    using ms = std::chrono::milliseconds;
    auto settings = ownership::lease_settings::for_ttl(ms(ttl_ms));
    if (renew_ms > 0) {
        settings.renew_interval = ms(renew_ms);
    }
    if (margin_ms > 0) {
        settings.stop_margin = ms(margin_ms);
    }
    if (settings.renew_interval >= settings.ttl - settings.stop_margin) {
        throw std::invalid_argument(
            "--lease-renew-ms must be shorter than --lease-ttl-ms minus --lease-stop-margin-ms "
            "(renew " + std::to_string(settings.renew_interval.count()) + " ms, ttl " +
            std::to_string(settings.ttl.count()) + " ms, stop margin " +
            std::to_string(settings.stop_margin.count()) + " ms)");
    }
    return settings;
}

}  // namespace wuhu::app
