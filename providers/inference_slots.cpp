#include "providers/inference_slots.hpp"

#include <algorithm>

namespace wuhu::providers {

std::size_t inference_slots::running(const std::string& tenant) const {
    const auto it = running_.find(tenant);
    return it == running_.end() ? 0 : it->second;
}

std::size_t inference_slots::waiting() const {
    std::size_t n = 0;
    for (const auto& [tenant, line] : lines_) {
        n += line.size();
    }
    return n;
}

bool inference_slots::may_run(const std::string& tenant) const {
    return (limits_.total == 0 || total_running_ < limits_.total) &&
           (limits_.per_tenant == 0 || running(tenant) < limits_.per_tenant);
}

asio::awaitable<inference_slots::slot> inference_slots::acquire(std::string tenant) {
    if (may_run(tenant) && !lines_.contains(tenant) && (limits_.total == 0 || lines_.empty())) {
        // Nobody waits ahead of it: no line to jump.
        ++total_running_;
        ++running_[tenant];
        co_return slot(this, std::move(tenant));
    }
    auto w = std::make_shared<waiter>();
    lines_[tenant].push_back(w);
    // Leaves the line when cancelled; a slot granted but never taken goes to the next.
    struct leaving {
        inference_slots* self;
        std::shared_ptr<waiter> w;
        std::string tenant;
        bool taken = false;
        ~leaving() {
            if (taken) {
                return;
            }
            if (w->granted) {
                self->release(tenant);
                return;
            }
            if (auto it = self->lines_.find(tenant); it != self->lines_.end()) {
                std::erase(it->second, w);
                if (it->second.empty()) {
                    self->lines_.erase(it);
                }
            }
        }
    } guard{this, w, tenant};
    hand_out();  // a slot may be free for a tenant that only had to queue behind others
    co_await w->ready.wait();
    guard.taken = true;
    co_return slot(this, std::move(tenant));
}

void inference_slots::release(const std::string& tenant) {
    --total_running_;
    if (auto it = running_.find(tenant); it != running_.end() && --it->second == 0) {
        running_.erase(it);
    }
    hand_out();
}

void inference_slots::hand_out() {
    while (!lines_.empty() && (limits_.total == 0 || total_running_ < limits_.total)) {
        // The waiting tenant with the fewest running that may run more; ties: the first after
        // the one served last, in name order (round robin).
        auto best = lines_.end();
        std::size_t fewest = 0;
        auto consider = [&](auto from, auto to) {
            for (auto it = from; it != to; ++it) {
                const std::size_t n = running(it->first);
                if ((limits_.per_tenant == 0 || n < limits_.per_tenant) &&
                    (best == lines_.end() || n < fewest)) {
                    best = it;
                    fewest = n;
                }
            }
        };
        const auto after = lines_.upper_bound(served_last_);
        consider(after, lines_.end());
        consider(lines_.begin(), after);
        if (best == lines_.end()) {
            return;  // every waiting tenant has its share running
        }
        auto w = best->second.front();
        best->second.pop_front();
        served_last_ = best->first;
        ++total_running_;
        ++running_[best->first];
        w->granted = true;
        w->ready.notify();
        if (best->second.empty()) {
            lines_.erase(best);
        }
    }
}

}  // namespace wuhu::providers
