#include "tests/storage/store_for.hpp"

#include "storage/postgres_store.hpp"
#include "storage/sqlite_store.hpp"

#include <stdexcept>

namespace wuhu::testing {

std::unique_ptr<storage::session_store> store_for(const std::string& url) {
    const std::string sqlite = "sqlite://";
    if (url.rfind(sqlite, 0) == 0) {
        return std::make_unique<storage::sqlite_store>(
            storage::sqlite_options{url.substr(sqlite.size())});
    }
    const std::string made_by_sqlite = "sqlite-no-image://";
    if (url.rfind(made_by_sqlite, 0) == 0) {
        storage::sqlite_options o{url.substr(made_by_sqlite.size())};
        o.new_files_from_image = false;
        return std::make_unique<storage::sqlite_store>(o);
    }
    const std::string pg = "postgres:";
    if (url.rfind(pg, 0) == 0) {
        auto rest = url.substr(pg.size());
        auto colon = rest.find(':');
        if (colon == std::string::npos) {
            throw std::invalid_argument("postgres:<schema>:<dsn> expected");
        }
        storage::postgres_options o;
        o.schema = rest.substr(0, colon);
        o.dsn = rest.substr(colon + 1);
        o.pool_size = 2;
        return std::make_unique<storage::postgres_store>(o);
    }
    throw std::invalid_argument("unknown store url: " + url);
}

}  // namespace wuhu::testing
