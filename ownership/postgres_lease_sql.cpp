#include "ownership/postgres_lease_sql.hpp"

namespace wuhu::ownership::postgres_lease_sql {

namespace {

// Versioned, applied in order under an advisory lock; `lease_migrations` records them.
const char* const all_migrations[] = {
    R"(CREATE SEQUENCE lease_epoch;
       CREATE TABLE leases (
           session_id text PRIMARY KEY,
           owner text NOT NULL,
           epoch bigint NOT NULL,
           expires bigint NOT NULL);
       CREATE INDEX leases_expires ON leases (expires);
       DO $$
       DECLARE m bigint := 0;
       BEGIN
           IF to_regclass('sessions') IS NOT NULL THEN
               SELECT GREATEST(m, COALESCE(max(epoch), 0)) INTO m FROM sessions;
           END IF;
           IF to_regclass('removed_sessions') IS NOT NULL THEN
               SELECT GREATEST(m, COALESCE(max(epoch), 0)) INTO m FROM removed_sessions;
           END IF;
           IF m > 0 THEN
               PERFORM setval('lease_epoch', m);
           END IF;
       END $$;)",
    // The fleet view pages through one owner's leases, in byte order of the ids.
    R"(ALTER TABLE leases ALTER COLUMN session_id TYPE text COLLATE "C";
       CREATE INDEX leases_owner ON leases (owner, session_id);)",
    // A renewal (every held lease, every few seconds) changes `expires` alone: with no index on
    // it and room left on each page, it is a HOT update, which writes no index entry (issue 36:
    // PostgreSQL's CPU renewing 10,000 idle leases).
    R"(DROP INDEX leases_expires;
       ALTER TABLE leases SET (fillfactor = 70);)",
    // Renewal per worker (ownership/generations.hpp): a lease names its owner's generation,
    // live while the lease's own expiry or the generation's is in the future; a renewal writes
    // the generation's row alone. `expires` is renamed: a worker of an earlier release, which
    // read it as the whole truth, fails every lease operation (so it serves nothing and takes
    // nothing) rather than take leases that live by their generation.
    R"(CREATE SEQUENCE lease_generation;
       ALTER TABLE leases RENAME COLUMN expires TO own_expires;
       ALTER TABLE leases ADD COLUMN generation bigint NOT NULL DEFAULT 0;
       CREATE TABLE lease_generations (
           owner text COLLATE "C" NOT NULL,
           generation bigint NOT NULL,
           expires bigint NOT NULL,
           spoiled boolean NOT NULL DEFAULT false,
           PRIMARY KEY (owner, generation)) WITH (fillfactor = 50);)",
};

}  // namespace

std::span<const char* const> migrations() {
    return all_migrations;
}

std::string expires_of(const std::string& l) {
    return "GREATEST(" + l + ".own_expires, COALESCE((SELECT g.expires FROM lease_generations g " +
           "WHERE g.owner = " + l + ".owner AND g.generation = " + l + ".generation), 0))";
}

