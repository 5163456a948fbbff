#include "storage/postgres_store.hpp"

#include "runtime/secrets.hpp"
#include "session/codec.hpp"
#include "session/overloaded.hpp"
#include "session/summary.hpp"
#include "storage/pg_batch.hpp"
#include "storage/pg_migrations.hpp"
#include "storage/postgres_pool.hpp"
#include "storage/postgres_schema.hpp"
#include "storage/rows.hpp"

#include <pqxx/pqxx>

#include <array>
#include <limits>
#include <optional>
#include <stdexcept>

namespace wuhu::storage {

namespace s = wuhu::session;
namespace json = boost::json;

namespace {

// A count kept in a bigint column: clamped.
std::int64_t as_bigint(std::uint64_t n) {
    return static_cast<std::int64_t>(
        std::min<std::uint64_t>(n, static_cast<std::uint64_t>(INT64_MAX)));
}

}  // namespace

namespace {

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
        const auto m = postgres_migrations();
        apply_pg_migrations(w, options_.schema, "migrations", m.data(), m.size());
        w.commit();
    } catch (const pqxx::failure& e) {
        // libpq may echo the connection string: its secrets never reach the message.
        throw std::runtime_error("postgres at " + runtime::redacted_url(options_.dsn) + ": " +
                                 runtime::scrubbed(e.what(), options_.dsn));
    }
}

postgres_store::~postgres_store() = default;

// ------------------------------------------------------------------------------ the log

namespace {

// A row's key; 0, which expand_row refuses, for one that is not positive.
std::uint64_t key_of(const pqxx::field& f) {
    const auto k = f.as<std::int64_t>();
    return k > 0 ? static_cast<std::uint64_t>(k) : 0;
}

// The stored state of session `id` (nullopt: there is none, or, when `fence` is given, its
// stored epoch is not that one). Throws pqxx's errors.
result<std::optional<session_state>> load_state(pqxx::connection& c, const std::string& id,
                                                std::optional<lease_epoch> fence) {
    pqxx::nontransaction n(c);
    auto rows = n.exec_prepared("load_all", id);
    if (rows.empty() || rows[0][0].as<int>() != 0 ||
        (fence && rows[0][8].as<std::int64_t>() != static_cast<std::int64_t>(fence->value))) {
        return std::optional<session_state>{};
    }
    state_builder b;
    std::vector<json::value> values;
    for (std::size_t i = 1; i < rows.size(); ++i) {
        const auto& row = rows[i];
        const char* body = row[4].c_str();
        const int kind = row[0].as<int>();
        if (kind == 3) {
            b.timer(body);
            continue;
        }
        const int lane = row[1].as<int>();
        values.clear();
        if (lane < 0 || lane > 2 ||
            !expand_row(body, key_of(row[2]), row[9].as<std::int64_t>(),
                        kind == 1 ? "id" : "seq", 0, values)) {
            return errc::corrupt;
        }
        for (const auto& v : values) {
            if (kind == 1) {
                b.entry(v);
            } else {
                b.fact(static_cast<s::lane>(lane), v);
            }
        }
    }
    const auto& sess = rows[0];
    b.registers(sess[4].is_null() ? "" : sess[4].c_str(), sess[6].as<bool>(), sess[7].as<bool>());
    auto st = b.finish();
    if (!st) {
        return st.error();
    }
    return std::optional<session_state>{std::move(*st)};
}

}  // namespace

class postgres_log final : public session_log {
  public:
    postgres_log(postgres_store& store, session_id id, lease_epoch epoch)
        : session_log(std::move(id), epoch), store_(store) {}

