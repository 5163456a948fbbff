#include "storage/postgres_store.hpp"

#include "session/codec.hpp"
#include "session/overloaded.hpp"
#include "session/summary.hpp"
#include "storage/pg_migrations.hpp"
#include "storage/rows.hpp"

#include <dlfcn.h>
#include <libpq-fe.h>
#include <pqxx/pqxx>

#include <limits>
#include <optional>
#include <stdexcept>

// libpqxx 6.4 leaks a PGresult whenever a connection breaks under a query: make_result()
// asks for the client encoding before it wraps the result (whose deleter would free it), and
// PQclientEncoding() answers -1 on a broken connection, so encoding_id() throws first (jtv/libpqxx
// #500, fixed in 7.7; Debian 12 ships 6.4.5). LeakSanitizer then fails every worker that saw a
// database outage. This definition takes libpq's place for libpqxx (it is in the executable):
// on a broken connection it answers the encoding the connection had, libpqxx wraps the result,
// and its own check then reports the broken connection, freeing the result on the way.
extern "C" int pg_char_to_encoding(const char* name);  // exported by libpq

extern "C" int PQclientEncoding(const PGconn* conn) {
    using real_fn = int (*)(const PGconn*);
    static const auto real = reinterpret_cast<real_fn>(dlsym(RTLD_NEXT, "PQclientEncoding"));
    const int enc = real(conn);
    if (enc != -1 || conn == nullptr) {
        return enc;
    }
    const char* name = PQparameterStatus(conn, "client_encoding");
    const int had = name != nullptr ? pg_char_to_encoding(name) : -1;
    return had >= 0 ? had : 0;  // 0: SQL_ASCII, only to name a result about to be discarded
}

namespace wuhu::storage {

namespace s = wuhu::session;
namespace json = boost::json;

namespace {

// Versioned migrations; `migrations.version` records what was applied.
const char* const migrations[] = {
    R"(CREATE TABLE sessions (
           session_id text PRIMARY KEY,
           epoch bigint NOT NULL,
           version text NOT NULL DEFAULT '0,0,0,0',
           settings jsonb,
           paused boolean NOT NULL DEFAULT false,
           has_work boolean NOT NULL DEFAULT false);
       CREATE INDEX sessions_has_work ON sessions (session_id) WHERE has_work;
       CREATE TABLE transcript (
           session_id text NOT NULL, seq bigint NOT NULL, at bigint NOT NULL, body jsonb NOT NULL,
           PRIMARY KEY (session_id, seq));
       CREATE TABLE journal (
           session_id text NOT NULL, lane smallint NOT NULL, seq bigint NOT NULL,
           at bigint NOT NULL, body jsonb NOT NULL,
           PRIMARY KEY (session_id, lane, seq));
       CREATE TABLE timers (
           session_id text NOT NULL, id text NOT NULL, body jsonb NOT NULL,
           PRIMARY KEY (session_id, id));)",
    // The epoch each removal ran at: opens at that epoch or older are refused.
    R"(CREATE TABLE removed_sessions (session_id text PRIMARY KEY, epoch bigint NOT NULL);)",
    // The index of the sweep and the fleet view, written by every commit's fence. The backfill
    // runs before the ids change collation, while the other tables' indexes still serve it.
    // Session ids then sort by byte ("C"), as everywhere else in the fleet, whatever the
    // database's locale.
    R"(ALTER TABLE sessions
           ADD COLUMN lane_system integer NOT NULL DEFAULT 0,
           ADD COLUMN lane_steer integer NOT NULL DEFAULT 0,
           ADD COLUMN lane_follow_up integer NOT NULL DEFAULT 0,
           ADD COLUMN timers integer NOT NULL DEFAULT 0,
           ADD COLUMN next_timer bigint,
           ADD COLUMN last_activity bigint NOT NULL DEFAULT 0;
       UPDATE sessions s SET
           lane_system = (SELECT count(*) FILTER (WHERE j.body->>'fact' = 'enqueued')
                                 - count(*) FILTER (WHERE j.body->>'fact' <> 'enqueued')
                          FROM journal j WHERE j.session_id = s.session_id AND j.lane = 0),
           lane_steer = (SELECT count(*) FILTER (WHERE j.body->>'fact' = 'enqueued')
                                - count(*) FILTER (WHERE j.body->>'fact' <> 'enqueued')
                         FROM journal j WHERE j.session_id = s.session_id AND j.lane = 1),
           lane_follow_up = (SELECT count(*) FILTER (WHERE j.body->>'fact' = 'enqueued')
                                    - count(*) FILTER (WHERE j.body->>'fact' <> 'enqueued')
                             FROM journal j WHERE j.session_id = s.session_id AND j.lane = 2),
           timers = (SELECT count(*) FROM timers t WHERE t.session_id = s.session_id),
           next_timer = (SELECT min((t.body->>'due')::bigint) FROM timers t
                         WHERE t.session_id = s.session_id),
           -- The time of the last entry and of each lane's last fact (session::summarize).
           last_activity = GREATEST(
               coalesce((SELECT at FROM transcript x WHERE x.session_id = s.session_id
                         ORDER BY seq DESC LIMIT 1), 0),
               coalesce((SELECT at FROM journal j WHERE j.session_id = s.session_id
                         AND j.lane = 0 ORDER BY seq DESC LIMIT 1), 0),
               coalesce((SELECT at FROM journal j WHERE j.session_id = s.session_id
                         AND j.lane = 1 ORDER BY seq DESC LIMIT 1), 0),
               coalesce((SELECT at FROM journal j WHERE j.session_id = s.session_id
                         AND j.lane = 2 ORDER BY seq DESC LIMIT 1), 0));
       ALTER TABLE sessions ALTER COLUMN session_id TYPE text COLLATE "C";
       CREATE INDEX sessions_next_timer ON sessions (next_timer) WHERE next_timer IS NOT NULL;)",
    // Bodies as the codec's compact JSON text rather than jsonb: a fifth smaller on disk, and no
    // jsonb conversion at each commit and load. Nothing queries inside a body.
    R"(ALTER TABLE transcript ALTER COLUMN body TYPE text USING body::text;
       ALTER TABLE journal ALTER COLUMN body TYPE text USING body::text;
       ALTER TABLE timers ALTER COLUMN body TYPE text USING body::text;)",
};

