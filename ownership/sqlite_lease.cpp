#include "ownership/sqlite_lease.hpp"

#include "storage/sqlite_db.hpp"

#include <algorithm>
#include <iterator>

namespace wuhu::ownership {

namespace sql = wuhu::storage::sqlite;

namespace {

// The lease tables in the catalog, versioned apart from the session store's tables there
// (storage::sqlite::migrate_part). `lease_epoch` is the last epoch handed out for any
// session: epochs only grow, even across a session's deletion. A catalog written before the
// lease store migrated its own tables already has them (the store's migrations made them).
const char* const lease_migrations[] = {
    R"(CREATE TABLE IF NOT EXISTS leases (id TEXT PRIMARY KEY, owner TEXT NOT NULL,
           epoch INTEGER NOT NULL, expires INTEGER NOT NULL) WITHOUT ROWID;
       CREATE TABLE IF NOT EXISTS lease_epoch (one INTEGER PRIMARY KEY CHECK (one = 1),
           last INTEGER NOT NULL);
       INSERT OR IGNORE INTO lease_epoch VALUES (1, 0);
       CREATE INDEX IF NOT EXISTS leases_owner ON leases (owner, id);)",
};

// Runs `f` and maps an SQLite failure to storage::errc::unavailable: the outcome is unknown,
// and the caller treats the lease as not held.
template <class F>
auto guarded(F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const sql::error&) {
        return storage::errc::unavailable;
    }
}

lease row_lease(const sql::stmt& q) {
    return lease{session_id::parse_key(q.text(0)).value(),
                 std::string(q.text(1)),
                 lease_epoch{static_cast<std::uint64_t>(q.int64(2))},
                 unix_ms{q.int64(3)},
                 {}};
}

}  // namespace

sqlite_lease::sqlite_lease(const std::filesystem::path& data_dir, wall_clock now,
                           int busy_timeout_ms)
    : now_(std::move(now)) {
    std::filesystem::create_directories(data_dir);
    sql::keep_private(data_dir, 0700);
    db_ =
        std::make_unique<sql::db>((data_dir / "catalog.sqlite").string(), "FULL", busy_timeout_ms);
    sql::migrate_part(*db_, "leases", lease_migrations, std::size(lease_migrations));
}

sqlite_lease::~sqlite_lease() = default;

result<acquisition> sqlite_lease::acquire(const session_id& id, std::string_view owner,
                                          std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu_);
    return guarded([&]() -> result<acquisition> {
        sql::transaction tx(*db_);
        auto got = take(id, owner, ttl, now_());
        if (got) {
            tx.commit();
        }
        return got;
    });
}

std::vector<result<acquisition>> sqlite_lease::acquire_all(const std::vector<session_id>& ids,
                                                          std::string_view owner,
                                                          std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu_);
    auto all = guarded([&]() -> result<std::vector<result<acquisition>>> {
        sql::transaction tx(*db_);
        const auto now = now_();
        std::vector<result<acquisition>> out;
        out.reserve(ids.size());
        for (const auto& id : ids) {
            out.push_back(take(id, owner, ttl, now));
        }
        tx.commit();
        return out;
    });
    if (!all) {
        return std::vector<result<acquisition>>(ids.size(), all.error());
    }
    return std::move(*all);
}

result<std::vector<lease>> sqlite_lease::claim(const std::vector<session_id>& candidates,
                                               std::string_view owner,
                                               std::chrono::milliseconds ttl, std::size_t limit) {
    std::lock_guard lock(mu_);
    return guarded([&]() -> result<std::vector<lease>> {
        // The catalog's write lock (BEGIN IMMEDIATE) serializes the workers of the host: each
        // claims from what the one before left.
        sql::transaction tx(*db_);
        const auto now = now_();
        std::vector<lease> out;
        for (const auto& id : candidates) {
            if (out.size() == limit) {
                break;
            }
            auto got = take(id, owner, ttl, now);
            if (!got) {
                return got.error();
            }
            if (auto* l = std::get_if<lease>(&*got)) {
                out.push_back(std::move(*l));
            }
        }
        tx.commit();
        return out;
    });
}

result<acquisition> sqlite_lease::take(const session_id& id, std::string_view owner,
                               std::chrono::milliseconds ttl, unix_ms now) {
    auto& cur = db_->prepare("SELECT owner, expires, epoch FROM leases WHERE id = ?1");
    cur.bind(1, id.str());
    std::string previous;
    if (cur.step() && cur.text(0) != owner) {
        if (cur.int64(1) > now.value) {
            held_elsewhere other{std::string(cur.text(0)), unix_ms{cur.int64(1)},
                                 lease_epoch{static_cast<std::uint64_t>(cur.int64(2))}};
            cur.reset();
            return acquisition{std::move(other)};
        }
        previous = cur.text(0);  // its lease expired: a take-over
    }
    cur.reset();
    auto& next = db_->prepare("UPDATE lease_epoch SET last = last + 1 RETURNING last");
    next.step();
    const lease_epoch epoch{static_cast<std::uint64_t>(next.int64(0))};
    next.reset();
    // Conditional: only a missing, expired or own lease is replaced.
    const unix_ms expires{now.value + ttl.count()};
    db_->prepare(
           "INSERT INTO leases (id, owner, epoch, expires) VALUES (?1, ?2, ?3, ?4) "
           "ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch, "
           "expires = excluded.expires WHERE leases.expires <= ?5 OR leases.owner = ?2")
        .bind(1, id.str())
        .bind(2, owner)
        .bind(3, static_cast<std::int64_t>(epoch.value))
        .bind(4, expires.value)
        .bind(5, now.value)
        .run();
    if (sqlite3_changes(db_->raw()) != 1) {
        return storage::errc::conflict;  // cannot happen inside the transaction
    }
    return acquisition{lease{id, std::string(owner), epoch, expires, std::move(previous)}};
}