  protected:
    result<session_state> do_load() override {
        return with_connection([&](pqxx::connection& c) -> result<session_state> {
            auto st = load_state(c, id().str(), epoch());
            if (!st) {
                return st.error();
            }
            if (!*st) {
                return errc::lease_lost;  // removed, or a newer owner opened it
            }
            return std::move(**st);
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
                if (!expand_row(row[2].c_str(), key_of(row[0]), row[1].as<std::int64_t>(), "id",
                                from.transcript, rows.entries)) {
                    return errc::corrupt;
                }
            }
            for (s::lane l : s::all_lanes) {
                for (const auto& row : t.exec_prepared("load_facts_since", id().str(),
                                                       static_cast<int>(s::index_of(l)),
                                                       static_cast<std::int64_t>(from.of(l)))) {
                    if (!expand_row(row[2].c_str(), key_of(row[0]), row[1].as<std::int64_t>(),
                                    "seq", from.of(l), rows.facts[s::index_of(l)])) {
                        return errc::corrupt;
                    }
                }
            }
            rows.settings_json = sess[0][1].is_null() ? "" : sess[0][1].c_str();
            rows.paused = sess[0][2].as<bool>();
            rows.has_work = sess[0][3].as<bool>();
            rows.usage_json = sess[0][5].is_null() ? "" : sess[0][5].c_str();
            t.commit();
            return patch_from_rows(from, *to, rows);
        });
    }

    result<void> do_commit(const session_state& before, const action_list& actions) override {
        if (auto one = one_statement(actions)) {
            return with_connection([&](pqxx::connection& c) -> result<void> {
                pqxx::nontransaction n(c);
                auto r = fenced(n, "commit", before, actions, one->settings, one->entry_seqs,
                                one->entry_ats, one->entries, one->fact_lanes, one->fact_seqs,
                                one->fact_ats, one->facts);
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
            write(w, sid, actions);
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
        std::optional<std::string> usage;  // null: unchanged
        if (const auto after = s::counted(before.usage, actions); after != before.usage) {
            usage = dump(s::to_json(after));
        }
        return tx.exec_prepared(
            statement, id().str(), static_cast<std::int64_t>(epoch().value),
            encode_version(before.version()), encode_version(s::advance(before.version(), actions)),
            sum.has_work, sum.paused, static_cast<std::int64_t>(sum.lanes[0]),
            static_cast<std::int64_t>(sum.lanes[1]), static_cast<std::int64_t>(sum.lanes[2]),
            static_cast<std::int64_t>(sum.timers), next_timer, sum.last_activity.value, usage,
            static_cast<std::int64_t>(sum.approvals), as_bigint(sum.cost), as_bigint(sum.tokens),
            more...);
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

    // The rows a commit appends (storage/pg_batch.hpp): its entries', and each lane's facts'.
    struct log_rows {
        batch_row entries{"id"};
        std::array<batch_row, 3> facts{batch_row{"seq"}, batch_row{"seq"}, batch_row{"seq"}};
    };
    static log_rows rows_of(const action_list& actions) {
        log_rows r;
        for (const auto& a : actions) {
            if (const auto* e = std::get_if<s::entry_appended>(&a)) {
                r.entries.add(s::to_json(e->e), e->e.id.value, e->e.at.value);
            } else if (const auto* f = std::get_if<s::journal_recorded>(&a)) {
                r.facts[s::index_of(f->in)].add(s::to_json(f->j), f->j.seq.value, f->j.at.value);
            }
        }
        return r;
    }

    // The parameters of the one-statement commit; none when the actions touch timers (a
    // commit that schedules and clears one needs its statements in order). The keys of the
    // rows go as arrays of numbers beside their bodies, so that PostgreSQL reads each body
    // once, to split the array, and stores its text as it came.
    struct one_commit {
        std::optional<std::string> settings;
        std::string entry_seqs = "{", entry_ats = "{", entries = "[";
        std::string fact_lanes = "{", fact_seqs = "{", fact_ats = "{", facts = "[";
    };
    // Appends `item` to a PostgreSQL array literal or a JSON array begun with its bracket.
    static void add(std::string& list, std::string_view item) {
        if (list.size() > 1) {
            list += ',';
        }
        list += item;
    }
    static std::optional<one_commit> one_statement(const action_list& actions) {
        one_commit o;
        for (const auto& a : actions) {
            if (const auto* st = std::get_if<s::settings_set>(&a)) {
                o.settings = encode_settings(st->value);
            } else if (std::holds_alternative<s::timer_scheduled>(a) ||
                       std::holds_alternative<s::timer_cleared>(a)) {
                return std::nullopt;
            }
        }
        auto rows = rows_of(actions);
        if (!rows.entries.empty()) {
            add(o.entry_seqs, std::to_string(rows.entries.key()));
            add(o.entry_ats, std::to_string(rows.entries.at()));
            add(o.entries, rows.entries.body());
        }
        for (s::lane l : s::all_lanes) {
            auto& facts = rows.facts[s::index_of(l)];
            if (!facts.empty()) {
                add(o.fact_lanes, std::to_string(static_cast<int>(s::index_of(l))));
                add(o.fact_seqs, std::to_string(facts.key()));
                add(o.fact_ats, std::to_string(facts.at()));
                add(o.facts, facts.body());
            }
        }
        for (auto* list : {&o.entry_seqs, &o.entry_ats, &o.fact_lanes, &o.fact_seqs, &o.fact_ats}) {
            *list += '}';
        }
        o.entries += ']';
        o.facts += ']';
        return o;
    }

    // The statements of a commit that touches timers, after its fence.
    static void write(pqxx::work& w, const std::string& sid, const action_list& actions) {
        auto rows = rows_of(actions);
        if (!rows.entries.empty()) {
            w.exec_prepared0("insert_entry", sid, static_cast<std::int64_t>(rows.entries.key()),
                             rows.entries.at(), rows.entries.body());
        }
        for (s::lane l : s::all_lanes) {
            auto& facts = rows.facts[s::index_of(l)];
            if (!facts.empty()) {
                w.exec_prepared0("insert_fact", sid, static_cast<int>(s::index_of(l)),
                                 static_cast<std::int64_t>(facts.key()), facts.at(), facts.body());
            }
        }
        for (const auto& a : actions) {
            std::visit(s::overloaded{
                           [&](const s::settings_set& x) {
                               w.exec_prepared0("set_settings", sid, encode_settings(x.value));
                           },
                           [&](const s::timer_scheduled& x) {
                               w.exec_prepared0("insert_timer", sid, x.t.id.str(),
                                                dump(s::to_json(x.t)));
                           },
                           [&](const s::timer_cleared& x) {
                               w.exec_prepared0("delete_timer", sid, x.id.str());
                           },
                           // Entries and facts: the rows above. Registers: the fence.
                           [](const auto&) {},
                       },
                       a);
        }
    }

    postgres_store& store_;
};

result<std::unique_ptr<session_log>> postgres_store::do_open(const session_id& id,
                                                             lease_epoch epoch, open_mode mode) {
    try {
        auto l = acquire();
        bool made = false;
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
            made = r[0][4].as<bool>();
        } catch (const pqxx::broken_connection&) {
            l.mark_broken();
            throw;
        }
        auto log = std::make_unique<postgres_log>(*this, id, epoch);
        log->set_created(made);
        return std::unique_ptr<session_log>(std::move(log));
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

result<std::optional<session_state>> postgres_store::read(const session_id& id) {
    try {
        auto l = acquire();
        try {
            return load_state(*l, id.str(), std::nullopt);  // no epoch: not fenced
        } catch (const pqxx::broken_connection&) {
            l.mark_broken();
            throw;
        }
    } catch (const pqxx::data_exception&) {
        return errc::corrupt;
    } catch (const pqxx::failure&) {
        return errc::unavailable;
    } catch (const std::exception&) {
        return errc::unavailable;  // as the log's operations (a row that does not convert)
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
            // $1 after, $2 has_work, $3 needing an owner by, $4 ids, $5 limit, $6 before, $7
            // awaiting approval, $8 after_cost (by cost: the cursor is ($8, $9)); a null one does
            // not filter.
            const auto range = range_of(q.tenant, q.by_cost ? std::nullopt : q.after);
            std::optional<std::string> after, before;
            if (!range.after.empty()) {
                after = range.after;
            }
            if (!range.before.empty()) {
                before = range.before;
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
            where += after ? " AND session_id > $1" : " AND $1::text IS NULL";
            where += before ? " AND session_id < $6" : " AND $6::text IS NULL";
            if (q.tenant && q.tenant->empty()) {
                where += " AND strpos(session_id, '.') = 0";  // sessions of no tenant
            }
            where += q.has_work ? " AND has_work = $2" : " AND $2::boolean IS NULL";
            where += q.needing_owner_by ? " AND ((has_work AND NOT paused) OR next_timer <= $3)"
                                        : " AND $3::bigint IS NULL";
            where += q.ids ? " AND session_id = ANY($4::text[])" : " AND $4::text IS NULL";
            where += q.awaiting_approval ? " AND (approvals > 0) = $7" : " AND $7::boolean IS NULL";
            std::optional<std::int64_t> after_cost;
            std::optional<std::string> after_id;
            if (q.by_cost && q.after_cost) {
                after_cost = as_bigint(*q.after_cost);
                after_id = q.after ? q.after->str() : std::string();
                where += " AND (cost < $8 OR (cost = $8 AND session_id > $9))";
            } else {
                where += " AND $8::bigint IS NULL AND $9::text IS NULL";
            }
            auto rows = n.exec_params(
                "SELECT session_id, has_work, paused, lane_system, lane_steer, lane_follow_up, "
                "timers, next_timer, last_activity, approvals, cost, tokens FROM sessions " +
                    where +
                    (q.by_cost ? " ORDER BY cost DESC, session_id" : " ORDER BY session_id") +
                    " LIMIT $5",
                after, q.has_work, by, ids, limit, before, q.awaiting_approval, after_cost,
                after_id);
            std::vector<catalog_entry> out;
            for (const auto& row : rows) {
                auto sid = session_id::parse_key(row[0].c_str());
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
                sum.approvals = row[9].as<std::uint32_t>();
                sum.cost = static_cast<std::uint64_t>(row[10].as<std::int64_t>());
                sum.tokens = static_cast<std::uint64_t>(row[11].as<std::int64_t>());
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
