// Versioned migrations of one PostgreSQL component (the session store's tables, the lease
// tables): applied in order in the caller's transaction, under one advisory lock for the whole
// fleet, each recorded in the component's own table.
#pragma once

#include <pqxx/pqxx>

#include <cstddef>
#include <string>

namespace wuhu::storage {

// A schema name that can go into SQL as is: [a-z_][a-z0-9_]*, at most 63 bytes.
bool valid_pg_schema(const std::string& s);

// Creates `schema` if needed, sets it as the transaction's search path, and applies the
// statements of `migrations` not yet recorded in `table` (integer versions from 1). Throws
// std::runtime_error when the database holds a version this program does not know.
void apply_pg_migrations(pqxx::work& w, const std::string& schema, const std::string& table,
                         const char* const* migrations, std::size_t count);

}  // namespace wuhu::storage
