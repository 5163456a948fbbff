#include "storage/postgres_schema.hpp"

#include <string>

namespace wuhu::storage {

namespace {

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
    // database's locale. (The backfill reads rows of one value each, as every database before
    // migration 5 holds. Only enqueued, canceled and materialized facts existed before this
    // migration; the timer facts that came later leave a lane's depth alone.)
    R"(ALTER TABLE sessions
           ADD COLUMN lane_system integer NOT NULL DEFAULT 0,
           ADD COLUMN lane_steer integer NOT NULL DEFAULT 0,
           ADD COLUMN lane_follow_up integer NOT NULL DEFAULT 0,
           ADD COLUMN timers integer NOT NULL DEFAULT 0,
           ADD COLUMN next_timer bigint,
           ADD COLUMN last_activity bigint NOT NULL DEFAULT 0;
       UPDATE sessions s SET
           lane_system = (SELECT count(*) FILTER (WHERE j.body->>'fact' = 'enqueued')
                                 - count(*) FILTER (WHERE j.body->>'fact' IN ('canceled', 'materialized'))
                          FROM journal j WHERE j.session_id = s.session_id AND j.lane = 0),
           lane_steer = (SELECT count(*) FILTER (WHERE j.body->>'fact' = 'enqueued')
                                - count(*) FILTER (WHERE j.body->>'fact' IN ('canceled', 'materialized'))
                         FROM journal j WHERE j.session_id = s.session_id AND j.lane = 1),
           lane_follow_up = (SELECT count(*) FILTER (WHERE j.body->>'fact' = 'enqueued')
                                    - count(*) FILTER (WHERE j.body->>'fact' IN ('canceled', 'materialized'))
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
    // One row per commit (storage/pg_batch.hpp): the rows already stored stay as they are, one
    // value each, and load as such. The version is what tells a worker that cannot read the
    // new rows to stay away.
    R"(COMMENT ON COLUMN transcript.body IS
           'the entries of one commit: a JSON array, keys from seq (the last one''s), or one entry';
       COMMENT ON COLUMN journal.body IS
           'one lane''s facts of one commit: a JSON array, keys from seq (the last one''s), or one fact';)",
    // The ledger's totals (session/ledger.hpp), the register a backfill's status carries: JSON
    // text, null before the session's first inference or tool call (and, for a session stored
    // before, until its next one: each commit that counts writes the totals folded at load).
    R"(ALTER TABLE sessions ADD COLUMN IF NOT EXISTS usage text;)",
    // The fleet view's approvals and cost (issue 33): the calls waiting for a person, and the
    // ledger's cost and tokens, from the stored totals (approvals 0 until the session's next
    // commit: the sessions stored before have none asked).
    R"(ALTER TABLE sessions ADD COLUMN IF NOT EXISTS approvals integer NOT NULL DEFAULT 0,
                           ADD COLUMN IF NOT EXISTS cost bigint NOT NULL DEFAULT 0,
                           ADD COLUMN IF NOT EXISTS tokens bigint NOT NULL DEFAULT 0;
       UPDATE sessions SET
         cost = coalesce((usage::jsonb->>'cost')::bigint, 0),
         tokens = coalesce((usage::jsonb->>'input')::bigint, 0)
                + coalesce((usage::jsonb->>'cached_input')::bigint, 0)
                + coalesce((usage::jsonb->>'cache_write')::bigint, 0)
                + coalesce((usage::jsonb->>'output')::bigint, 0)
         WHERE usage IS NOT NULL;
       CREATE INDEX IF NOT EXISTS sessions_cost ON sessions (cost DESC, session_id);)",
};

}  // namespace

std::span<const char* const> postgres_migrations() {
    return migrations;
}

void set_pg_timeouts(pqxx::connection& c, const pg_timeouts& t) {
    pqxx::nontransaction n(c);
    n.exec0("SET statement_timeout = " + std::to_string(t.statement.count()));
    n.exec0("SET lock_timeout = " + std::to_string(t.lock.count()));
    n.exec0("SET idle_in_transaction_session_timeout = " +
            std::to_string(t.idle_in_transaction.count()));
}

