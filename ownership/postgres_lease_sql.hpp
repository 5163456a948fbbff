// The PostgreSQL lease backend's schema and statements (ownership/postgres_lease.hpp): its
// migrations, the statements every connection prepares, and the pieces of SQL its other
// queries are built from.
#pragma once

#include <pqxx/pqxx>

#include <span>
#include <string>

namespace wuhu::ownership::postgres_lease_sql {

// Versioned, applied in order under an advisory lock; `lease_migrations` records them.
std::span<const char* const> migrations();

// The database's clock in ms, unless a test clock is bound as $1.
inline constexpr const char* now_ms =
    "COALESCE($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)";

// The effective expiry of the lease row `l`: the later of its own and its generation's.
std::string expires_of(const std::string& l);

// Sets the connection's search path to `schema` and prepares every statement of the backend.
void prepare(pqxx::connection& c, const std::string& schema);

}  // namespace wuhu::ownership::postgres_lease_sql
