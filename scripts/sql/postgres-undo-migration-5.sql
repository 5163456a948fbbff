-- Undoes migration 5 of the PostgreSQL session store (docs/storage.md, "One row per commit")
-- and the ones after it, so that a worker of the version before it can read the database
-- again: each row that holds
-- a commit's values (a JSON array) becomes one row per value, whole, with its key (`id` or
-- `seq`) and `at` put back in front, as that version wrote them (the codec writes them first,
-- and `json_array_elements` keeps each value's text). Rows of one value are left as they are.
--
-- Stop every worker first. Then, in the store's schema (default wuhu):
--   psql "<dsn>" -v ON_ERROR_STOP=1 --single-transaction \
--        -c 'SET search_path TO wuhu' -f scripts/sql/postgres-undo-migration-5.sql
WITH batched AS (
    DELETE FROM transcript WHERE left(body, 1) = '[' RETURNING session_id, seq, at, body)
INSERT INTO transcript (session_id, seq, at, body)
SELECT b.session_id, b.seq - n.n + e.i, coalesce((e.v->>'at')::bigint, b.at),
       '{"id":' || (b.seq - n.n + e.i)
           || CASE WHEN e.v->>'at' IS NULL THEN ',"at":' || b.at ELSE '' END
           || ',' || substr(e.v::text, 2)
FROM batched b,
     LATERAL (SELECT json_array_length(b.body::json) AS n) n,
     LATERAL json_array_elements(b.body::json) WITH ORDINALITY AS e(v, i);

WITH batched AS (
    DELETE FROM journal WHERE left(body, 1) = '[' RETURNING session_id, lane, seq, at, body)
INSERT INTO journal (session_id, lane, seq, at, body)
SELECT b.session_id, b.lane, b.seq - n.n + e.i, coalesce((e.v->>'at')::bigint, b.at),
       '{"seq":' || (b.seq - n.n + e.i)
           || CASE WHEN e.v->>'at' IS NULL THEN ',"at":' || b.at ELSE '' END
           || ',' || substr(e.v::text, 2)
FROM batched b,
     LATERAL (SELECT json_array_length(b.body::json) AS n) n,
     LATERAL json_array_elements(b.body::json) WITH ORDINALITY AS e(v, i);

COMMENT ON COLUMN transcript.body IS NULL;
COMMENT ON COLUMN journal.body IS NULL;
-- Migration 6 (the ledger's totals, issue 33) goes too: the version before 5 keeps no totals,
-- and a column it never writes would be stale when a newer worker came back.
ALTER TABLE sessions DROP COLUMN IF EXISTS usage;
-- And migration 7 (the fleet view's approvals and cost): columns the version before 5 never
-- writes.
DROP INDEX IF EXISTS sessions_cost;
ALTER TABLE sessions DROP COLUMN IF EXISTS approvals, DROP COLUMN IF EXISTS cost,
                     DROP COLUMN IF EXISTS tokens;
DELETE FROM migrations WHERE version >= 5;
