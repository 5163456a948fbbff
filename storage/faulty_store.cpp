#include "storage/faulty_store.hpp"

namespace wuhu::storage {

class faulty_log final : public session_log {
  public:
    faulty_log(faulty_store& store, std::unique_ptr<session_log> inner)
        : session_log(inner->id(), inner->epoch()), store_(store), inner_(std::move(inner)) {}

  protected:
    result<session_state> do_load() override { return inner_->load(); }
    result<session::patch> do_since(const session::version_vector& from) override {
        return inner_->since(from);
    }
    result<void> do_commit(const session_state& before, const action_list& actions) override {
        {
            std::lock_guard lock(store_.thread_mu_);
            store_.last_thread_ = std::this_thread::get_id();
        }
        {
            std::unique_lock lock(store_.hold_mu_);
            ++store_.held_;
            store_.hold_cv_.wait(lock, [this] { return !store_.holding_; });
            --store_.held_;
        }
        if (store_.fail_before_ > 0) {
            --store_.fail_before_;
            return errc::unavailable;
        }
        if (store_.crash_budget_ == 0) {
            return errc::unavailable;
        }
        if (store_.crash_budget_ > 0) {
            --store_.crash_budget_;
        }
        auto r = forward_commit(*inner_, before, actions);
        if (r) {
            ++store_.commits_;
        }
        if (r && store_.fail_after_ > 0) {
            --store_.fail_after_;
            return errc::unavailable;
        }
        return r;
    }

  private:
    faulty_store& store_;
    std::unique_ptr<session_log> inner_;
};

void faulty_store::hold_commits() {
    std::lock_guard lock(hold_mu_);
    holding_ = true;
}

void faulty_store::release_commits() {
    {
        std::lock_guard lock(hold_mu_);
        holding_ = false;
    }
    hold_cv_.notify_all();
}

int faulty_store::held_commits() const {
    std::lock_guard lock(hold_mu_);
    return held_;
}

result<std::unique_ptr<session_log>> faulty_store::do_open(const session_id& id, lease_epoch epoch,
                                                           open_mode mode) {
    auto inner = target().open(id, epoch, mode);
    if (!inner) {
        return inner.error();
    }
    return std::unique_ptr<session_log>(std::make_unique<faulty_log>(*this, std::move(*inner)));
}

}  // namespace wuhu::storage
