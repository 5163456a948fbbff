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
    // Renewal per worker (ownership/generations.hpp): a lease names its owner's generation,
    // live while the lease's own expiry or the generation's is in the future. `expires` is
    // renamed: a worker of an earlier release, which read it as the whole truth, fails every
    // lease operation (it serves and takes nothing) rather than take leases that live by their
    // generation.
    R"(ALTER TABLE leases RENAME COLUMN expires TO own_expires;
       ALTER TABLE leases ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
       CREATE TABLE lease_generations (owner TEXT NOT NULL, generation INTEGER NOT NULL,
           expires INTEGER NOT NULL, spoiled INTEGER NOT NULL DEFAULT 0,
           PRIMARY KEY (owner, generation)) WITHOUT ROWID;
       CREATE TABLE lease_generation (one INTEGER PRIMARY KEY CHECK (one = 1),
           last INTEGER NOT NULL);
       INSERT INTO lease_generation VALUES (1, 0);)",
};

// The lease's effective expiry: the later of its own and its generation's.
#define WUHU_LEASE_EXPIRES(l)                                                              \
    "max(" l                                                                               \
    ".own_expires, coalesce((SELECT g.expires FROM lease_generations g WHERE g.owner = " l \
    ".owner AND g.generation = " l ".generation), 0))"

// Runs `f` and maps an SQLite failure to storage::errc::unavailable: the outcome is unknown,
// and the caller treats the lease as not held.
template <class F>
auto guarded(generations& stamped, F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const sql::error&) {
        stamped.doubt();  // it may have stamped what the next renewal must go through
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
    return guarded(stamped_, [&]() -> result<acquisition> {
        sql::transaction tx(*db_);
        bool made = false;
        const auto g = generation_of(owner, made);
        auto got = take(id, owner, ttl, now_(), g);
        if (got) {
            tx.commit();
            stamped_.record(owner, g, made, {&*got, 1});
        }
        return got;
    });
}