void prepare_postgres_statements(pqxx::connection& c) {
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
                  "  WHERE sessions.epoch <= EXCLUDED.epoch RETURNING epoch, xmax = 0 AS made"
                : "UPDATE sessions SET epoch = $2 WHERE session_id = $1 AND epoch <= $2 "
                  "  AND NOT EXISTS (SELECT 1 FROM floor WHERE epoch >= $2) "
                  "  RETURNING epoch, false AS made";
        c.prepare(
            std::string("open_") + mode + "_one",
            "WITH floor AS (SELECT epoch FROM removed_sessions WHERE session_id = $1 "
            "FOR SHARE), opened AS (" +
                open +
                "), "
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
                "         THEN 'off' ELSE 'on' END, true), "
                // Whether the row was inserted now (an update of a row has an xmax): a
                // new session, with nothing stored (a removal deletes every row with its
                // session's).
                "       coalesce((SELECT bool_or(made) FROM opened), false)");
    }
    // Also writes the registers and the index (what the commit leaves, session/summary.hpp:
    // $5-$12, and $14-$16 approvals, cost, tokens), and the ledger's totals ($13, null:
    // unchanged; session/ledger.hpp).
    const std::string fence_set =
        "UPDATE sessions SET version = $4, has_work = $5, paused = $6, lane_system = $7, "
        "lane_steer = $8, lane_follow_up = $9, timers = $10, next_timer = $11, "
        "last_activity = $12, usage = coalesce($13, usage), approvals = $14, cost = $15, "
        "tokens = $16";
    const std::string fence_where = " WHERE session_id = $1 AND epoch = $2 AND version = $3";
    c.prepare("fence", fence_set + fence_where);
    c.prepare("fence_why", "SELECT epoch FROM sessions WHERE session_id = $1");
    // A whole commit in one statement (no timers): the fence, the registers and the index, the
    // settings ($17, null: unchanged), the entries (their seqs $18 and times $19, arrays, and
    // their JSON $20, an array whose elements keep their text) and the journal facts (lanes
    // $21, seqs $22, times $23, their JSON $24), written only when the fence held. One round trip
    // and no BEGIN/COMMIT: a statement outside a transaction block is one. Its answer says
    // whether the fence held, and the epoch the session has (lease lost, or a conflict).
    c.prepare("commit",
              "WITH fence AS (" + fence_set + ", settings = coalesce($17::jsonb, settings)" +
                  fence_where +
                  " RETURNING 1), "
                  "entries AS ("
                  "  INSERT INTO transcript (session_id, seq, at, body) "
                  "  SELECT $1, e.seq, e.at, e.body::text FROM ROWS FROM (unnest($18::bigint[]), "
                  "    unnest($19::bigint[]), json_array_elements($20::json)) AS e(seq, at, body) "
                  "  WHERE EXISTS (SELECT 1 FROM fence)), "
                  "facts AS ("
                  "  INSERT INTO journal (session_id, lane, seq, at, body) "
                  "  SELECT $1, f.lane, f.seq, f.at, f.body::text FROM ROWS FROM ("
                  "    unnest($21::smallint[]), unnest($22::bigint[]), unnest($23::bigint[]), "
                  "    json_array_elements($24::json)) AS f(lane, seq, at, body) "
                  "  WHERE EXISTS (SELECT 1 FROM fence)) "
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
              "SELECT version, settings::text, paused, has_work, epoch, usage FROM sessions "
              "WHERE session_id = $1");
    // The whole session in one statement (one snapshot, one round trip): its row (k 0), then
    // its rows of entries (1) and of journal facts (2), and its timers (3), in order.
    c.prepare("load_all",
              "SELECT 0 AS k, 0 AS lane, 0::bigint AS seq, ''::text AS tid, settings::text, "
              "       version, paused, has_work, epoch, 0::bigint AS at "
              "  FROM sessions WHERE session_id = $1 "
              "UNION ALL SELECT 1, 0, seq, '', body, NULL, NULL, NULL, NULL, at "
              "  FROM transcript WHERE session_id = $1 "
              "UNION ALL SELECT 2, lane, seq, '', body, NULL, NULL, NULL, NULL, at "
              "  FROM journal WHERE session_id = $1 "
              "UNION ALL SELECT 3, 0, 0, id, body, NULL, NULL, NULL, NULL, 0 "
              "  FROM timers WHERE session_id = $1 "
              "ORDER BY k, lane, seq, tid");
    c.prepare("load_entries",
              "SELECT seq, at, body FROM transcript WHERE session_id = $1 AND seq > $2 "
              "ORDER BY seq");
    c.prepare("load_facts_since",
              "SELECT seq, at, body FROM journal WHERE session_id = $1 "
              "AND lane = $2 AND seq > $3 ORDER BY seq");
}

}  // namespace wuhu::storage
