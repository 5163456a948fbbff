#include "storage/watched_store.hpp"

namespace wuhu::storage {

namespace {

// Runs a store operation and notes its outcome.
template <class F>
auto noted(watched_store& store, F&& operation) {
    const auto before = store.changes();
    auto r = operation();
    store.note(r ? boost::system::error_code{} : r.error(), before);
    return r;
}

class watched_log final : public session_log {
  public:
    watched_log(watched_store& store, std::unique_ptr<session_log> inner)
        : session_log(inner->id(), inner->epoch()), store_(store), inner_(std::move(inner)) {}

  protected:
    result<session_state> do_load() override {
        return noted(store_, [&] { return inner_->load(); });
    }
    result<session::patch> do_since(const session::version_vector& from) override {
        return noted(store_, [&] { return inner_->since(from); });
    }
    result<void> do_commit(const session_state& before, const action_list& actions) override {
        const auto began = std::chrono::steady_clock::now();
        auto out = noted(store_, [&] { return forward_commit(*inner_, before, actions); });
        if (out) {
            store_.committed(std::chrono::steady_clock::now() - began);
        }
        return out;
    }

  private:
    watched_store& store_;
    std::unique_ptr<session_log> inner_;
};

}  // namespace

std::uint64_t watched_store::changes() const {
    std::lock_guard lock(mu_);
    return changes_;
}

void watched_store::note(const boost::system::error_code& ec, std::uint64_t changes_before) {
    const bool failed = ec == errc::unavailable;
    if (ec && !failed) {
        return;  // an answer (lease_lost, conflict, corrupt data): the store is there
    }
    std::lock_guard lock(mu_);
    if (failed == down_ || changes_before != changes_) {
        return;  // no change, or an outcome from before the last one
    }
    down_ = failed;
    ++changes_;
    listener_(!failed, ec);
}

bool watched_store::available() const {
    std::lock_guard lock(mu_);
    return !down_;
}

result<std::unique_ptr<session_log>> watched_store::do_open(const session_id& id, lease_epoch epoch,
                                                            open_mode mode) {
    auto inner = noted(*this, [&] { return target().open(id, epoch, mode); });
    if (!inner) {
        return inner.error();
    }
    return std::unique_ptr<session_log>(std::make_unique<watched_log>(*this, std::move(*inner)));
}

result<void> watched_store::remove(const session_id& id, lease_epoch epoch) {
    return noted(*this, [&] { return target().remove(id, epoch); });
}

result<bool> watched_store::exists(const session_id& id) {
    return noted(*this, [&] { return target().exists(id); });
}

result<std::optional<session_state>> watched_store::read(const session_id& id) {
    return noted(*this, [&] { return target().read(id); });
}

result<std::vector<catalog_entry>> watched_store::sessions(const catalog_query& q) {
    return noted(*this, [&] { return target().sessions(q); });
}

}  // namespace wuhu::storage