result<std::vector<session_id>> sqlite_lease::renew(const std::vector<lease>& held,
                                                    std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu_);
    return guarded([&]() -> result<std::vector<session_id>> {
        std::vector<session_id> lost;
        if (held.empty()) {
            return lost;
        }
        sql::transaction tx(*db_);
        const auto now = now_();
        const unix_ms expires{now.value + ttl.count()};
        for (const auto& h : held) {
            db_->prepare("UPDATE leases SET expires = ?1 WHERE id = ?2 AND owner = ?3 AND "
                         "epoch = ?4 AND expires > ?5")
                .bind(1, expires.value)
                .bind(2, h.id.str())
                .bind(3, h.owner)
                .bind(4, static_cast<std::int64_t>(h.epoch.value))
                .bind(5, now.value)
                .run();
            if (sqlite3_changes(db_->raw()) != 1) {
                lost.push_back(h.id);
            }
        }
        tx.commit();
        return lost;
    });
}

result<void> sqlite_lease::release(const lease& held) {
    std::lock_guard lock(mu_);
    return guarded([&]() -> result<void> {
        db_->prepare("DELETE FROM leases WHERE id = ?1 AND owner = ?2 AND epoch = ?3")
            .bind(1, held.id.str())
            .bind(2, held.owner)
            .bind(3, static_cast<std::int64_t>(held.epoch.value))
            .run();
        return {};
    });
}

result<std::optional<lease>> sqlite_lease::owner_of(const session_id& id) {
    std::lock_guard lock(mu_);
    return guarded([&]() -> result<std::optional<lease>> {
        auto& q = db_->prepare(
            "SELECT id, owner, epoch, expires FROM leases WHERE id = ?1 AND expires > ?2");
        q.bind(1, id.str()).bind(2, now_().value);
        std::optional<lease> out;
        if (q.step()) {
            out = row_lease(q);
        }
        q.reset();
        return out;
    });
}

result<std::vector<lease>> sqlite_lease::live(const lease_query& q) {
    std::lock_guard lock(mu_);
    return guarded([&]() -> result<std::vector<lease>> {
        std::vector<lease> out;
        const auto range = storage::range_of(q.tenant, q.after);
        auto take = [&](sql::stmt& st) {
            while (out.size() < q.limit && st.step()) {
                auto l = row_lease(st);
                if (!q.ids && !range.before.empty() && l.id.str() >= range.before) {
                    break;  // past the tenant's keys
                }
                if (matches(q, l)) {
                    out.push_back(std::move(l));
                }
            }
            st.reset();
        };
        if (q.ids) {
            auto ids = *q.ids;
            std::sort(ids.begin(), ids.end());
            ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
            auto& st = db_->prepare(
                "SELECT id, owner, epoch, expires FROM leases WHERE id = ?1 AND expires > ?2");
            for (const auto& id : ids) {
                st.bind(1, id.str()).bind(2, now_().value);
                take(st);
            }
            return out;
        }
        const auto& after = range.after;
        if (q.owner) {
            auto& st = db_->prepare(
                "SELECT id, owner, epoch, expires FROM leases WHERE owner = ?3 AND expires > ?1 "
                "AND id > ?2 ORDER BY id");
            st.bind(1, now_().value).bind(2, after).bind(3, *q.owner);
            take(st);
        } else {
            auto& st = db_->prepare(
                "SELECT id, owner, epoch, expires FROM leases WHERE expires > ?1 AND id > ?2 "
                "ORDER BY id");
            st.bind(1, now_().value).bind(2, after);
            take(st);
        }
        return out;
    });
}

result<std::vector<std::string>> sqlite_lease::owners() {
    std::lock_guard lock(mu_);
    return guarded([&]() -> result<std::vector<std::string>> {
        auto& st = db_->prepare(
            "SELECT DISTINCT owner FROM leases WHERE expires > ?1 ORDER BY owner");
        st.bind(1, now_().value);
        std::vector<std::string> out;
        while (st.step()) {
            out.emplace_back(st.text(0));
        }
        st.reset();
        return out;
    });
}

result<void> sqlite_lease::remove(const session_id& id, lease_epoch epoch) {
    std::lock_guard lock(mu_);
    return guarded([&]() -> result<void> {
        db_->prepare("DELETE FROM leases WHERE id = ?1 AND epoch <= ?2")
            .bind(1, id.str())
            .bind(2, static_cast<std::int64_t>(epoch.value))
            .run();
        return {};
    });
}

}  // namespace wuhu::ownership
