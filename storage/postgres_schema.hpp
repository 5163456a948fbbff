// The PostgreSQL store's tables and statements: its versioned migrations, and the statements
// every pooled connection prepares (by name: the store's operations run them).
#pragma once

#include "storage/postgres_store.hpp"

#include <pqxx/pqxx>

#include <span>

namespace wuhu::storage {

// Applied in order by apply_pg_migrations; `migrations.version` records what was applied.
std::span<const char* const> postgres_migrations();

void prepare_postgres_statements(pqxx::connection& c);

// Sets `t` (postgres_store.hpp) on the connection.
void set_pg_timeouts(pqxx::connection& c, const pg_timeouts& t);

}  // namespace wuhu::storage
