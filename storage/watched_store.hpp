// A wrapper that tells when the wrapped store goes away and when it comes back: the first
// `unavailable` after a success reports "down" (with the error), the first success after that
// reports "up". Once each per outage, however many requests fail meanwhile, so that a worker
// logs a database outage in two lines. Only an operation that began after the last report may
// change the state: at the edge of an outage, one that was under way when the store went
// away (or came back) may still end the old way, and must not report the change again.
//
// Thread-safe; the listener runs on the thread of the operation that changed the state.
#pragma once

#include "storage/store.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>

namespace wuhu::storage {

class watched_store final : public forwarding_store {
  public:
    // available: false when the store went away (`why`), true when it is back.
    using listener = std::function<void(bool available, const boost::system::error_code& why)>;

    // Told how long each successful commit took (on the committing thread).
    using commit_observer = std::function<void(std::chrono::steady_clock::duration)>;

    watched_store(session_store& target, listener l, commit_observer c = {})
        : forwarding_store(target), listener_(std::move(l)), commit_observer_(std::move(c)) {}

    result<void> remove(const session_id& id, lease_epoch epoch) override;
    result<bool> exists(const session_id& id) override;
    result<std::optional<session_state>> read(const session_id& id) override;
    result<std::vector<catalog_entry>> sessions(const catalog_query& q) override;

    // How many changes were reported so far: an operation notes it when it begins.
    std::uint64_t changes() const;
    // Notes the outcome of an operation that began after `changes_before` changes.
    void note(const boost::system::error_code& ec, std::uint64_t changes_before);
    bool available() const;
    // A commit succeeded in `took` (tells the commit observer).
    void committed(std::chrono::steady_clock::duration took) const {
        if (commit_observer_) {
            commit_observer_(took);
        }
    }

  protected:
    result<std::unique_ptr<session_log>> do_open(const session_id& id, lease_epoch epoch,
                                                 open_mode mode) override;

  private:
    listener listener_;
    commit_observer commit_observer_;
    mutable std::mutex mu_;
    bool down_ = false;
    std::uint64_t changes_ = 0;
};

}  // namespace wuhu::storage
