#include "ownership/postgres_lease.hpp"

#include "ownership/postgres_lease_sql.hpp"

#include "runtime/secrets.hpp"
#include "storage/pg_migrations.hpp"
#include "storage/postgres_schema.hpp"

#include <pqxx/pqxx>

#include <algorithm>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_set>

namespace wuhu::ownership {

namespace {

lease row_lease(const pqxx::row& r) {
    return lease{session_id::parse_key(r[0].c_str()).value(), r[1].c_str(),
                 lease_epoch{r[2].as<std::uint64_t>()}, unix_ms{r[3].as<std::int64_t>()}, {}};
}

// A PostgreSQL array literal of ids or numbers, every element double-quoted: an unquoted
// NULL (any case) would be a NULL element, and "null" is a valid session id. Ids are
// [A-Za-z0-9_-] and numbers digits: nothing inside the quotes to escape.
template <class T, class F>
std::string array_of(const std::vector<T>& xs, F item) {
    std::ostringstream out;
    out << '{';
    for (std::size_t i = 0; i < xs.size(); ++i) {
        out << (i == 0 ? "\"" : ",\"") << item(xs[i]) << '"';
    }
    out << '}';
    return out.str();
}

}  // namespace

postgres_lease::postgres_lease(postgres_lease_options options) : options_(std::move(options)) {
    if (!storage::valid_pg_schema(options_.schema)) {
        throw std::invalid_argument("postgres schema must match [a-z_][a-z0-9_]*");
    }
    try {
        pqxx::connection c(options_.dsn);
        pqxx::work w(c);
        const auto all = postgres_lease_sql::migrations();
        storage::apply_pg_migrations(w, options_.schema, "lease_migrations", all.data(),
                                     all.size());
        w.commit();
    } catch (const pqxx::failure& e) {
        // libpq may echo the connection string: its secrets never reach the message.
        throw std::runtime_error("postgres leases at " + runtime::redacted_url(options_.dsn) +
                                 ": " + runtime::scrubbed(e.what(), options_.dsn));
    }
}

struct postgres_lease::connection {
    explicit connection(const std::string& dsn) : c(dsn) {}
    pqxx::connection c;
};

postgres_lease::~postgres_lease() = default;

std::optional<std::int64_t> postgres_lease::test_now() const {
    if (options_.test_clock) {
        return options_.test_clock().value;
    }
    return std::nullopt;
}

template <class F>
auto postgres_lease::with_connection(F&& f) {
    using out = decltype(f(std::declval<pqxx::connection&>()));
    std::lock_guard lock(mu_);
    try {
        if (!c_ || !c_->c.is_open()) {
            c_.reset();
            auto c = std::make_unique<connection>(options_.dsn);
            storage::set_pg_timeouts(c->c, options_.timeouts);
            postgres_lease_sql::prepare(c->c, options_.schema);
            c_ = std::move(c);
        }
        return out(f(c_->c));
    } catch (const pqxx::failure&) {
        c_.reset();  // opened again on the next call
        // Whatever it was, it may have committed: the next renewal goes lease by lease.
        stamped_.doubt();
        return out(storage::errc::unavailable);
    }
}

namespace {

// The owner's current generation, made in `w` if it has none (`made`: record it once `w`
// commits).
std::int64_t generation_of(pqxx::work& w, const generations& stamped, const std::string& me,
                           bool& made) {
    return stamped.current_or(me, made, [&] {
        return w.exec_prepared1("lease_generation_first", me)[0].as<std::int64_t>();
    });
}

// A session's lease row, locked; another owner's with its effective expiry (an own lease is
// taken whatever its expiry). Another owner's lease whose own expiry has passed may be taken if
// its generation has expired too: that generation is closed first (lease_generation_close), so
// the take and a renewal of the generation in flight are ordered by the generation's row.
struct current_lease {
    std::string owner;
    unix_ms expires;
    bool live = false;
    lease_epoch epoch;
    std::int64_t generation = 0;
};

std::optional<current_lease> current(pqxx::work& w, const session_id& id, const std::string& me,
                                     std::optional<std::int64_t> now) {
    auto cur = w.exec_prepared("lease_current", now, id.str());
    if (cur.empty()) {
        return std::nullopt;
    }
    current_lease c{cur[0][0].c_str(), unix_ms{cur[0][1].as<std::int64_t>()}, cur[0][2].as<bool>(),
                    lease_epoch{cur[0][3].as<std::uint64_t>()}, cur[0][4].as<std::int64_t>()};
    if (c.owner == me) {
        return c;  // taken whatever its expiry: its generation is not read
    }
    if (!c.live) {
        w.exec_prepared0("lease_generation_close", now, c.owner, c.generation);
    }
    auto g = w.exec_prepared("lease_generation_read", now, c.owner, c.generation);
    if (!g.empty()) {
        c.expires = std::max(c.expires, unix_ms{g[0][0].as<std::int64_t>()});
        c.live = c.live || g[0][1].as<bool>();
    }
    return c;
}

// acquire() inside `w`: reads the session's lease and takes it unless another owner's is live;
// a lease it takes is stamped with `generation`. Taking an own lease stamped by another of the
// owner's generations spoils that one: a run of the same worker id that renews it stops renewing
// in one write, and so learns that it lost this lease.
result<acquisition> take(pqxx::work& w, const session_id& id, const std::string& me,
                         std::chrono::milliseconds ttl, std::optional<std::int64_t> now,
                         std::int64_t generation) {
    std::string previous;
    const auto cur = current(w, id, me, now);
    if (cur && cur->owner != me) {
        if (cur->live) {
            return acquisition{held_elsewhere{cur->owner, cur->expires, cur->epoch}};
        }
        previous = cur->owner;  // its lease expired: a take-over
    } else if (cur && cur->generation != generation) {
        w.exec_prepared0("lease_generations_spoil", me, "{" + std::to_string(cur->generation) + "}",
                         generation);
    }
    auto took = w.exec_prepared("lease_take", now, id.str(), me,
                                static_cast<std::int64_t>(ttl.count()), generation);
    if (took.empty()) {
        // Another worker inserted the first lease between the read and the write.
        const auto other = current(w, id, me, now);
        if (!other) {
            return storage::errc::conflict;
        }
        return acquisition{held_elsewhere{other->owner, other->expires, other->epoch}};
    }
    return acquisition{lease{id, me, lease_epoch{took[0][0].as<std::uint64_t>()},
                             unix_ms{took[0][1].as<std::int64_t>()}, std::move(previous)}};
}

// take() of each of `ids` (in id order) inside `w`: one statement locks the rows there, then
// inserts the leases of those with no row, and the others go lease by lease (and an id given
// twice), in the order of lease_take_new's comment.
std::vector<result<acquisition>> take_all(pqxx::work& w, const std::vector<const session_id*>& ids,
                                          const std::string& me, std::chrono::milliseconds ttl,
                                          std::optional<std::int64_t> now,
                                          std::int64_t generation) {
    const auto ms = static_cast<std::int64_t>(ttl.count());
    const auto all = array_of(ids, [](const session_id* id) { return id->str(); });
    std::map<std::string, lease, std::less<>> fresh;
    for (const auto& r : w.exec_prepared("lease_take_new", now, all, me, ms, generation)) {
        auto id = session_id::parse_key(r[0].c_str()).value();
        auto key = id.str();
        fresh.emplace(std::move(key), lease{std::move(id),
                                            me,
                                            lease_epoch{r[1].as<std::uint64_t>()},
                                            unix_ms{r[2].as<std::int64_t>()},
                                            {}});
    }
    std::vector<result<acquisition>> out;
    out.reserve(ids.size());
    for (const auto* id : ids) {
        if (auto it = fresh.find(id->str()); it != fresh.end()) {
            out.emplace_back(acquisition{std::move(it->second)});
            fresh.erase(it);
        } else {
            out.push_back(take(w, *id, me, ttl, now, generation));
        }
    }
    return out;
}

}  // namespace

result<acquisition> postgres_lease::acquire(const session_id& id, std::string_view owner,
                                            std::chrono::milliseconds ttl) {
    return with_connection([&](pqxx::connection& c) -> result<acquisition> {
        pqxx::work w(c);
        const std::string me(owner);
        bool made = false;
        const auto g = generation_of(w, stamped_, me, made);
        auto got = std::move(take_all(w, {&id}, me, ttl, test_now(), g).front());
        if (got) {
            w.commit();
            stamped_.record(me, g, made, {&*got, 1});
        }
        return got;
    });
}

std::vector<result<acquisition>> postgres_lease::acquire_all(const std::vector<session_id>& ids,
                                                            std::string_view owner,
                                                            std::chrono::milliseconds ttl) {
    using answers = std::vector<result<acquisition>>;
    if (ids.empty()) {
        return {};
    }
    // Rows are locked in id order, as every transaction that takes several does: two workers'
    // bursts never wait for each other in a cycle.
    std::vector<std::size_t> order(ids.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
        order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return ids[a].str() < ids[b].str(); });
    std::vector<const session_id*> sorted;
    sorted.reserve(ids.size());
    for (const auto i : order) {
        sorted.push_back(&ids[i]);
    }
    auto all = with_connection([&](pqxx::connection& c) -> result<answers> {
        pqxx::work w(c);
        const std::string me(owner);
        bool made = false;
        const auto g = generation_of(w, stamped_, me, made);
        auto taken = take_all(w, sorted, me, ttl, test_now(), g);
        answers out(ids.size(), result<acquisition>(storage::errc::unavailable));
        std::vector<acquisition> got;
        for (std::size_t k = 0; k < order.size(); ++k) {
            out[order[k]] = std::move(taken[k]);
            if (out[order[k]]) {
                got.push_back(*out[order[k]]);
            }
        }
        w.commit();
        stamped_.record(me, g, made, got);
        return out;
    });
    if (!all) {
        return answers(ids.size(), all.error());
    }
    return std::move(*all);
}

