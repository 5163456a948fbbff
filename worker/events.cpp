#include "worker/events.hpp"

#include <vector>

namespace wuhu::worker {

std::uint64_t event_hub::add(event_sink s) {
    std::uint64_t id = next_++;
    sinks_.emplace(id, std::move(s));
    return id;
}

void event_hub::remove(std::uint64_t id) {
    sinks_.erase(id);
}

void event_hub::emit(const loop_event& e) {
    // A sink may unsubscribe itself or others while being called.
    std::vector<std::uint64_t> ids;
    ids.reserve(sinks_.size());
    for (const auto& [id, s] : sinks_) {
        ids.push_back(id);
    }
    for (auto id : ids) {
        auto it = sinks_.find(id);
        if (it != sinks_.end()) {
            it->second(e);
        }
    }
}

subscription& subscription::operator=(subscription&& o) noexcept {
    if (this != &o) {
        reset();
        hub_ = std::move(o.hub_);
        id_ = std::exchange(o.id_, 0);
    }
    return *this;
}

void subscription::reset() {
    if (id_ != 0) {
        if (auto hub = hub_.lock()) {
            hub->remove(id_);
        }
        id_ = 0;
    }
}

}  // namespace wuhu::worker
