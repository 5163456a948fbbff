// A SQLite store in a temporary data directory of its own, for the SQLite store's tests.
#pragma once

#include "storage/sqlite_store.hpp"
#include "tests/support/temp_dir.hpp"

namespace wuhu::testing {

// A store in its own temporary data directory.
struct temp_sqlite_store final : storage::forwarding_store {
    explicit temp_sqlite_store(std::size_t max_open = 256)
        : forwarding_store(store),
          store(storage::sqlite_options{dir.path(), "FULL", 5000, max_open}) {}

    temp_dir dir;
    storage::sqlite_store store;
};

}  // namespace wuhu::testing
