// A wrapper that tells when the wrapped store goes away and when it comes back: the first
// `unavailable` after a success reports "down" (with the error), the first success after that
// reports "up". Once each per outage, however many requests fail meanwhile, so that a worker
// logs a database outage in two lines.
//
// Thread-safe; the listener runs on the thread of the operation that changed the state.
#pragma once

#include "storage/store.hpp"

#include <functional>
#include <mutex>

namespace wuhu::storage {

class watched_store final : public forwarding_store {
  public:
    // available: false when the store went away (`why`), true when it is back.
    using listener = std::function<void(bool available, const boost::system::error_code& why)>;

    watched_store(session_store& target, listener l)
        : forwarding_store(target), listener_(std::move(l)) {}

    result<void> remove(const session_id& id, lease_epoch epoch) override;
    result<bool> exists(const session_id& id) override;
    result<std::vector<catalog_entry>> sessions(catalog_filter filter) override;

    // Notes the outcome of an operation (the logs call it too).
    void note(const boost::system::error_code& ec);
    bool available() const;

  protected:
    result<std::unique_ptr<session_log>> do_open(const session_id& id, lease_epoch epoch,
                                                 open_mode mode) override;

  private:
    listener listener_;
    mutable std::mutex mu_;
    bool down_ = false;
};

}  // namespace wuhu::storage