namespace {

// Extends the owner's current generation, if it is still live (exactly its leases: one row).
bool renew_current(pqxx::connection& c, const generations& stamped, std::string_view owner,
                   std::optional<std::int64_t> now, std::chrono::milliseconds ttl) {
    pqxx::nontransaction n(c);  // one statement: its own transaction, no BEGIN and COMMIT
    const auto r =
        n.exec_prepared0("lease_generation_renew", now, static_cast<std::int64_t>(ttl.count()),
                         std::string(owner), stamped.current(owner));
    return r.affected_rows() == 1;
}

}  // namespace

result<bool> postgres_lease::renew_generation(std::string_view owner, std::size_t count,
                                              std::uint64_t digest, std::chrono::milliseconds ttl) {
    return with_connection([&](pqxx::connection& c) -> result<bool> {
        return stamped_.covers(owner, count, digest) &&
               renew_current(c, stamped_, owner, test_now(), ttl);
    });
}

result<std::vector<session_id>> postgres_lease::renew(const std::vector<lease>& held,
                                                      std::chrono::milliseconds ttl) {
    if (held.empty()) {
        return std::vector<session_id>{};
    }
    return with_connection([&](pqxx::connection& c) -> result<std::vector<session_id>> {
        // One owner's leases (lease_store::renew); a lease of another owner in the batch is
        // not renewed, and so reported lost.
        const std::string& owner = held.front().owner;
        const auto now = test_now();
        const auto ms = static_cast<std::int64_t>(ttl.count());
        std::vector<session_id> lost;
        if (stamped_.covers(held) && renew_current(c, stamped_, owner, now, ttl)) {
            return lost;
        }
        // Lease by lease, into a new generation; the old one's row expires on its own.
        const auto ids = array_of(held, [](const lease& l) { return l.id.str(); });
        const auto epochs = array_of(held, [](const lease& l) { return l.epoch.value; });
        pqxx::work w(c);
        const auto next =
            w.exec_prepared1("lease_generation_next", now, owner, ms)[0].as<std::int64_t>();
        auto renewed = w.exec_prepared("lease_renew", now, ms, ids, epochs, owner, next);
        w.exec_prepared0("lease_generations_dead", now);
        w.commit();
        // A set: a worker holds thousands of leases, and a search of a list for each was
        // quadratic.
        std::unordered_set<std::string_view> kept;
        kept.reserve(renewed.size());
        for (const auto& r : renewed) {
            kept.insert(std::string_view(r[0].c_str(), r[0].size()));
        }
        std::vector<lease> still;
        for (const auto& h : held) {
            if (h.owner != owner || !kept.contains(h.id.str())) {
                lost.push_back(h.id);
            } else {
                still.push_back(h);
            }
        }
        stamped_.begin(owner, next, still);
        return lost;
    });
}

