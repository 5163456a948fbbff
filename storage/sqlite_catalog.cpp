// The SQLite store's catalog (sqlite_catalog.hpp): its schema, the index rows written behind the
// commits, the removal floors, and the boot id.
#include "storage/sqlite_catalog.hpp"

#include <algorithm>
#include <limits>

namespace wuhu::storage::sqlite {

namespace {

const char* const catalog_migrations[] = {
    R"(CREATE TABLE sessions (id TEXT PRIMARY KEY, has_work INTEGER NOT NULL DEFAULT 0)
       WITHOUT ROWID;)",
    // Created the lease tables, which ownership/sqlite_lease.cpp now migrates itself (a
    // catalog that has them keeps them); kept as a step so that the versions stay.
    "SELECT 1;",
    R"(ALTER TABLE sessions ADD COLUMN has_timers INTEGER NOT NULL DEFAULT 0;)",
    // The epoch each removal ran at: opens at that epoch or older are refused.
    R"(CREATE TABLE removed (id TEXT PRIMARY KEY, epoch INTEGER NOT NULL) WITHOUT ROWID;)",
    // The index of the sweep and the fleet view (session/summary.hpp), written at the epoch of
    // the commit it describes. A timer's due time was not kept before: 0 lets the sweep load
    // the session, and the load writes the row again.
    R"(ALTER TABLE sessions ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
       ALTER TABLE sessions ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
       ALTER TABLE sessions ADD COLUMN lane_system INTEGER NOT NULL DEFAULT 0;
       ALTER TABLE sessions ADD COLUMN lane_steer INTEGER NOT NULL DEFAULT 0;
       ALTER TABLE sessions ADD COLUMN lane_follow_up INTEGER NOT NULL DEFAULT 0;
       ALTER TABLE sessions ADD COLUMN timers INTEGER NOT NULL DEFAULT 0;
       ALTER TABLE sessions ADD COLUMN next_timer INTEGER;
       ALTER TABLE sessions ADD COLUMN last_activity INTEGER NOT NULL DEFAULT 0;
       UPDATE sessions SET timers = 1, next_timer = 0 WHERE has_timers = 1;
       ALTER TABLE sessions DROP COLUMN has_timers;
       CREATE INDEX sessions_has_work ON sessions (id) WHERE has_work = 1;
       CREATE INDEX sessions_next_timer ON sessions (next_timer) WHERE next_timer IS NOT NULL;)",
    // The store's own facts: the boot id of the machine that last opened the catalog.
    R"(CREATE TABLE store_state (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;)",
    // Issue 33: calls waiting for approval, and the ledger's cost and tokens (0 in a row written
    // before: the session's next commit or load writes them).
    R"(ALTER TABLE sessions ADD COLUMN approvals INTEGER NOT NULL DEFAULT 0;
       ALTER TABLE sessions ADD COLUMN cost INTEGER NOT NULL DEFAULT 0;
       ALTER TABLE sessions ADD COLUMN tokens INTEGER NOT NULL DEFAULT 0;
       CREATE INDEX sessions_cost ON sessions (cost DESC, id);)",
};

// The index rows' statements. Each is one constant: the statement cache is keyed by the
// text's address.
#define WUHU_INDEX_ROW                                                                           \
    "SELECT id, has_work, paused, lane_system, lane_steer, lane_follow_up, timers, next_timer, " \
    "last_activity, approvals, cost, tokens FROM sessions "
constexpr const char* row_of = WUHU_INDEX_ROW "WHERE id = ?1";
constexpr const char* rows_after = WUHU_INDEX_ROW "WHERE id > ?1 ORDER BY id";
constexpr const char* working_after = WUHU_INDEX_ROW "WHERE has_work = 1 AND id > ?1 ORDER BY id";
constexpr const char* by_cost_after =
    WUHU_INDEX_ROW "WHERE cost < ?2 OR (cost = ?2 AND id > ?1) ORDER BY cost DESC, id";
// Each half searches its partial index: the catalog has no statistics (ANALYZE), and without
// them SQLite walked the primary key for the timers' half, every session's row each sweep
// round (an idle worker holding 100,000 SQLite sessions: 0.18% of a core with that walk, 0.07%
// without).
constexpr const char* needing_owner_after = WUHU_INDEX_ROW
    "INDEXED BY sessions_has_work WHERE has_work = 1 AND paused = 0 AND id > ?1 "
    "UNION " WUHU_INDEX_ROW
    "INDEXED BY sessions_next_timer WHERE next_timer <= ?2 AND id > ?1 ORDER BY id";
#undef WUHU_INDEX_ROW

}  // namespace

std::string_view needing_owner_statement() {
    return needing_owner_after;
}

