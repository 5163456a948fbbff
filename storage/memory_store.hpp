// In-memory session store: for tests and benchmarks. Holds each session's state and epoch in a
// map guarded by a mutex; a commit checks the epoch and the version, then applies the actions
// with the reducer. Data lives as long as the store object.
#pragma once

#include "storage/store.hpp"

#include <map>
#include <mutex>

namespace wuhu::storage {

class memory_store final : public session_store {
  public:
    result<void> remove(const session_id& id, lease_epoch epoch) override;
    result<bool> exists(const session_id& id) override;
    result<std::optional<session_state>> read(const session_id& id) override;
    std::string_view backend() const override { return "memory"; }
    result<std::vector<catalog_entry>> sessions(const catalog_query& q) override;

    // Test hook: how many commits reached the store.
    std::uint64_t commits() const;

  protected:
    result<std::unique_ptr<session_log>> do_open(const session_id& id, lease_epoch epoch,
                                                 open_mode mode) override;

  private:
    friend class memory_log;
    struct record {
        lease_epoch epoch;
        session_state state;
    };
    mutable std::mutex mu_;
    std::map<std::string, record> sessions_;
    std::map<std::string, lease_epoch> removed_;  // the epoch each removal ran at
    std::uint64_t commits_ = 0;
};

}  // namespace wuhu::storage
