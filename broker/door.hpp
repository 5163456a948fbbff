// The serving executor's door: requests taken from NATS wait here by session and are started
// one session at a time, in turn.
//
// A request is decoded on the executor when it starts (up to the content limit each, 256 KiB by
// default), so in arrival order a burst of one session's requests would hold every other
// session's request behind it. In turn, a session flooded with requests waits behind its own
// requests only: the executor starts at most one of them before the next session's. The door
// also counts each session's requests from taken to answered, and refuses one past the bound.
//
// Thread-safe: the NATS threads take, the executor starts and answers.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace wuhu::broker {

template <class T>
class door {
public:
    // `max_per_session`: requests of one session between taken and answered (0: no bound).
    explicit door(std::size_t max_per_session) : max_per_session_(max_per_session) {}

    enum class taken {
        refused,      // the session has max_per_session requests in: nothing kept
        waiting,      // behind others; a start is already scheduled
        start_next,   // the caller schedules a start (nothing was waiting)
    };

    // Takes `item` for session `key` (any string: requests with a bad subject share one);
    // `item` is moved from only when taken.
    taken take(const std::string& key, T&& item) {
        std::lock_guard lock(mu_);
        auto& s = sessions_[key];
        if (max_per_session_ > 0 && s.in >= max_per_session_) {
            return taken::refused;
        }
        ++s.in;
        if (s.waiting.empty()) {
            turns_.push_back(key);
        }
        s.waiting.push_back(std::move(item));
        if (scheduled_) {
            return taken::waiting;
        }
        scheduled_ = true;
        return taken::start_next;
    }

    // The next request in turn, its session's key first. Nullopt when none waits: the next
    // take schedules a start again.
    std::optional<std::pair<std::string, T>> next() {
        std::lock_guard lock(mu_);
        if (turns_.empty()) {
            scheduled_ = false;
            return std::nullopt;
        }
        std::string key = std::move(turns_.front());
        turns_.pop_front();
        auto& s = sessions_.at(key);
        T item = std::move(s.waiting.front());
        s.waiting.pop_front();
        if (!s.waiting.empty()) {
            turns_.push_back(key);  // its next request waits for the other sessions' turns
        }
        return std::make_pair(std::move(key), std::move(item));
    }

    // One of `key`'s requests (returned by next) was answered.
    void answered(const std::string& key) {
        std::lock_guard lock(mu_);
        if (auto it = sessions_.find(key); it != sessions_.end() && --it->second.in == 0) {
            sessions_.erase(it);
        }
    }

    // Sessions with requests in (for tests: the door keeps nothing of an answered session).
    std::size_t sessions() const {
        std::lock_guard lock(mu_);
        return sessions_.size();
    }

private:
    struct session {
        std::size_t in = 0;      // taken and not answered
        std::deque<T> waiting;   // taken and not started
    };
    const std::size_t max_per_session_;
    mutable std::mutex mu_;
    std::unordered_map<std::string, session> sessions_;
    std::deque<std::string> turns_;  // sessions with requests waiting, in turn
    bool scheduled_ = false;         // a start is scheduled on the executor
};

}  // namespace wuhu::broker
