#include "tests/storage/store_for.hpp"

#include "storage/sqlite_store.hpp"

#include <stdexcept>

namespace wuhu::testing {

std::unique_ptr<storage::session_store> store_for(const std::string& url) {
    const std::string sqlite = "sqlite://";
    if (url.rfind(sqlite, 0) == 0) {
        return std::make_unique<storage::sqlite_store>(
            storage::sqlite_options{url.substr(sqlite.size())});
    }
    throw std::invalid_argument("unknown store url: " + url);
}

}  // namespace wuhu::testing
