// The PostgreSQL store's connections (postgres_store.hpp), shared by its two files: a libpqxx
// connection with its prepared statements, and one lent by the pool, given back when destroyed
// (broken: the pool drops its idle ones too).
#pragma once

#include "storage/postgres_store.hpp"

#include <pqxx/pqxx>

#include <memory>
#include <string>

namespace wuhu::storage {

struct postgres_store::connection {
    explicit connection(const std::string& dsn) : c(dsn) {}
    pqxx::connection c;
};

class postgres_store::pooled {
  public:
    pooled(postgres_store& s, std::unique_ptr<connection> c) : store_(&s), c_(std::move(c)) {}
    pooled(pooled&& o) noexcept = default;
    ~pooled() {
        if (c_) {
            store_->give_back(std::move(c_), broken_ ? health::broken : health::usable);
        }
    }
    pqxx::connection& operator*() { return c_->c; }
    void mark_broken() { broken_ = true; }

  private:
    postgres_store* store_;
    std::unique_ptr<connection> c_;
    bool broken_ = false;
};

}  // namespace wuhu::storage
