#include "storage/pg_migrations.hpp"

#include <stdexcept>

namespace wuhu::storage {

bool valid_pg_schema(const std::string& s) {
    if (s.empty() || s.size() > 63 || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) {
        return false;
    }
    for (char c : s) {
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
            return false;
        }
    }
    return true;
}

void apply_pg_migrations(pqxx::work& w, const std::string& schema, const std::string& table,
                         const char* const* migrations, std::size_t count) {
    // One migrator at a time across the fleet (and across components: the lease tables'
    // first migration reads the session store's).
    w.exec("SELECT pg_advisory_xact_lock(7271001)");
    w.exec0("CREATE SCHEMA IF NOT EXISTS " + schema);
    w.exec0("SET LOCAL search_path TO " + schema);
    w.exec0("CREATE TABLE IF NOT EXISTS " + table + " (version integer PRIMARY KEY)");
    const auto applied = w.exec1("SELECT coalesce(max(version), 0) FROM " + table)[0].as<int>();
    const int known = static_cast<int>(count);
    if (applied > known) {
        throw std::runtime_error("the database's " + table + " are newer than this program");
    }
    for (int v = applied; v < known; ++v) {
        w.exec0(migrations[v]);
        w.exec_params0("INSERT INTO " + table + " (version) VALUES ($1)", v + 1);
    }
}

}  // namespace wuhu::storage