void prepare_statements(pqxx::connection& c) {
    // Opening in one statement (one round trip, its own transaction): the removal floor, read
    // under a share lock (a removal holds that row's lock until it commits); the open, unless
    // the session was removed at this epoch or later; the removal forgotten once a newer session
    // is open. Answers the floor, whether it opened, and whether the row was there before.
    for (const auto* mode : {"create", "existing"}) {
        const std::string open =
            std::string(mode) == "create"
                ? "INSERT INTO sessions (session_id, epoch) SELECT $1, $2 "
                  "  WHERE NOT EXISTS (SELECT 1 FROM floor WHERE epoch >= $2) "
                  "  ON CONFLICT (session_id) DO UPDATE SET epoch = EXCLUDED.epoch "
                  "  WHERE sessions.epoch <= EXCLUDED.epoch RETURNING epoch"
                : "UPDATE sessions SET epoch = $2 WHERE session_id = $1 AND epoch <= $2 "
                  "  AND NOT EXISTS (SELECT 1 FROM floor WHERE epoch >= $2) RETURNING epoch";
        c.prepare(std::string("open_") + mode + "_one",
                  "WITH floor AS (SELECT epoch FROM removed_sessions WHERE session_id = $1 "
                  "FOR SHARE), opened AS (" + open + "), "
                  "forgot AS (DELETE FROM removed_sessions WHERE session_id = $1 AND epoch < $2 "
                  "  AND EXISTS (SELECT 1 FROM opened)) "
                  "SELECT (SELECT epoch FROM floor), (SELECT count(*) FROM opened), "
                  "       (SELECT count(*) FROM sessions WHERE session_id = $1), "
                  // A session that did not exist commits without waiting for its WAL: nobody
                  // owned it before (no stale owner to fence out), and the commit of its first
                  // command, which is acknowledged, flushes the WAL this one wrote before it.
                  "       set_config('synchronous_commit', CASE WHEN "
                  "         (SELECT count(*) FROM opened) = 1 AND "
                  "         NOT EXISTS (SELECT 1 FROM sessions WHERE session_id = $1) "
                  "         THEN 'off' ELSE 'on' END, true)");
    }
    // Also writes the registers and the index (what the commit leaves, session/summary.hpp).
    const std::string fence_set =
        "UPDATE sessions SET version = $4, has_work = $5, paused = $6, lane_system = $7, "
        "lane_steer = $8, lane_follow_up = $9, timers = $10, next_timer = $11, "
        "last_activity = $12";
    const std::string fence_where = " WHERE session_id = $1 AND epoch = $2 AND version = $3";
    c.prepare("fence", fence_set + fence_where);
    c.prepare("fence_why", "SELECT epoch FROM sessions WHERE session_id = $1");
    // A whole commit in one statement (no timers): the fence, the registers and the index, the
    // settings ($13, null: unchanged), the entries ($14: their JSON, an array) and the journal
    // facts ($15: [lane, seq, at, fact] each), written only when the fence held. One round trip
    // and no BEGIN/COMMIT: a statement outside a transaction block is one. Its answer says
    // whether the fence held, and the epoch the session has (lease lost, or a conflict).
    c.prepare("commit",
              "WITH fence AS (" + fence_set + ", settings = coalesce($13::jsonb, settings)" +
                  fence_where + " RETURNING 1), "
              "entries AS ("
              "  INSERT INTO transcript (session_id, seq, at, body) "
              "  SELECT $1, (e->>'id')::bigint, (e->>'at')::bigint, e::text "
              "  FROM json_array_elements($14::json) e WHERE EXISTS (SELECT 1 FROM fence)), "
              "facts AS ("
              "  INSERT INTO journal (session_id, lane, seq, at, body) "
              "  SELECT $1, (f->>0)::smallint, (f->>1)::bigint, (f->>2)::bigint, (f->3)::text "
              "  FROM json_array_elements($15::json) f WHERE EXISTS (SELECT 1 FROM fence)) "
              "SELECT (SELECT count(*) FROM fence), "
              "       (SELECT epoch FROM sessions WHERE session_id = $1)");
    c.prepare("insert_entry",
              "INSERT INTO transcript (session_id, seq, at, body) VALUES ($1, $2, $3, $4)");
    c.prepare("insert_fact",
              "INSERT INTO journal (session_id, lane, seq, at, body) "
              "VALUES ($1, $2, $3, $4, $5)");
    c.prepare("set_settings", "UPDATE sessions SET settings = $2::jsonb WHERE session_id = $1");
    c.prepare("insert_timer",
              "INSERT INTO timers (session_id, id, body) VALUES ($1, $2, $3)");
    c.prepare("delete_timer", "DELETE FROM timers WHERE session_id = $1 AND id = $2");
    c.prepare("load_session",
              "SELECT version, settings::text, paused, has_work, epoch FROM sessions "
              "WHERE session_id = $1");
    // The whole session in one statement (one snapshot, one round trip): its row (k 0), then
    // its entries (1), journal facts (2) and timers (3), in order.
    c.prepare("load_all",
              "SELECT 0 AS k, 0 AS lane, 0::bigint AS seq, ''::text AS tid, settings::text, "
              "       version, paused, has_work, epoch FROM sessions WHERE session_id = $1 "
              "UNION ALL SELECT 1, 0, seq, '', body, NULL, NULL, NULL, NULL "
              "  FROM transcript WHERE session_id = $1 "
              "UNION ALL SELECT 2, lane, seq, '', body, NULL, NULL, NULL, NULL "
              "  FROM journal WHERE session_id = $1 "
              "UNION ALL SELECT 3, 0, 0, id, body, NULL, NULL, NULL, NULL "
              "  FROM timers WHERE session_id = $1 "
              "ORDER BY k, lane, seq, tid");
    c.prepare("load_entries",
              "SELECT body FROM transcript WHERE session_id = $1 AND seq > $2 ORDER BY seq");
    c.prepare("load_facts_since",
              "SELECT body FROM journal WHERE session_id = $1 "
              "AND lane = $2 AND seq > $3 ORDER BY seq");
}