namespace {

// A count kept in an INTEGER column (a signed 64-bit one): clamped.
std::int64_t as_int64(std::uint64_t n) {
    return static_cast<std::int64_t>(
        std::min<std::uint64_t>(n, static_cast<std::uint64_t>(INT64_MAX)));
}

// The catalog_entry of a row selected by one of the statements above, or nullopt if its id is
// not one.
std::optional<catalog_entry> read_entry(const stmt& q) {
    auto sid = session_id::parse_key(q.text(0));
    if (!sid) {
        return std::nullopt;
    }
    session::session_summary sum;
    sum.has_work = q.int64(1) != 0;
    sum.paused = q.int64(2) != 0;
    for (std::size_t i = 0; i < sum.lanes.size(); ++i) {
        sum.lanes[i] = static_cast<std::uint32_t>(q.int64(static_cast<int>(3 + i)));
    }
    sum.timers = static_cast<std::uint32_t>(q.int64(6));
    if (!q.is_null(7)) {
        sum.next_timer = unix_ms{q.int64(7)};
    }
    sum.last_activity = unix_ms{q.int64(8)};
    sum.approvals = static_cast<std::uint32_t>(q.int64(9));
    sum.cost = static_cast<std::uint64_t>(q.int64(10));
    sum.tokens = static_cast<std::uint64_t>(q.int64(11));
    return catalog_entry{*sid, sum};
}

}  // namespace

// The index rows are hints: no commit of theirs waits for an fsync (sqlite_store.hpp).
catalog::catalog(const std::filesystem::path& file, int busy_timeout_ms)
    : db_(file.string(), "NORMAL", busy_timeout_ms) {
    migrate(db_, catalog_migrations, std::size(catalog_migrations));
}

catalog::~catalog() {
    flush();
}

void catalog::flush() {
    std::lock_guard lock(mu_);
    write_unwritten();
}

namespace {

// Whether `a` says more than `b` of what the recovery sweep reads (sessions with work and not
// paused, due timers): work, not paused, more timers, one due earlier.
bool says_more(const session::session_summary& a, const session::session_summary& b) {
    return (a.has_work && !b.has_work) || (!a.paused && b.paused) || a.timers > b.timers ||
           (a.next_timer && (!b.next_timer || *a.next_timer < *b.next_timer));
}

bool says_something(const session::session_summary& s) {
    return s.has_work || s.timers > 0;
}

}  // namespace

void catalog::note(const session_id& id, lease_epoch epoch, const session::session_summary& sum,
                   bool raise) {
    std::lock_guard lock(mu_);
    auto& row = unwritten_[id.str()];
    if (row.first <= epoch) {
        row = {epoch, sum};
    }
    if (!raise) {
        if (unwritten_.size() >= catalog::max_unwritten && !write_failed_) {
            write_unwritten();  // one transaction of a bounded length
        }
        return;
    }
    const auto written = row;  // this note's, or a newer epoch's kept
    if (write_failed_) {
        // A raise kept by a failed write must not wait for a read: every row goes.
        write_unwritten();
    } else if (auto it = raised_.find(id.str()); it != raised_.end() && it->second.first == epoch &&
                                                 !says_more(sum, it->second.second)) {
        return;  // the row says as much already
    } else {
        // This row alone: the others (lowered, or columns the sweep does not read) wait for a
        // read, which writes them first (a row written lowered would need its next raise).
        auto at = unwritten_.find(id.str());
        write(at, std::next(at));
    }
    // Known from now on as this process wrote it, if it was written (a raise, with its
    // session loaded here: write() keeps the entry as the rows it writes later, or drops it).
    if (!unwritten_.contains(id.str()) && says_something(written.second)) {
        raised_.insert_or_assign(id.str(), written);
    }
}

void catalog::note_loaded(const session_id& id, lease_epoch epoch,
                          const session::session_summary& sum) {
    std::optional<catalog_entry> stored;
    try {
        std::lock_guard lock(mu_);
        auto& q = db_.prepare(row_of);
        q.bind(1, id.str());
        if (q.step()) {
            stored = read_entry(q);
        }
        q.reset();
    } catch (const error&) {
        return;  // a hint: the next commit writes it
    }
    if (!stored || stored->summary != sum) {
        {
            std::lock_guard lock(mu_);
            raised_.erase(id.str());  // the row is not what this process wrote
        }
        note(id, epoch, sum, true);
    }
}

void catalog::write_unwritten(const session_id& id) {
    std::lock_guard lock(mu_);
    if (unwritten_.contains(id.str())) {
        write_unwritten();
    }
    raised_.erase(id.str());
}

void catalog::write_unwritten() {
    write(unwritten_.begin(), unwritten_.end());
}

