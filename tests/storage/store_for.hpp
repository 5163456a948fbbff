// Opens a store from a URL, for the crash test's child and parent:
//   sqlite:///path/to/data-dir     postgres:<schema>:<libpq connection string>
//   sqlite-no-image:///path/to/data-dir   (new session files made by SQLite, not an image)
#pragma once

#include "storage/store.hpp"

#include <memory>
#include <string>

namespace wuhu::testing {

std::unique_ptr<storage::session_store> store_for(const std::string& url);

}  // namespace wuhu::testing