std::string dump(const json::value& v) {
    return json::serialize(v);
}

// A PostgreSQL array literal of session ids, each double-quoted: an unquoted NULL (any case)
// would be a NULL element, and "null" is a valid session id. Ids are [A-Za-z0-9_-]: nothing
// inside the quotes to escape.
std::string text_array(const std::vector<session_id>& ids) {
    std::string out = "{";
    for (std::size_t i = 0; i < ids.size(); ++i) {
        out += (i == 0 ? "\"" : ",\"") + ids[i].str() + "\"";
    }
    return out + "}";
}

}  // namespace

// ------------------------------------------------------------------------------ the pool

struct postgres_store::connection {
    explicit connection(const std::string& dsn) : c(dsn) {}
    pqxx::connection c;
};

class postgres_store::pooled {
  public:
    pooled(postgres_store& s, std::unique_ptr<connection> c) : store_(&s), c_(std::move(c)) {}
    pooled(pooled&& o) noexcept = default;
    ~pooled() {
        if (c_) {
            store_->give_back(std::move(c_), broken_ ? health::broken : health::usable);
        }
    }
    pqxx::connection& operator*() { return c_->c; }
    void mark_broken() { broken_ = true; }

  private:
    postgres_store* store_;
    std::unique_ptr<connection> c_;
    bool broken_ = false;
};