std::vector<result<acquisition>> sqlite_lease::acquire_all(const std::vector<session_id>& ids,
                                                          std::string_view owner,
                                                          std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu_);
    auto all = guarded(stamped_, [&]() -> result<std::vector<result<acquisition>>> {
        sql::transaction tx(*db_);
        const auto now = now_();
        bool made = false;
        const auto g = generation_of(owner, made);
        std::vector<result<acquisition>> out;
        std::vector<acquisition> got;
        out.reserve(ids.size());
        for (const auto& id : ids) {
            out.push_back(take(id, owner, ttl, now, g));
            if (out.back()) {
                got.push_back(*out.back());
            }
        }
        tx.commit();
        stamped_.record(owner, g, made, got);
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
    return guarded(stamped_, [&]() -> result<std::vector<lease>> {
        // The catalog's write lock (BEGIN IMMEDIATE) serializes the workers of the host: each
        // claims from what the one before left.
        sql::transaction tx(*db_);
        const auto now = now_();
        bool made = false;
        const auto g = generation_of(owner, made);
        std::vector<lease> out;
        for (const auto& id : candidates) {
            if (out.size() == limit) {
                break;
            }
            auto got = take(id, owner, ttl, now, g);
            if (!got) {
                return got.error();
            }
            if (auto* l = std::get_if<lease>(&*got)) {
                out.push_back(std::move(*l));
            }
        }
        tx.commit();
        std::vector<acquisition> got(out.begin(), out.end());
        stamped_.record(owner, g, made, got);
        return out;
    });
}

result<acquisition> sqlite_lease::take(const session_id& id, std::string_view owner,
                                       std::chrono::milliseconds ttl, unix_ms now,
                                       std::int64_t generation) {
    auto& cur = db_->prepare(
        "SELECT owner, " WUHU_LEASE_EXPIRES("l") ", epoch, generation FROM leases l WHERE id = ?1");
    cur.bind(1, id.str());
    std::string previous;
    std::int64_t spoiled = 0;
    if (cur.step()) {
        if (cur.text(0) != owner) {
            if (cur.int64(1) > now.value) {
                held_elsewhere other{std::string(cur.text(0)), unix_ms{cur.int64(1)},
                                     lease_epoch{static_cast<std::uint64_t>(cur.int64(2))}};
                cur.reset();
                return acquisition{std::move(other)};
            }
            previous = cur.text(0);  // its lease expired: a take-over
        } else if (cur.int64(3) != generation) {
            spoiled = cur.int64(3);
        }
    }
    cur.reset();
    if (spoiled != 0) {
        // An own lease stamped by another of the owner's generations (another run of the same
        // worker id): that generation is renewed in one write no more, so its run learns, lease
        // by lease, that it lost this one.
        db_->prepare(
               "UPDATE lease_generations SET spoiled = 1 WHERE owner = ?1 AND "
               "generation = ?2")
            .bind(1, owner)
            .bind(2, spoiled)
            .run();
    }
    auto& next = db_->prepare("UPDATE lease_epoch SET last = last + 1 RETURNING last");
    next.step();
    const lease_epoch epoch{static_cast<std::uint64_t>(next.int64(0))};
    next.reset();
    // Conditional: only a missing, expired or own lease is replaced.
    const unix_ms expires{now.value + ttl.count()};
    db_->prepare(
           "INSERT INTO leases (id, owner, epoch, own_expires, generation) "
           "VALUES (?1, ?2, ?3, ?4, ?6) "
           "ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, "
           "epoch = excluded.epoch, own_expires = excluded.own_expires, "
           "generation = excluded.generation "
           "WHERE " WUHU_LEASE_EXPIRES("leases") " <= ?5 OR leases.owner = ?2")
        .bind(1, id.str())
        .bind(2, owner)
        .bind(3, static_cast<std::int64_t>(epoch.value))
        .bind(4, expires.value)
        .bind(5, now.value)
        .bind(6, generation)
        .run();
    if (sqlite3_changes(db_->raw()) != 1) {
        return storage::errc::conflict;  // cannot happen inside the transaction
    }
    return acquisition{lease{id, std::string(owner), epoch, expires, std::move(previous)}};
}

std::int64_t sqlite_lease::next_generation() {
    auto& next = db_->prepare("UPDATE lease_generation SET last = last + 1 RETURNING last");
    next.step();
    const auto g = next.int64(0);
    next.reset();
    return g;
}

std::int64_t sqlite_lease::generation_of(std::string_view owner, bool& made) {
    return stamped_.current_or(owner, made, [&] {
        const auto g = next_generation();
        db_->prepare(
               "INSERT INTO lease_generations (owner, generation, expires) VALUES (?1, ?2, 0)")
            .bind(1, owner)
            .bind(2, g)
            .run();
        return g;
    });
}

bool sqlite_lease::renew_current(std::string_view owner, unix_ms now, unix_ms expires) {
    // Exactly the current generation's leases: one row, if it is still live.
    db_->prepare(
           "UPDATE lease_generations SET expires = ?1 WHERE owner = ?2 AND "
           "generation = ?3 AND expires > ?4 AND spoiled = 0")
        .bind(1, expires.value)
        .bind(2, owner)
        .bind(3, stamped_.current(owner))
        .bind(4, now.value)
        .run();
    return sqlite3_changes(db_->raw()) == 1;
}

result<bool> sqlite_lease::renew_generation(std::string_view owner, std::size_t count,
                                            std::uint64_t digest, std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu_);
    return guarded(stamped_, [&]() -> result<bool> {
        if (!stamped_.covers(owner, count, digest)) {
            return false;
        }
        sql::transaction tx(*db_);
        const auto now = now_();
        if (!renew_current(owner, now, unix_ms{now.value + ttl.count()})) {
            return false;
        }
        tx.commit();
        return true;
    });
}

