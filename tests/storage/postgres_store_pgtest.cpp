// The PostgreSQL store against a real server (scripts/test starts it).
#include "storage/postgres_store.hpp"
#include "storage/pg_batch.hpp"
#include "storage/postgres_schema.hpp"
#include "tests/storage/conformance.hpp"
#include "session/codec.hpp"
#include "session/reducer.hpp"
#include "session/summary.hpp"
#include "tests/support/pg_env.hpp"
#include "tests/support/random_ops.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>

namespace wuhu::testing {

namespace {

struct temp_postgres_store final : storage::forwarding_store {
    explicit temp_postgres_store(std::size_t pool = 4)
        : forwarding_store(store),
          schema(fresh_schema("t")),
          store(storage::postgres_options{pg_dsn(), schema, pool}) {}
    ~temp_postgres_store() override { drop_schema(schema); }

    std::string schema;
    storage::postgres_store store;
};

// Runs `n` random operations (random_ops.hpp) through `log`, keeping `st` in step.
void run_random(storage::session_log& log, session_state& st, std::mt19937_64& rng, int n) {
    for (int i = 0; i < n; ++i) {
        auto op = next_op(rng, st, unix_ms{1000 + i});
        if (auto r = run_store(op, log, st)) {
            apply_actions(*r, st);
        }
    }
}

// Sessions "<prefix>1".."<prefix>N", each written by 120 random operations (seeded by its number).
std::vector<std::pair<std::string, session_state>> write_random_sessions(
    storage::session_store& store, const std::string& prefix, std::uint64_t n) {
    std::vector<std::pair<std::string, session_state>> written;
    for (std::uint64_t seed = 1; seed <= n; ++seed) {
        const std::string id = prefix + std::to_string(seed);
        auto log = store.open(session_id::parse(id).value(), lease_epoch{1}).value();
        session_state st;
        std::mt19937_64 rng(seed);
        run_random(*log, st, rng, 120);
        written.emplace_back(id, st);
    }
    return written;
}

// The rows of one session's table ("transcript", or "journal" with its lanes), in order.
struct stored_row {
    int lane = 0;
    std::uint64_t seq = 0;
    std::int64_t at = 0;
    std::string body;
};
std::vector<stored_row> rows_of(const std::string& schema, const std::string& table,
                                const std::string& sid) {
    pqxx::connection c(pg_dsn());
    pqxx::nontransaction n(c);
    std::vector<stored_row> out;
    const std::string lane = table == "journal" ? "lane" : "0";
    for (auto row : n.exec("SELECT " + lane + ", seq, at, body FROM " + schema + "." + table +
                           " WHERE session_id = " + n.quote(sid) + " ORDER BY 1, seq")) {
        out.push_back({row[0].as<int>(), row[1].as<std::uint64_t>(), row[2].as<std::int64_t>(),
                       row[3].as<std::string>()});
    }
    return out;
}

// Stores a session's entries and facts as versions before migration 5 wrote them: each value
// whole, in a row of its own.
void rewrite_as_rows_of_one_value(const std::string& schema, const std::string& sid,
                                  const session_state& st) {
    pqxx::connection c(pg_dsn());
    pqxx::work w(c);
    w.exec0("SET LOCAL search_path TO " + schema);
    w.exec_params0("DELETE FROM transcript WHERE session_id = $1", sid);
    w.exec_params0("DELETE FROM journal WHERE session_id = $1", sid);
    for (const auto& e : st.transcript) {
        w.exec_params0("INSERT INTO transcript VALUES ($1, $2, $3, $4)", sid,
                       static_cast<std::int64_t>(e.id.value), e.at.value,
                       boost::json::serialize(session::to_json(e)));
    }
    for (lane l : all_lanes) {
        for (const auto& j : st.in(l).journal) {
            w.exec_params0("INSERT INTO journal VALUES ($1, $2, $3, $4, $5)", sid,
                           static_cast<int>(index_of(l)), static_cast<std::int64_t>(j.seq.value),
                           j.at.value, boost::json::serialize(session::to_json(j)));
        }
    }
    w.commit();
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Postgres, StoreConformance,
                         ::testing::Values(store_factory{
                             "postgres",
                             [] {
                                 return std::unique_ptr<storage::session_store>(
                                     std::make_unique<temp_postgres_store>());
                             }}),
                         [](const auto& info) { return info.param.name; });

TEST(PostgresStore, MigrationsAreVersionedAndIdempotent) {
    temp_postgres_store t;
    // A second store on the same schema finds it migrated and changes nothing.
    storage::postgres_store again(storage::postgres_options{pg_dsn(), t.schema, 1});
    pqxx::connection c(pg_dsn());
    pqxx::nontransaction n(c);
    auto r = n.exec("SELECT max(version), count(*) FROM " + t.schema + ".migrations");
    EXPECT_EQ(r[0][0].as<int>(), 7);
    EXPECT_EQ(r[0][1].as<int>(), 7);
}

// The index's migration fills the new columns from the stored rows: a database written before
// it lists its sessions as they are; and the bodies' migration from jsonb to text keeps every
// session loading as it was. (Both are undone by hand, then run again, on rows of one value
// each, as a database from before them holds.)
TEST(PostgresStore, TheIndexAndBodyMigrationsKeepTheStoredSessions) {
    temp_postgres_store t;
    const auto written = write_random_sessions(t.store, "old", 4);
    for (const auto& [id, st] : written) {
        rewrite_as_rows_of_one_value(t.schema, id, st);  // as a database before 3 holds them
    }
    {
        pqxx::connection c(pg_dsn());
        pqxx::work w(c);
        w.exec0("SET LOCAL search_path TO " + t.schema);
        for (const char* table : {"transcript", "journal", "timers"}) {
            w.exec0(std::string("ALTER TABLE ") + table +
                    " ALTER COLUMN body TYPE jsonb USING body::jsonb");
        }
        w.exec0("DROP INDEX sessions_next_timer");
        w.exec0(
            "ALTER TABLE sessions DROP COLUMN lane_system, DROP COLUMN lane_steer, "
            "DROP COLUMN lane_follow_up, DROP COLUMN timers, DROP COLUMN next_timer, "
            "DROP COLUMN last_activity");
        w.exec0("ALTER TABLE sessions ALTER COLUMN session_id TYPE text COLLATE \"default\"");
        w.exec0("DELETE FROM migrations WHERE version >= 3");  // and 5 runs again
        w.commit();
    }
    storage::postgres_store again(storage::postgres_options{pg_dsn(), t.schema, 1});
    auto indexed = again.sessions({}).value();
    ASSERT_EQ(indexed.size(), written.size());
    for (std::size_t i = 0; i < written.size(); ++i) {
        EXPECT_EQ(indexed[i].id.str(), written[i].first);
        EXPECT_EQ(indexed[i].summary, summarize(written[i].second)) << written[i].first;
        auto log = again.open(session_id::parse(written[i].first).value(), lease_epoch{2}).value();
        EXPECT_EQ(log->load().value(), written[i].second) << written[i].first;
    }
}

TEST(PostgresStore, RejectsASchemaNameThatIsNotAnIdentifier) {
    EXPECT_THROW(storage::postgres_store(storage::postgres_options{pg_dsn(), "x; DROP TABLE y", 1}),
                 std::invalid_argument);
}

TEST(PostgresStore, AnUnreachableServerIsAClearError) {
    EXPECT_THROW(storage::postgres_store(storage::postgres_options{
                     "host=127.0.0.1 port=1 connect_timeout=2", "wuhu", 1}),
                 std::runtime_error);
}

// A commit's entries are one row, and each lane's facts of a commit one row: the codec's
// compact JSON of each value, in an array, without the keys and shared times the row's columns
// hold. By the one-statement commit and by the transaction that commits timers alike.
TEST(PostgresStore, ACommitsValuesAreOneRowOfCompactJson) {
    temp_postgres_store t;
    auto log = t.store.open(session_id::parse("compact").value(), lease_epoch{1}).value();
    session_state st = log->load().value();
    // The assistant message and its calls' markers: one commit, one row.
    auto m = reply("calling", {{"c1", "echo"}, {"c2", "echo"}});
    auto actions = log->append_response(st, m, {call_id("c1"), call_id("c2")}, false, unix_ms{50});
    ASSERT_TRUE(actions.has_value()) << actions.error().message();
    apply_actions(*actions, st);
    auto one = rows_of(t.schema, "transcript", "compact");
    ASSERT_EQ(one.size(), 1u);
    ASSERT_EQ(st.transcript.size(), 3u);
    EXPECT_EQ(one[0].seq, 3u);
    EXPECT_EQ(one[0].at, 50);
    std::string expected = "[";
    for (const auto& e : st.transcript) {
        boost::json::object o;  // the codec's, in its order, less the id and the time
        const auto whole = session::to_json(e);
        for (const auto& [name, value] : whole.as_object()) {
            if (name != "id" && name != "at") {
                o.emplace(name, value);
            }
        }
        expected += (expected.size() > 1 ? "," : "") + boost::json::serialize(o);
    }
    EXPECT_EQ(one[0].body, expected + "]");

    // Random commits, timers among them: every row holds the values it says, compact.
    std::mt19937_64 rng(7);
    run_random(*log, st, rng, 200);
    for (const char* table : {"transcript", "journal"}) {
        const auto rows = rows_of(t.schema, table, "compact");
        std::array<std::vector<boost::json::value>, 3> values;
        for (const auto& row : rows) {
            EXPECT_EQ(row.body, boost::json::serialize(boost::json::parse(row.body)));
            auto& to = values[static_cast<std::size_t>(row.lane)];
            const std::size_t had = to.size();
            ASSERT_TRUE(storage::expand_row(row.body, row.seq, row.at,
                                            std::string(table) == "journal" ? "seq" : "id", 0, to)
                            .has_value());
            EXPECT_EQ(to.size() - had, boost::json::parse(row.body).as_array().size());
        }
        if (std::string(table) == "transcript") {
            ASSERT_EQ(values[0].size(), st.transcript.size());
            EXPECT_LT(rows.size(), st.transcript.size());
            for (std::size_t i = 0; i < st.transcript.size(); ++i) {
                EXPECT_EQ(values[0][i], session::to_json(st.transcript[i])) << i;
            }
            continue;
        }
        std::size_t facts = 0;
        for (lane l : all_lanes) {
            const auto& journal = st.in(l).journal;
            ASSERT_EQ(values[index_of(l)].size(), journal.size());
            for (std::size_t i = 0; i < journal.size(); ++i) {
                EXPECT_EQ(values[index_of(l)][i], session::to_json(journal[i])) << i;
            }
            facts += journal.size();
        }
        EXPECT_LT(rows.size(), facts);
    }
}

// Rows written before a commit's values shared a row (one value each, whole) load as they
// are, and so does a session that goes on in the new rows after them; a catch-up from any
// version reads across both.
TEST(PostgresStore, RowsOfOneValueWrittenBeforeBatchesStillLoad) {
    temp_postgres_store t;
    auto log = t.store.open(session_id::parse("mixed").value(), lease_epoch{1}).value();
    session_state st;
    std::mt19937_64 rng(11);
    run_random(*log, st, rng, 80);
    rewrite_as_rows_of_one_value(t.schema, "mixed", st);
    ASSERT_EQ(log->load().value(), st);
    const auto before = st.version();
    run_random(*log, st, rng, 80);
    ASSERT_GT(st.version().transcript, before.transcript);
    EXPECT_EQ(log->load().value(), st);
    for (std::uint64_t k = 0; k <= st.version().transcript; ++k) {
        const version_vector v{k, 0, 0, 0};
        EXPECT_EQ(log->since(v).value(), since(st, v).value()) << k;
    }
    for (lane l : all_lanes) {
        for (std::uint64_t k = 0; k <= st.version().of(l); ++k) {
            version_vector v;
            v.of(l) = k;
            EXPECT_EQ(log->since(v).value(), since(st, v).value()) << k;
        }
    }
}

// The script that undoes migration 5 for a worker of the version before it leaves rows of one
// value each, whole, that load as what was written.
TEST(PostgresStore, TheScriptThatUndoesMigration5KeepsEverySession) {
    temp_postgres_store t;
    auto written = write_random_sessions(t.store, "undo", 3);
    // And a row whose values have times of their own (no commit of the rules writes one, but a
    // row may hold one): 10, then 20 twice.
    {
        auto log = t.store.open(session_id::parse("timed").value(), lease_epoch{1}).value();
        session_state st = log->load().value();
        storage::batch_row row("id");
        for (std::uint64_t i = 1; i <= 3; ++i) {
            session::entry e{entry_seq{i}, unix_ms{i == 1 ? 10 : 20},
                             diagnostic{"note", "entry " + std::to_string(i)}};
            row.add(session::to_json(e), i, e.at.value);
            apply_actions(action{entry_appended{e}}, st);
        }
        pqxx::connection c(pg_dsn());
        pqxx::work w(c);
        w.exec0("SET LOCAL search_path TO " + t.schema);
        w.exec_params0("INSERT INTO transcript VALUES ('timed', 3, 20, $1)", row.body());
        w.exec0("UPDATE sessions SET version = '3,0,0,0' WHERE session_id = 'timed'");
        w.commit();
        ASSERT_EQ(log->load().value(), st);
        written.emplace_back("timed", st);
    }
    std::ifstream f(std::string(WUHU_SOURCE_DIR) + "/scripts/sql/postgres-undo-migration-5.sql");
    ASSERT_TRUE(f) << "the script is missing";
    const std::string script((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    {
        pqxx::connection c(pg_dsn());
        pqxx::work w(c);
        w.exec0("SET LOCAL search_path TO " + t.schema);
        w.exec0(script);
        w.commit();
    }
    pqxx::connection c(pg_dsn());
    pqxx::nontransaction n(c);
    EXPECT_EQ(n.exec1("SELECT max(version) FROM " + t.schema + ".migrations")[0].as<int>(), 4);
    for (const auto& [id, st] : written) {
        // Each value in a row of its own, byte for byte as the version before wrote it.
        const auto entries = rows_of(t.schema, "transcript", id);
        ASSERT_EQ(entries.size(), st.transcript.size()) << id;
        for (std::size_t i = 0; i < entries.size(); ++i) {
            EXPECT_EQ(entries[i].seq, st.transcript[i].id.value);
            EXPECT_EQ(entries[i].at, st.transcript[i].at.value);
            EXPECT_EQ(entries[i].body, boost::json::serialize(session::to_json(st.transcript[i])));
        }
        const auto facts = rows_of(t.schema, "journal", id);
        std::size_t k = 0;
        for (lane l : all_lanes) {
            for (const auto& j : st.in(l).journal) {
                ASSERT_LT(k, facts.size()) << id;
                EXPECT_EQ(facts[k].lane, static_cast<int>(index_of(l)));
                EXPECT_EQ(facts[k].seq, j.seq.value);
                EXPECT_EQ(facts[k].at, j.at.value);
                EXPECT_EQ(facts[k].body, boost::json::serialize(session::to_json(j)));
                ++k;
            }
        }
        EXPECT_EQ(k, facts.size()) << id;
        auto log = t.store.open(session_id::parse(id).value(), lease_epoch{2}).value();
        EXPECT_EQ(log->load().value(), st) << id;
    }
}

// Model text with NUL is stored (and published) with U+FFFD in its place.
TEST(PostgresStore, NulInModelTextIsStoredAsAReplacementCharacter) {
    temp_postgres_store t;
    auto log = t.store.open(session_id::parse("nul").value(), lease_epoch{1}).value();
    session_state st = log->load().value();
    auto m = reply(std::string("a\0b", 3), {{"c1", "echo"}});
    auto actions = log->append_assistant(st, m, unix_ms{1});
    ASSERT_TRUE(actions.has_value()) << actions.error().message();
    apply_actions(*actions, st);
    EXPECT_EQ(log->load().value(), st);
    EXPECT_EQ(std::get<assistant_message>(st.transcript[0].body).text,
              "a\xEF\xBF\xBD"
              "b");
}

// A previous owner's backend frozen inside a transaction that holds the session's row lock (a
// worker stopped by SIGSTOP mid-commit, a cut-off network) blocks the next owner at most the
// lock timeout: its open fails `unavailable` (nothing written) instead of waiting for ever; and
// the server ends the frozen session after the idle-in-transaction timeout, so that the next
// try takes the session (and the frozen owner is fenced out).
TEST(PostgresStore, AFrozenBackendHoldingTheRowLockBlocksTheNextOwnerAtMostTheLockTimeout) {
    using namespace std::chrono_literals;
    storage::postgres_options o{pg_dsn(), fresh_schema("t"), 2};
    o.timeouts.lock = 300ms;
    o.timeouts.idle_in_transaction = 1500ms;
    {
        storage::postgres_store store(o);
        const auto sid = session_id::parse("frozen").value();
        auto first = store.open(sid, lease_epoch{1}).value();
        session_state st = first->load().value();
        auto queued = first->enqueue(st, user_in(lane::follow_up, "f1", "kept"), unix_ms{1});
        ASSERT_TRUE(queued);
        apply_actions(queued->actions, st);

        // The frozen owner: a connection with the worker's settings, in a transaction that took
        // the session's row lock, and then nothing.
        pqxx::connection frozen(pg_dsn());
        storage::set_pg_timeouts(frozen, o.timeouts);
        pqxx::work w(frozen);
        w.exec("SELECT 1 FROM " + o.schema + ".sessions WHERE session_id = 'frozen' FOR UPDATE");

        const auto asked = std::chrono::steady_clock::now();
        auto second = store.open(sid, lease_epoch{2});
        const auto waited = std::chrono::steady_clock::now() - asked;
        ASSERT_FALSE(second) << "the next owner got past a lock held by a live transaction";
        EXPECT_EQ(second.error(), storage::errc::unavailable);
        EXPECT_LT(waited, 5s) << "bounded by the lock timeout (300 ms), not by the frozen owner";

        std::this_thread::sleep_for(2s);  // past the idle-in-transaction timeout
        auto third = store.open(sid, lease_epoch{2});
        ASSERT_TRUE(third) << "the server ended the frozen session: " << third.error().message();
        session_state now = (*third)->load().value();
        EXPECT_EQ(now, st) << "the acknowledged item is kept";
        EXPECT_EQ(first->enqueue(st, user_in(lane::follow_up, "f2", "late"), unix_ms{2}).error(),
                  storage::errc::lease_lost)
            << "the old owner is fenced out";
    }
    drop_schema(o.schema);
}

TEST(PostgresStore, ConcurrentSessionsShareThePool) {
    temp_postgres_store t(3);
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int i = 0; i < 8; ++i) {
        threads.emplace_back([&, i] {
            auto log =
                t.store.open(session_id::parse("p" + std::to_string(i)).value(), lease_epoch{1});
            if (!log) {
                ++failures;
                return;
            }
            session_state st = (*log)->load().value();
            for (int k = 0; k < 20; ++k) {
                auto r = (*log)->enqueue(st, user_in(lane::steer, "k" + std::to_string(k), "x"),
                                         unix_ms{k});
                if (!r) {
                    ++failures;
                    return;
                }
                apply_actions(r->actions, st);
            }
            if ((*log)->load().value() != st) {
                ++failures;
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    EXPECT_EQ(failures.load(), 0);
    storage::catalog_query needing;
    needing.needing_owner_by = unix_ms{0};
    EXPECT_EQ(t.store.sessions(needing).value().size(), 8u);
}

// The whole session loads exactly; a backfill since a recent version reads the tail alone: with
// every older row made unreadable, it still answers (and a full load reports the damage). How
// fast a load is lives in bench/store_bench, not here.
TEST(PostgresStore, LoadsA100000EntrySessionAndBackfillsFromTheTailAlone) {
    temp_postgres_store t;
    auto log = t.store.open(session_id::parse("big").value(), lease_epoch{1}).value();
    // Made by this open, its first load reads nothing (issue 36); the rows below are written
    // behind the store's back, which the next load reads.
    ASSERT_EQ(log->load().value(), session_state{});
    auto sql = [&](const std::string& statement) {
        pqxx::connection c(pg_dsn());
        pqxx::work w(c);
        w.exec0("SET LOCAL search_path TO " + t.schema);
        w.exec0(statement);
        w.commit();
    };
    sql("INSERT INTO transcript (session_id, seq, at, body) "
        "SELECT 'big', g, g, jsonb_build_object('id', g, 'at', g, 'type', 'diagnostic', "
        "'code', 'note', 'message', 'entry ' || g) FROM generate_series(1, 100000) g");
    sql("UPDATE sessions SET version = '100000,0,0,0' WHERE session_id = 'big'");
    auto loaded = log->load();
    ASSERT_TRUE(loaded.has_value()) << loaded.error().message();
    ASSERT_EQ(loaded->transcript.size(), 100'000u);
    for (std::size_t i = 0; i < loaded->transcript.size(); i += 9'999) {
        const auto& e = loaded->transcript[i];
        EXPECT_EQ(e.id.value, i + 1);
        EXPECT_EQ(std::get<diagnostic>(e.body).message, "entry " + std::to_string(i + 1));
    }
    EXPECT_EQ(std::get<diagnostic>(loaded->transcript.back().body).message, "entry 100000");
    // The older rows become unreadable (valid JSON, not an entry).
    sql("UPDATE transcript SET body = '{\"broken\":true}' WHERE session_id = 'big' AND seq <= "
        "99990");
    version_vector v = loaded->version();
    v.transcript -= 10;
    auto tail = log->since(v);
    ASSERT_TRUE(tail.has_value()) << "the backfill read a row before its version";
    EXPECT_EQ(tail->transcript.size(), 10u);
    EXPECT_EQ(log->load().error(), storage::errc::corrupt);
    // The next write fences on the version the store holds.
    EXPECT_TRUE(log->append_marker(*loaded, interruption{"x"}, unix_ms{1}).has_value());
}

}  // namespace wuhu::testing