result<std::vector<lease>> postgres_lease::claim(const std::vector<session_id>& candidates,
                                                 std::string_view owner,
                                                 std::chrono::milliseconds ttl,
                                                 std::size_t limit) {
    if (candidates.empty() || limit == 0) {
        return std::vector<lease>{};
    }
    return with_connection([&](pqxx::connection& c) -> result<std::vector<lease>> {
        const auto now = test_now();
        const std::string me(owner);
        const auto ids = array_of(candidates, [](const session_id& id) { return id.str(); });
        const auto ms = static_cast<std::int64_t>(ttl.count());
        pqxx::work w(c);
        bool made = false;
        const auto g = generation_of(w, stamped_, me, made);
        std::vector<lease> out;
        std::map<std::string, std::string> previous;  // the expired leases' owners
        std::vector<session_id> locked, others;
        std::vector<std::int64_t> own_generations;
        for (const auto& r : w.exec_prepared("lease_claim_lock", now, ids, me,
                                             static_cast<std::int64_t>(limit))) {
            locked.push_back(session_id::parse_key(r[0].c_str()).value());
            const bool own = r[1].c_str() == me;
            previous[r[0].c_str()] = own ? std::string() : r[1].c_str();
            if (!own) {
                others.push_back(locked.back());
            } else if (r[2].as<std::int64_t>() != g) {
                own_generations.push_back(r[2].as<std::int64_t>());
            }
        }
        auto text_ids = [](const std::vector<session_id>& xs) {
            return array_of(xs, [](const session_id& id) { return id.str(); });
        };
        if (!others.empty()) {
            // The others' expired generations closed (as by a take: current()), then read
            // again: the leases a renewal kept live are not taken.
            w.exec_prepared0("lease_claim_close", now, text_ids(others), me);
            std::unordered_set<std::string> live;
            for (const auto& r : w.exec_prepared("lease_claim_live", now, text_ids(others), me)) {
                live.insert(r[0].c_str());
            }
            std::erase_if(locked, [&](const session_id& id) { return live.contains(id.str()); });
        }
        if (!own_generations.empty()) {
            w.exec_prepared0("lease_generations_spoil", me,
                             array_of(own_generations, [](std::int64_t x) { return x; }), g);
        }
        auto add = [&](const pqxx::result& rows) {
            for (const auto& r : rows) {
                auto id = session_id::parse_key(r[0].c_str()).value();
                out.push_back(lease{id, me, lease_epoch{r[1].as<std::uint64_t>()},
                                    unix_ms{r[2].as<std::int64_t>()}, previous[id.str()]});
            }
        };
        if (!locked.empty()) {
            add(w.exec_prepared("lease_claim_take", now, text_ids(locked), me, ms, g));
        }
        if (out.size() < limit) {
            add(w.exec_prepared("lease_claim_new", now, ids, me, ms,
                                static_cast<std::int64_t>(limit - out.size()), g));
        }
        w.commit();
        std::vector<acquisition> got(out.begin(), out.end());
        stamped_.record(me, g, made, got);
        return out;
    });
}