result<std::vector<session_id>> sqlite_lease::renew(const std::vector<lease>& held,
                                                    std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu_);
    return guarded(stamped_, [&]() -> result<std::vector<session_id>> {
        std::vector<session_id> lost;
        if (held.empty()) {
            return lost;
        }
        sql::transaction tx(*db_);
        const auto now = now_();
        const unix_ms expires{now.value + ttl.count()};
        const auto& owner = held.front().owner;
        if (stamped_.covers(held) && renew_current(owner, now, expires)) {
            tx.commit();
            return lost;
        }
        // Lease by lease, into a new generation; the old one's row expires on its own.
        const auto next = next_generation();
        std::vector<lease> renewed;
        for (const auto& h : held) {
            db_->prepare(
                   "UPDATE leases SET own_expires = ?1, generation = ?6 WHERE id = ?2 AND "
                   "owner = ?3 AND epoch = ?4 AND " WUHU_LEASE_EXPIRES("leases") " > ?5")
                .bind(1, expires.value)
                .bind(2, h.id.str())
                .bind(3, h.owner)
                .bind(4, static_cast<std::int64_t>(h.epoch.value))
                .bind(5, now.value)
                .bind(6, next)
                .run();
            if (h.owner != owner || sqlite3_changes(db_->raw()) != 1) {
                lost.push_back(h.id);
            } else {
                renewed.push_back(h);
            }
        }
        // Dead generations (any owner's: they keep nothing live) go.
        db_->prepare("DELETE FROM lease_generations WHERE expires <= ?1").bind(1, now.value).run();
        db_->prepare(
               "INSERT INTO lease_generations (owner, generation, expires) VALUES (?1, ?2, ?3)")
            .bind(1, owner)
            .bind(2, next)
            .bind(3, expires.value)
            .run();
        tx.commit();
        stamped_.begin(owner, next, renewed);
        return lost;
    });
}

result<void> sqlite_lease::release(const lease& held) {
    std::lock_guard lock(mu_);
    return guarded(stamped_, [&]() -> result<void> {
        db_->prepare("DELETE FROM leases WHERE id = ?1 AND owner = ?2 AND epoch = ?3")
            .bind(1, held.id.str())
            .bind(2, held.owner)
            .bind(3, static_cast<std::int64_t>(held.epoch.value))
            .run();
        if (sqlite3_changes(db_->raw()) == 1) {
            stamped_.drop(held);
        }
        return {};
    });
}

result<std::optional<lease>> sqlite_lease::owner_of(const session_id& id) {
    std::lock_guard lock(mu_);
    return guarded(stamped_, [&]() -> result<std::optional<lease>> {
        auto& q = db_->prepare("SELECT id, owner, epoch, " WUHU_LEASE_EXPIRES(
            "l") " AS e FROM leases l WHERE id = ?1 AND e > ?2");
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
    return guarded(stamped_, [&]() -> result<std::vector<lease>> {
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
            auto& st = db_->prepare("SELECT id, owner, epoch, " WUHU_LEASE_EXPIRES(
                "l") " AS e FROM leases l WHERE id = ?1 AND e > ?2");
            for (const auto& id : ids) {
                st.bind(1, id.str()).bind(2, now_().value);
                take(st);
            }
            return out;
        }
        const auto& after = range.after;
        if (q.owner) {
            auto& st = db_->prepare("SELECT id, owner, epoch, " WUHU_LEASE_EXPIRES(
                "l") " AS e FROM leases l WHERE owner = ?3 AND e > ?1 AND id > ?2 ORDER BY id");
            st.bind(1, now_().value).bind(2, after).bind(3, *q.owner);
            take(st);
        } else {
            auto& st = db_->prepare("SELECT id, owner, epoch, " WUHU_LEASE_EXPIRES(
                "l") " AS e FROM leases l WHERE e > ?1 AND id > ?2 ORDER BY id");
            st.bind(1, now_().value).bind(2, after);
            take(st);
        }
        return out;
    });
}

result<std::vector<std::string>> sqlite_lease::owners() {
    std::lock_guard lock(mu_);
    return guarded(stamped_, [&]() -> result<std::vector<std::string>> {
        auto& st = db_->prepare("SELECT DISTINCT owner FROM leases l WHERE " WUHU_LEASE_EXPIRES(
            "l") " > ?1 ORDER BY owner");
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
    return guarded(stamped_, [&]() -> result<void> {
        auto& gone =
            db_->prepare("DELETE FROM leases WHERE id = ?1 AND epoch <= ?2 RETURNING owner, epoch");
        gone.bind(1, id.str()).bind(2, static_cast<std::int64_t>(epoch.value));
        if (gone.step()) {
            stamped_.drop(lease{id,
                                std::string(gone.text(0)),
                                lease_epoch{static_cast<std::uint64_t>(gone.int64(1))},
                                {},
                                {}});
        }
        gone.reset();
        return {};
    });
}

}  // namespace wuhu::ownership