void prepare(pqxx::connection& c, const std::string& schema) {
    {
        pqxx::nontransaction n(c);
        n.exec0("SET search_path TO " + schema);
        n.exec0("SET synchronous_commit TO on");
    }
    const std::string now = now_ms;
    const auto e = expires_of("l");
    // The lease row, locked, then its generation's row. Another owner's generation that has
    // expired is closed first (spoiled: written, so a renewal of it that is waiting for the row
    // checks again and fails, and its owner renews lease by lease and learns what it lost; one
    // that renewed it first leaves it live, and nothing is closed), then read.
    c.prepare("lease_current", "SELECT owner, own_expires, own_expires > " + now +
                                   ", epoch, generation FROM leases WHERE session_id = $2 "
                                   "FOR UPDATE");
    c.prepare("lease_generation_close",
              "UPDATE lease_generations SET spoiled = true WHERE owner = $2 AND generation = $3 "
              "AND expires <= " +
                  now);
    c.prepare("lease_generation_read", "SELECT expires, expires > " + now +
                                           " FROM lease_generations WHERE owner = $2 AND "
                                           "generation = $3");
    // Conditional: only a missing, expired or own lease is replaced.
    c.prepare("lease_take",
              "INSERT INTO leases (session_id, owner, epoch, own_expires, generation) "
              "VALUES ($2, $3, nextval('lease_epoch'), " +
                  now +
                  " + $4, $5) "
                  "ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner, "
                  "epoch = EXCLUDED.epoch, own_expires = EXCLUDED.own_expires, "
                  "generation = EXCLUDED.generation "
                  "WHERE " +
                  expires_of("leases") + " <= " + now +
                  " OR leases.owner = $3 "
                  "RETURNING epoch, own_expires");
    // A burst's acquisitions, one statement: first the lease rows the burst's sessions have,
    // locked in id order (as the sweep's claim does before it inserts), then the leases of the
    // sessions that have no row (every new session, every one loaded after its last owner
    // released it) inserted in id order; the sessions with a row go on to lease_current and
    // lease_take. Two bursts, or a burst and a claim, never wait for each other in a cycle.
    // The locks come first because the insert's one-time filter counts the CTE whole (an
    // InitPlan, run before the first row): a statement that inserted a new row, then waited
    // for a claim's update of an existing one, deadlocked with that claim's insert of the same
    // new row (LeaseConformance.ABurstAndAClaimOfTheSameSessionsAtOnceNeverFailEachOther).
    c.prepare("lease_take_new",
              "WITH locked AS (SELECT session_id FROM leases WHERE session_id = ANY($2::text[]) "
              "ORDER BY session_id FOR UPDATE) "
              "INSERT INTO leases (session_id, owner, epoch, own_expires, generation) "
              "SELECT c.id, $3, nextval('lease_epoch'), " +
                  now +
                  " + $4, $5 FROM unnest($2::text[]) AS c(id) "
                  "WHERE (SELECT count(*) FROM locked) >= 0 ORDER BY c.id COLLATE \"C\" "
                  "ON CONFLICT (session_id) DO NOTHING RETURNING session_id, epoch, own_expires");
    // An owner's generations: its first, live only once a renewal extends it; the next, made by
    // a renewal lease by lease; the renewal of its current one (not once spoiled: another run of
    // the same worker id took one of its leases afresh); one spoiled; and the dead ones dropped
    // (any owner's: they keep nothing live), skipping rows another transaction holds.
    c.prepare("lease_generation_first",
              "INSERT INTO lease_generations (owner, generation, expires) "
              "VALUES ($1, nextval('lease_generation'), 0) RETURNING generation");
    c.prepare("lease_generation_next",
              "INSERT INTO lease_generations (owner, generation, expires) "
              "VALUES ($2, nextval('lease_generation'), " +
                  now + " + $3) RETURNING generation");
    c.prepare("lease_generation_renew", "UPDATE lease_generations SET expires = " + now +
                                            " + $2 "
                                            "WHERE owner = $3 AND generation = $4 AND expires > " +
                                            now + " AND NOT spoiled");
    c.prepare("lease_generations_spoil",
              "UPDATE lease_generations SET spoiled = true WHERE owner = $1 "
              "AND generation = ANY($2::bigint[]) AND generation <> $3");
    c.prepare("lease_generations_dead",
              "DELETE FROM lease_generations WHERE ctid IN (SELECT ctid FROM lease_generations "
              "WHERE expires <= " +
                  now + " FOR UPDATE SKIP LOCKED)");
    // The sweep's claim: expired (or own) leases, skipping rows another worker has locked; the
    // generations of the others' locked, and the ones a renewal kept live meanwhile left; then
    // sessions with no lease row at all.
    c.prepare("lease_claim_lock",
              "SELECT session_id, owner, generation FROM leases l WHERE "
              "session_id = ANY($2::text[]) AND (" +
                  e + " <= " + now +
                  " OR owner = $3) "
                  "LIMIT $4 FOR UPDATE SKIP LOCKED");
    c.prepare("lease_claim_close",
              "UPDATE lease_generations g SET spoiled = true WHERE (g.owner, g.generation) IN "
              "(SELECT l.owner, l.generation FROM leases l WHERE l.session_id = ANY($2::text[]) "
              "AND l.owner <> $3) AND g.expires <= " +
                  now);
    c.prepare("lease_claim_live",
              "SELECT session_id FROM leases l WHERE session_id = ANY($2::text[]) "
              "AND owner <> $3 AND " +
                  e + " > " + now);
    c.prepare("lease_claim_take",
              "UPDATE leases SET owner = $3, epoch = nextval('lease_epoch'), "
              "own_expires = " +
                  now +
                  " + $4, generation = $5 "
                  "WHERE session_id = ANY($2::text[]) RETURNING session_id, epoch, own_expires");
    c.prepare("lease_claim_new",
              "INSERT INTO leases (session_id, owner, epoch, own_expires, generation) "
              "SELECT c.id, $3, nextval('lease_epoch'), " +
                  now +
                  " + $4, $6 "
                  "FROM unnest($2::text[]) AS c(id) "
                  "WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.session_id = c.id) "
                  // In id order, byte order as every statement that inserts several: two
                  // workers inserting the same new rows wait on each other in the same order,
                  // never in a cycle (a deadlock), whatever the database's collation.
                  "ORDER BY c.id COLLATE \"C\" LIMIT $5 "
                  "ON CONFLICT (session_id) DO NOTHING RETURNING session_id, epoch, own_expires");
    c.prepare("lease_renew", "UPDATE leases l SET own_expires = " + now +
                                 " + $2, generation = $6 "
                                 "FROM unnest($3::text[], $4::bigint[]) AS h(id, epoch) "
                                 "WHERE l.session_id = h.id AND l.epoch = h.epoch AND l.owner = $5 "
                                 "AND " +
                                 e + " > " + now + " RETURNING l.session_id");
    c.prepare("lease_release",
              "DELETE FROM leases WHERE session_id = $1 AND owner = $2 AND epoch = $3");
    c.prepare("lease_owner", "SELECT session_id, owner, epoch, " + e +
                                 " FROM leases l WHERE session_id = $2 AND " + e + " > " + now);
    // The owners in order by the owner index, one probe each (a loose index scan), each kept
    // if one of its leases is live: not a scan of every lease.
    c.prepare("lease_owners",
              "WITH RECURSIVE o AS (SELECT min(owner) AS owner FROM leases UNION ALL "
              "SELECT (SELECT min(owner) FROM leases WHERE owner > o.owner) FROM o "
              "WHERE o.owner IS NOT NULL) "
              "SELECT owner FROM o WHERE owner IS NOT NULL AND EXISTS (SELECT 1 FROM leases l "
              "WHERE l.owner = o.owner AND " +
                  e + " > " + now + ") ORDER BY owner");
    c.prepare("lease_remove",
              "DELETE FROM leases WHERE session_id = $1 AND epoch <= $2 RETURNING owner, epoch");
}

}  // namespace wuhu::ownership::postgres_lease_sql