result<void> postgres_lease::release(const lease& held) {
    return with_connection([&](pqxx::connection& c) -> result<void> {
        // One statement, its own transaction: a BEGIN and a COMMIT around it were two more
        // round trips for every session unloaded.
        pqxx::nontransaction n(c);
        const auto r = n.exec_prepared0("lease_release", held.id.str(), held.owner,
                                        static_cast<std::int64_t>(held.epoch.value));
        if (r.affected_rows() == 1) {
            stamped_.drop(held);
        }
        return {};
    });
}

result<std::optional<lease>> postgres_lease::owner_of(const session_id& id) {
    return with_connection([&](pqxx::connection& c) -> result<std::optional<lease>> {
        pqxx::nontransaction n(c);
        auto r = n.exec_prepared("lease_owner", test_now(), id.str());
        std::optional<lease> out;
        if (!r.empty()) {
            out = row_lease(r[0]);
        }
        return out;
    });
}

result<std::vector<lease>> postgres_lease::live(const lease_query& q) {
    return with_connection([&](pqxx::connection& c) -> result<std::vector<lease>> {
        pqxx::nontransaction n(c);
        std::optional<std::string> ids, after, before;
        if (q.ids) {
            ids = array_of(*q.ids, [](const session_id& id) { return id.str(); });
        }
        const auto range = storage::range_of(q.tenant, q.after);
        if (!range.after.empty()) {
            after = range.after;
        }
        if (!range.before.empty()) {
            before = range.before;
        }
        std::optional<std::int64_t> limit;
        if (q.limit != std::numeric_limits<std::size_t>::max()) {
            limit = static_cast<std::int64_t>(q.limit);
        }
        // $1 now, $2 ids, $3 owner, $4 after, $5 limit; the conditions an index serves are
        // spelled out only when set.
        const auto e = postgres_lease_sql::expires_of("l");
        std::string sql = "SELECT session_id, owner, epoch, " + e + " FROM leases l WHERE " + e +
                          " > " + std::string(postgres_lease_sql::now_ms);
        sql += q.ids ? " AND session_id = ANY($2::text[])" : " AND $2::text IS NULL";
        sql += q.owner ? " AND owner = $3" : " AND $3::text IS NULL";
        sql += after ? " AND session_id > $4" : " AND $4::text IS NULL";
        sql += before ? " AND session_id < $6" : " AND $6::text IS NULL";
        if (q.tenant && q.tenant->empty()) {
            sql += " AND strpos(session_id, '.') = 0";  // sessions of no tenant
        }
        sql += " ORDER BY session_id LIMIT $5";
        std::vector<lease> out;
        for (const auto& r : n.exec_params(sql, test_now(), ids, q.owner, after, limit, before)) {
            out.push_back(row_lease(r));
        }
        return out;
    });
}

result<std::vector<std::string>> postgres_lease::owners() {
    return with_connection([&](pqxx::connection& c) -> result<std::vector<std::string>> {
        pqxx::nontransaction n(c);
        std::vector<std::string> out;
        for (const auto& r : n.exec_prepared("lease_owners", test_now())) {
            out.emplace_back(r[0].c_str());
        }
        return out;
    });
}

result<void> postgres_lease::remove(const session_id& id, lease_epoch epoch) {
    return with_connection([&](pqxx::connection& c) -> result<void> {
        pqxx::nontransaction n(c);
        const auto gone =
            n.exec_prepared("lease_remove", id.str(), static_cast<std::int64_t>(epoch.value));
        for (const auto& r : gone) {
            stamped_.drop(lease{id, r[0].c_str(), lease_epoch{r[1].as<std::uint64_t>()}, {}, {}});
        }
        return {};
    });
}

}  // namespace wuhu::ownership