std::unique_ptr<postgres_store::connection> postgres_store::connect() {
    auto c = std::make_unique<connection>(options_.dsn);
    {
        pqxx::nontransaction n(c->c);
        n.exec0("SET search_path TO " + options_.schema);
        n.exec0("SET synchronous_commit TO on");
    }
    prepare_statements(c->c);
    return c;
}

postgres_store::pooled postgres_store::acquire() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, options_.acquire_timeout,
                      [&] { return !idle_.empty() || total_ < options_.pool_size; })) {
        throw pqxx::broken_connection("no pooled connection became free in time");
    }
    if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        return pooled(*this, std::move(c));
    }
    ++total_;
    lock.unlock();
    try {
        return pooled(*this, connect());
    } catch (...) {
        std::lock_guard again(mu_);
        --total_;
        cv_.notify_one();
        throw;
    }
}

void postgres_store::give_back(std::unique_ptr<connection> c, health h) {
    std::lock_guard lock(mu_);
    if (h == health::broken || !c->c.is_open()) {
        // One connection broke: the server went away or dropped its connections, and the
        // idle ones (likely broken too) would each fail one more operation. They are opened
        // afresh when needed.
        total_ -= 1 + idle_.size();
        idle_.clear();
    } else {
        idle_.push_back(std::move(c));
    }
    cv_.notify_one();
}

postgres_store::postgres_store(postgres_options options) : options_(std::move(options)) {
    if (!storage::valid_pg_schema(options_.schema)) {
        throw std::invalid_argument("postgres schema must match [a-z_][a-z0-9_]*");
    }
    if (options_.pool_size == 0) {
        throw std::invalid_argument("postgres pool size must be at least 1");
    }
    try {
        pqxx::connection c(options_.dsn);
        pqxx::work w(c);
        apply_pg_migrations(w, options_.schema, "migrations", migrations, std::size(migrations));
        w.commit();
    } catch (const pqxx::failure& e) {
        throw std::runtime_error(std::string("postgres: ") + e.what());
    }
}

postgres_store::~postgres_store() = default;

// ------------------------------------------------------------------------------ the log

class postgres_log final : public session_log {
  public:
    postgres_log(postgres_store& store, session_id id, lease_epoch epoch)
        : session_log(std::move(id), epoch), store_(store) {}

  protected:
    result<session_state> do_load() override {
        return with_connection([&](pqxx::connection& c) -> result<session_state> {
            pqxx::nontransaction n(c);
            auto rows = n.exec_prepared("load_all", id().str());
            if (rows.empty() || rows[0][0].as<int>() != 0 ||
                rows[0][8].as<std::int64_t>() != static_cast<std::int64_t>(epoch().value)) {
                return errc::lease_lost;  // removed, or a newer owner opened it
            }
            state_builder b;
            for (std::size_t i = 1; i < rows.size(); ++i) {
                const auto& row = rows[i];
                const char* body = row[4].c_str();
                switch (row[0].as<int>()) {
                    case 1:
                        b.entry(body);
                        break;
                    case 2: {
                        auto lane = row[1].as<int>();
                        if (lane < 0 || lane > 2) {
                            return errc::corrupt;
                        }
                        b.fact(static_cast<s::lane>(lane), body);
                        break;
                    }
                    default:
                        b.timer(body);
                        break;
                }
            }
            const auto& sess = rows[0];
            b.registers(sess[4].is_null() ? "" : sess[4].c_str(), sess[6].as<bool>(),
                        sess[7].as<bool>());
            return b.finish();
        });
    }

