// The PostgreSQL store against a real server (scripts/test starts it).
#include "storage/postgres_store.hpp"
#include "tests/storage/conformance.hpp"
#include "session/codec.hpp"
#include "session/reducer.hpp"
#include "session/summary.hpp"
#include "tests/support/pg_env.hpp"
#include "tests/support/random_ops.hpp"

#include <boost/json.hpp>

#include <chrono>
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
    EXPECT_EQ(r[0][0].as<int>(), 4);
    EXPECT_EQ(r[0][1].as<int>(), 4);
}

// The index's migration fills the new columns from the stored rows: a database written before
// it lists its sessions as they are; and the bodies' migration from jsonb to text keeps every
// session loading as it was. (Both are undone by hand, then run again.)
TEST(PostgresStore, TheIndexAndBodyMigrationsKeepTheStoredSessions) {
    temp_postgres_store t;
    std::vector<std::pair<std::string, session_state>> written;
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
        const std::string id = "old" + std::to_string(seed);
        auto log = t.store.open(session_id::parse(id).value(), lease_epoch{1}).value();
        session_state st;
        std::mt19937_64 rng(seed);
        for (int i = 0; i < 120; ++i) {
            auto op = next_op(rng, st, unix_ms{1000 + i});
            auto r = run_store(op, *log, st);
            if (r) {
                apply_actions(*r, st);
            }
        }
        written.emplace_back(id, st);
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
        w.exec0("DELETE FROM migrations WHERE version >= 3");
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

// Bodies are stored as the codec writes them (compact JSON text), by the one-statement commit
// and by the transaction that commits timers alike.
TEST(PostgresStore, BodiesAreStoredAsTheCodecsCompactJson) {
    temp_postgres_store t;
    auto log = t.store.open(session_id::parse("compact").value(), lease_epoch{1}).value();
    session_state st;
    std::mt19937_64 rng(7);
    for (int i = 0; i < 200; ++i) {
        auto op = next_op(rng, st, unix_ms{1000 + i});
        if (auto r = run_store(op, *log, st)) {
            apply_actions(*r, st);
        }
    }
    ASSERT_FALSE(st.transcript.empty());
    pqxx::connection c(pg_dsn());
    pqxx::nontransaction n(c);
    auto entries = n.exec("SELECT body FROM " + t.schema +
                          ".transcript WHERE session_id = 'compact' ORDER BY seq");
    ASSERT_EQ(entries.size(), st.transcript.size());
    for (std::size_t i = 0; i < st.transcript.size(); ++i) {
        EXPECT_EQ(entries[static_cast<int>(i)][0].as<std::string>(),
                  boost::json::serialize(session::to_json(st.transcript[i])));
    }
    std::size_t rows = 0;
    for (const char* table : {"journal", "timers"}) {
        for (auto row : n.exec("SELECT body FROM " + t.schema + "." + table)) {
            const auto body = row[0].as<std::string>();
            EXPECT_EQ(body, boost::json::serialize(boost::json::parse(body))) << table;
            ++rows;
        }
    }
    EXPECT_GT(rows, st.timers.size());  // facts and the timers still pending
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