void catalog::write(rows::iterator first, rows::iterator last) {
    if (first == last) {
        return;
    }
    try {
        transaction tx(db_);
        for (auto it = first; it != last; ++it) {
            const auto& [id, row] = *it;
            const auto& [epoch, sum] = row;
            auto& q = db_.prepare(
                "UPDATE sessions SET epoch = ?2, has_work = ?3, paused = ?4, lane_system = ?5, "
                "lane_steer = ?6, lane_follow_up = ?7, timers = ?8, next_timer = ?9, "
                "last_activity = ?10, approvals = ?11, cost = ?12, tokens = ?13 "
                "WHERE id = ?1 AND epoch <= ?2");
            q.bind(1, std::string_view(id))
                .bind(2, static_cast<std::int64_t>(epoch.value))
                .bind(3, sum.has_work ? 1 : 0)
                .bind(4, sum.paused ? 1 : 0);
            for (std::size_t i = 0; i < sum.lanes.size(); ++i) {
                q.bind(static_cast<int>(5 + i), static_cast<std::int64_t>(sum.lanes[i]));
            }
            q.bind(8, static_cast<std::int64_t>(sum.timers));
            if (sum.next_timer) {
                q.bind(9, sum.next_timer->value);
            } else {
                q.bind_null(9);
            }
            q.bind(10, sum.last_activity.value)
                .bind(11, static_cast<std::int64_t>(sum.approvals))
                .bind(12, as_int64(sum.cost))
                .bind(13, as_int64(sum.tokens))
                .run();
        }
        tx.commit();
        for (auto it = first; it != last; ++it) {
            // What this process knows of a row is what it wrote last.
            if (auto known = raised_.find(it->first); known != raised_.end()) {
                if (says_something(it->second.second)) {
                    known->second = it->second;
                } else {
                    raised_.erase(known);
                }
            }
        }
        if (first == unwritten_.begin() && last == unwritten_.end()) {
            write_failed_ = false;  // every row a failed write kept is written
        }
        unwritten_.erase(first, last);
    } catch (const error&) {
        // The rows stay for the next write; the failure is counted (failures()), and the next
        // raise writes them all. A commit that failed may have landed: what this process knew
        // of those rows is forgotten (a raise then writes, never trusts).
        for (auto it = first; it != last; ++it) {
            raised_.erase(it->first);
        }
        write_failed_ = true;
        ++failures_;
    }
}

void catalog::note_opened(const session_id& id, lease_epoch epoch, bool after_removal) {
    std::lock_guard lock(mu_);
    // At the opening epoch: a row an older owner left unwritten never lands on a new session.
    db_.prepare("INSERT INTO sessions (id, epoch) VALUES (?1, ?2) ON CONFLICT (id) DO NOTHING")
        .bind(1, id.str())
        .bind(2, static_cast<std::int64_t>(epoch.value))
        .run();
    if (after_removal) {
        // A newer session: the removal's floor has done its work.
        db_.prepare("DELETE FROM removed WHERE id = ?1 AND epoch < ?2")
            .bind(1, id.str())
            .bind(2, static_cast<std::int64_t>(epoch.value))
            .run();
    }
}