    result<s::patch> do_since(const s::version_vector& from) override {
        return with_connection([&](pqxx::connection& c) -> result<s::patch> {
            pqxx::transaction<pqxx::repeatable_read, pqxx::read_only> t(c);
            auto sess = t.exec_prepared("load_session", id().str());
            if (sess.empty()) {
                return errc::lease_lost;
            }
            auto to = decode_version(sess[0][0].c_str());
            if (!to) {
                return to.error();
            }
            if (!from.le(*to)) {
                return s::errc::invalid_version;
            }
            patch_rows rows;
            for (const auto& row : t.exec_prepared("load_entries", id().str(),
                                                   static_cast<std::int64_t>(from.transcript))) {
                rows.entries.emplace_back(row[0].c_str());
            }
            for (s::lane l : s::all_lanes) {
                for (const auto& row : t.exec_prepared("load_facts_since", id().str(),
                                                       static_cast<int>(s::index_of(l)),
                                                       static_cast<std::int64_t>(from.of(l)))) {
                    rows.facts[s::index_of(l)].emplace_back(row[0].c_str());
                }
            }
            rows.settings_json = sess[0][1].is_null() ? "" : sess[0][1].c_str();
            rows.paused = sess[0][2].as<bool>();
            rows.has_work = sess[0][3].as<bool>();
            t.commit();
            return patch_from_rows(from, *to, rows);
        });
    }

    result<void> do_commit(const session_state& before, const action_list& actions) override {
        if (auto one = one_statement(actions)) {
            return with_connection([&](pqxx::connection& c) -> result<void> {
                pqxx::nontransaction n(c);
                auto r = fenced(n, "commit", before, actions, one->settings, one->entries,
                                one->facts);
                if (r[0][0].as<std::int64_t>() == 1) {
                    return {};
                }
                return refusal(r, 1);
            });
        }
        return with_connection([&](pqxx::connection& c) -> result<void> {
            pqxx::work w(c);
            const std::string sid = id().str();
            // The fence: the first statement of the transaction.
            if (fenced(w, "fence", before, actions).affected_rows() != 1) {
                return refusal(w.exec_prepared("fence_why", sid), 0);
            }
            for (const auto& a : actions) {
                write(w, sid, a);
            }
            w.commit();
            return {};
        });
    }

  private:
    template <class F>
    auto with_connection(F&& f) -> decltype(f(std::declval<pqxx::connection&>())) {
        std::optional<postgres_store::pooled> l;
        try {
            l.emplace(store_.acquire());
            return f(**l);
        } catch (const pqxx::in_doubt_error&) {
            if (l) {
                l->mark_broken();
            }
            return errc::unavailable;  // the commit may or may not have happened
        } catch (const pqxx::broken_connection&) {
            if (l) {
                l->mark_broken();
            }
            return errc::unavailable;
        } catch (const pqxx::data_exception&) {
            return errc::corrupt;
        } catch (const pqxx::failure&) {
            return errc::unavailable;
        } catch (const std::exception&) {
            return errc::unavailable;
        }
    }

    // Runs `statement` ("fence", or "commit" with its `more` parameters): the fence of a
    // commit of `actions` at `before`, with the registers and index it leaves.
    template <class Tx, class... More>
    pqxx::result fenced(Tx& tx, const char* statement, const session_state& before,
                        const action_list& actions, const More&... more) {
        const auto sum = s::summarize(before, actions);
        std::optional<std::int64_t> next_timer;
        if (sum.next_timer) {
            next_timer = sum.next_timer->value;
        }
        return tx.exec_prepared(
            statement, id().str(), static_cast<std::int64_t>(epoch().value),
            encode_version(before.version()), encode_version(s::advance(before.version(), actions)),
            sum.has_work, sum.paused, static_cast<std::int64_t>(sum.lanes[0]),
            static_cast<std::int64_t>(sum.lanes[1]), static_cast<std::int64_t>(sum.lanes[2]),
            static_cast<std::int64_t>(sum.timers), next_timer, sum.last_activity.value, more...);
    }

