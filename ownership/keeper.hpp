// The leases one worker holds, and where each session's requests go.
//
// place(sid) answers "here, at this epoch" (a lease this worker holds, or one it just took
// because nobody live held it) or "at worker X" (another worker's live lease: forward). renew()
// extends every held lease in one transaction; what it reports lost the worker must unload.
// release_all() on shutdown lets other workers take the sessions at once.
//
// Not thread-safe: the worker calls it from its executor.
#pragma once

#include "ownership/errc.hpp"
#include "ownership/lease.hpp"

#include <map>

namespace wuhu::ownership {

// A worker id is a subject token: 1-64 characters of [A-Za-z0-9_-].
bool valid_worker_id(std::string_view id);

class keeper {
  public:
    struct here {
        lease_epoch epoch;
    };
    struct elsewhere {
        std::string owner;
    };
    using placement = std::variant<here, elsewhere>;

    // Throws std::invalid_argument for an invalid worker id.
    keeper(lease_store& store, std::string worker_id, std::chrono::milliseconds ttl);

    result<placement> place(const session_id& id);
    // The epoch of a lease this worker holds; not_held otherwise.
    result<lease_epoch> epoch_of(const session_id& id) const;
    // Renews every held lease; returns the lost ones (already forgotten here).
    result<std::vector<session_id>> renew();
    // Gives one lease up (its session was unloaded), or all of them (shutdown).
    void release(const session_id& id);
    void release_all();
    // The session is deleted: forget its lease, whoever holds it.
    result<void> remove(const session_id& id);

    std::size_t held() const { return held_.size(); }
    const std::string& worker_id() const { return worker_id_; }
    std::chrono::milliseconds ttl() const { return ttl_; }
    lease_store& store() { return store_; }

  private:
    lease_store& store_;
    std::string worker_id_;
    std::chrono::milliseconds ttl_;
    std::map<std::string, lease> held_;
};

}  // namespace wuhu::ownership