void catalog::note_removed(const session_id& id, lease_epoch epoch) {
    // Opens at this epoch or older are refused from now on, in every process of the host: a
    // request that waited behind this removal cannot bring the session back. Not a hint: it
    // waits for its fsync.
    std::lock_guard lock(mu_);
    db_.exec("PRAGMA synchronous=FULL");
    struct normal_again {
        db& d;
        ~normal_again() {
            sqlite3_exec(d.raw(), "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
        }
    } restore{db_};
    transaction tx(db_);
    db_.prepare(
           "INSERT INTO removed (id, epoch) VALUES (?1, ?2) "
           "ON CONFLICT (id) DO UPDATE SET epoch = max(epoch, excluded.epoch)")
        .bind(1, id.str())
        .bind(2, static_cast<std::int64_t>(epoch.value))
        .run();
    db_.prepare("DELETE FROM sessions WHERE id = ?1").bind(1, id.str()).run();
    tx.commit();
    unwritten_.erase(id.str());
    raised_.erase(id.str());
}

std::optional<lease_epoch> catalog::removed_at(const session_id& id) {
    std::lock_guard lock(mu_);
    auto& q = db_.prepare("SELECT epoch FROM removed WHERE id = ?1");
    q.bind(1, id.str());
    std::optional<lease_epoch> out;
    if (q.step()) {
        out = lease_epoch{static_cast<std::uint64_t>(q.int64(0))};
    }
    q.reset();
    return out;
}

result<std::vector<catalog_entry>> catalog::sessions(const catalog_query& q) {
    try {
        std::lock_guard lock(mu_);
        write_unwritten();  // this process's rows are as new as its commits
        std::vector<catalog_entry> out;
        const auto range = range_of(q.tenant, q.after);
        // Listed ids in cost order are all read, then sorted and cut to the limit.
        const std::size_t limit =
            q.ids && q.by_cost ? std::numeric_limits<std::size_t>::max() : q.limit;
        auto take = [&](stmt& st) -> result<void> {
            while (out.size() < limit && st.step()) {
                auto e = read_entry(st);
                if (!e) {
                    st.reset();
                    return errc::corrupt;
                }
                if (!q.ids && !q.by_cost && !range.before.empty() && e->id.str() >= range.before) {
                    break;  // past the tenant's keys
                }
                if (matches(q, *e) && after_cursor(q, *e)) {
                    out.push_back(std::move(*e));
                }
            }
            st.reset();
            return {};
        };
        if (q.ids) {
            // Point reads, in id order.
            auto ids = *q.ids;
            std::sort(ids.begin(), ids.end());
            ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
            auto& st = db_.prepare(row_of);
            for (const auto& id : ids) {
                st.bind(1, id.str());
                if (auto r = take(st); !r) {
                    return r.error();
                }
            }
            in_query_order(q, out);
            if (out.size() > q.limit) {
                out.erase(out.begin() + static_cast<std::ptrdiff_t>(q.limit), out.end());
            }
            return out;
        }
        if (q.by_cost) {
            // The index in cost order from the cursor (a tenant's rows are filtered on the way).
            auto& st = db_.prepare(by_cost_after);
            st.bind(1, q.after_cost && q.after ? q.after->str() : std::string());
            st.bind(2, q.after_cost ? as_int64(*q.after_cost) : INT64_MAX);
            if (auto r = take(st); !r) {
                return r.error();
            }
            return out;
        }
        // The filters the index serves are in the SQL, the others in matches().
        auto& st = db_.prepare(q.needing_owner_by   ? needing_owner_after
                               : q.has_work == true ? working_after
                                                    : rows_after);
        st.bind(1, range.after);
        if (q.needing_owner_by) {
            st.bind(2, q.needing_owner_by->value);
        }
        if (auto r = take(st); !r) {
            return r.error();
        }
        return out;
    } catch (const error& e) {
        return storage_error(e);
    }
}

std::string catalog::boot_id() {
    std::lock_guard lock(mu_);
    auto& q = db_.prepare("SELECT value FROM store_state WHERE key = 'boot_id'");
    auto seen = q.step() ? std::string(q.text(0)) : std::string();
    q.reset();
    return seen;
}

void catalog::set_boot_id(const std::string& boot) {
    std::lock_guard lock(mu_);
    db_.exec("PRAGMA synchronous=FULL");
    db_.prepare(
           "INSERT INTO store_state (key, value) VALUES ('boot_id', ?1) "
           "ON CONFLICT (key) DO UPDATE SET value = excluded.value")
        .bind(1, boot)
        .run();
    db_.exec("PRAGMA synchronous=NORMAL");
}

bool catalog::raise(const session_id& id, lease_epoch epoch, bool has_work, bool paused,
                    std::int64_t timers) {
    // Only ever raised: a row that says too much costs the sweep a load, which rewrites it; one
    // that says too little would hide a session with work (work, or a row left paused of a
    // session that is not, since the sweep skips paused sessions). A session with timers is
    // due at once (a lost row may have held an earlier due time): its load rewrites the row
    // with the real one.
    std::lock_guard lock(mu_);
    db_.prepare(
           "INSERT INTO sessions (id, epoch, has_work, paused, timers, next_timer) "
           "VALUES (?1, ?2, ?3, ?5, ?4, CASE WHEN ?4 > 0 THEN 0 END) "
           "ON CONFLICT (id) DO UPDATE SET has_work = max(has_work, excluded.has_work), "
           "paused = CASE WHEN excluded.has_work = 1 THEN min(paused, excluded.paused) "
           "ELSE paused END, "
           "timers = max(timers, excluded.timers), next_timer = CASE WHEN "
           "excluded.timers > 0 THEN 0 ELSE next_timer END "
           "WHERE excluded.has_work > has_work OR (excluded.has_work = 1 AND excluded.paused < "
           "paused) OR (excluded.timers > 0 AND (next_timer IS NULL OR next_timer > 0))")
        .bind(1, id.str())
        .bind(2, static_cast<std::int64_t>(epoch.value))
        .bind(3, has_work ? 1 : 0)
        .bind(4, timers)
        .bind(5, paused ? 1 : 0)
        .run();
    return sqlite3_changes(db_.raw()) > 0;
}

}  // namespace wuhu::storage::sqlite