    // Why a fence did not hold, from the session's epoch in column `col` of `r` (no row, or
    // null: the session was removed).
    result<void> refusal(const pqxx::result& r, int col) const {
        if (r.empty() || r[0][col].is_null() ||
            r[0][col].as<std::int64_t>() != static_cast<std::int64_t>(epoch().value)) {
            return errc::lease_lost;
        }
        return errc::conflict;
    }

    // The parameters of the one-statement commit; none when the actions touch timers (a
    // commit that schedules and clears one needs its statements in order).
    struct one_commit {
        std::optional<std::string> settings;
        std::string entries = "[";
        std::string facts = "[";
    };
    static std::optional<one_commit> one_statement(const action_list& actions) {
        one_commit o;
        for (const auto& a : actions) {
            if (const auto* e = std::get_if<s::entry_appended>(&a)) {
                o.entries += (o.entries.size() > 1 ? "," : "") + dump(s::to_json(e->e));
            } else if (const auto* f = std::get_if<s::journal_recorded>(&a)) {
                o.facts += (o.facts.size() > 1 ? "," : "") +
                           dump(json::array{static_cast<int>(s::index_of(f->in)),
                                            static_cast<std::int64_t>(f->j.seq.value), f->j.at.value,
                                            s::to_json(f->j)});
            } else if (const auto* st = std::get_if<s::settings_set>(&a)) {
                o.settings = encode_settings(st->value);
            } else if (std::holds_alternative<s::timer_scheduled>(a) ||
                       std::holds_alternative<s::timer_cleared>(a)) {
                return std::nullopt;
            }
        }
        o.entries += ']';
        o.facts += ']';
        return o;
    }

    static void write(pqxx::work& w, const std::string& sid, const s::action& a) {
        std::visit(
            s::overloaded{
                [&](const s::entry_appended& x) {
                    w.exec_prepared0("insert_entry", sid, static_cast<std::int64_t>(x.e.id.value),
                                     x.e.at.value, dump(s::to_json(x.e)));
                },
                [&](const s::journal_recorded& x) {
                    w.exec_prepared0("insert_fact", sid, static_cast<int>(s::index_of(x.in)),
                                     static_cast<std::int64_t>(x.j.seq.value), x.j.at.value,
                                     dump(s::to_json(x.j)));
                },
                [&](const s::settings_set& x) {
                    w.exec_prepared0("set_settings", sid, encode_settings(x.value));
                },
                // Registers: the fence wrote them.
                [](const s::has_work_set&) {},
                [](const s::paused_set&) {},
                [&](const s::timer_scheduled& x) {
                    w.exec_prepared0("insert_timer", sid, x.t.id.str(), dump(s::to_json(x.t)));
                },
                [&](const s::timer_cleared& x) {
                    w.exec_prepared0("delete_timer", sid, x.id.str());
                },
            },
            a);
    }

    postgres_store& store_;
};

result<std::unique_ptr<session_log>> postgres_store::do_open(const session_id& id,
                                                             lease_epoch epoch, open_mode mode) {
    try {
        auto l = acquire();
        try {
            pqxx::nontransaction n(*l);
            const auto e = static_cast<std::int64_t>(epoch.value);
            auto r = n.exec_prepared(
                mode == open_mode::create ? "open_create_one" : "open_existing_one", id.str(), e);
            if (!r[0][0].is_null() && e <= r[0][0].as<std::int64_t>()) {
                return errc::lease_lost;  // removed at this epoch or later
            }
            if (r[0][1].as<std::int64_t>() == 0) {
                // A newer epoch has the row; or, opening an existing session, there is none,
                // unless another worker created it since this statement's snapshot: ask again.
                const bool there = mode == open_mode::create || r[0][2].as<std::int64_t>() > 0 ||
                                   !n.exec_prepared("load_session", id.str()).empty();
                return there ? errc::lease_lost : errc::not_found;
            }
        } catch (const pqxx::broken_connection&) {
            l.mark_broken();
            throw;
        }
        return std::unique_ptr<session_log>(std::make_unique<postgres_log>(*this, id, epoch));
    } catch (const pqxx::failure&) {
        return errc::unavailable;
    }
}

result<void> postgres_store::remove(const session_id& id, lease_epoch epoch) {
    try {
        auto l = acquire();
        try {
            pqxx::work w(*l);
            const auto e = static_cast<std::int64_t>(epoch.value);
            // The floor first (its row lock orders this with every open), then the fence.
            w.exec_params0(
                "INSERT INTO removed_sessions (session_id, epoch) VALUES ($1, $2) "
                "ON CONFLICT (session_id) DO UPDATE "
                "SET epoch = GREATEST(removed_sessions.epoch, EXCLUDED.epoch)",
                id.str(), e);
            auto cur = w.exec_params("SELECT epoch FROM sessions WHERE session_id = $1 FOR UPDATE",
                                     id.str());
            if (!cur.empty() && cur[0][0].as<std::int64_t>() > e) {
                return errc::lease_lost;  // rolled back, the floor with it
            }
            // The sessions row goes last: every handle's fence (a guarded update of that row)
            // fails from then on.
            for (const char* table : {"transcript", "journal", "timers", "sessions"}) {
                w.exec_params0(std::string("DELETE FROM ") + table + " WHERE session_id = $1",
                               id.str());
            }
            w.commit();
        } catch (const pqxx::broken_connection&) {
            l.mark_broken();
            throw;
        }
        return {};
    } catch (const pqxx::failure&) {
        return errc::unavailable;
    }
}

result<bool> postgres_store::exists(const session_id& id) {
    try {
        auto l = acquire();
        try {
            pqxx::nontransaction n(*l);
            return !n.exec_params("SELECT 1 FROM sessions WHERE session_id = $1", id.str()).empty();
        } catch (const pqxx::broken_connection&) {
            l.mark_broken();
            throw;
        }
    } catch (const pqxx::failure&) {
        return errc::unavailable;
    }
}

result<std::vector<catalog_entry>> postgres_store::sessions(const catalog_query& q) {
    try {
        auto l = acquire();
        try {
            pqxx::nontransaction n(*l);
            // $1 after, $2 has_work, $3 needing an owner by, $4 ids, $5 limit; a null one does
            // not filter.
            std::optional<std::string> after;
            if (q.after) {
                after = q.after->str();
            }
            std::optional<std::int64_t> by;
            if (q.needing_owner_by) {
                by = q.needing_owner_by->value;
            }
            std::optional<std::string> ids;
            if (q.ids) {
                ids = text_array(*q.ids);
            }
            std::optional<std::int64_t> limit;
            if (q.limit != std::numeric_limits<std::size_t>::max()) {
                limit = static_cast<std::int64_t>(q.limit);
            }
            // The conditions that can use an index are spelled out only when set.
            std::string where = "WHERE true";
            where += q.after ? " AND session_id > $1" : " AND $1::text IS NULL";
            where += q.has_work ? " AND has_work = $2" : " AND $2::boolean IS NULL";
            where += q.needing_owner_by ? " AND (has_work OR next_timer <= $3)"
                                        : " AND $3::bigint IS NULL";
            where += q.ids ? " AND session_id = ANY($4::text[])" : " AND $4::text IS NULL";
            auto rows = n.exec_params(
                "SELECT session_id, has_work, paused, lane_system, lane_steer, lane_follow_up, "
                "timers, next_timer, last_activity FROM sessions " +
                    where + " ORDER BY session_id LIMIT $5",
                after, q.has_work, by, ids, limit);
            std::vector<catalog_entry> out;
            for (const auto& row : rows) {
                auto sid = session_id::parse(row[0].c_str());
                if (!sid) {
                    return errc::corrupt;
                }
                s::session_summary sum;
                sum.has_work = row[1].as<bool>();
                sum.paused = row[2].as<bool>();
                for (std::size_t i = 0; i < sum.lanes.size(); ++i) {
                    sum.lanes[i] = row[static_cast<int>(3 + i)].as<std::uint32_t>();
                }
                sum.timers = row[6].as<std::uint32_t>();
                if (!row[7].is_null()) {
                    sum.next_timer = unix_ms{row[7].as<std::int64_t>()};
                }
                sum.last_activity = unix_ms{row[8].as<std::int64_t>()};
                out.push_back({*sid, sum});
            }
            return out;
        } catch (const pqxx::broken_connection&) {
            l.mark_broken();
            throw;
        }
    } catch (const pqxx::failure&) {
        return errc::unavailable;
    }
}

}  // namespace wuhu::storage
