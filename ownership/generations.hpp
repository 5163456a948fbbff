// Renewal per worker, not per lease (issue 36): what one lease store (one worker process) has
// stamped with its owner's current generation.
//
// Every backend keeps, beside the leases, a row per (owner, generation) with its own expiry:
// a lease row names the generation it was stamped with, and it is live while its own expiry or
// its generation's is in the future (its effective expiry is the later of the two). A renewal
// of exactly the leases the current generation holds extends that one row (one write, however
// many leases). Any other renewal (the first, one after the keeper dropped a lease it could not
// renew in time, one lease checked past its deadline, or after the generation itself expired)
// renews each lease that is still live as before, stamps them with a new generation whose row
// expires with them, and leaves the old generation's row to expire: a lease its owner no longer
// renews expires within a ttl, as it did when every lease was renewed alone.
//
// This is the bookkeeping: which generation is current for an owner, and which leases it holds
// (a count and an order-free 64-bit digest of their ids and epochs, not the ids: a loaded
// session costs no memory here). A digest that does not match only costs a renewal per lease.
//
// Thread safety: none; the backend calls it under its own lock, and records a change only once
// its transaction has committed.
#pragma once

#include "ownership/lease.hpp"

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wuhu::ownership {

class generations {
  public:
    // The owner's current generation; 0 when it has none yet.
    std::int64_t current(std::string_view owner) const {
        auto it = by_owner_.find(owner);
        return it == by_owner_.end() ? 0 : it->second.generation;
    }
    // The owner's current generation, or one `make()` makes in the caller's transaction when
    // it has none (`made`: record it once that transaction commits).
    template <class Make>
    std::int64_t current_or(std::string_view owner, bool& made, Make&& make) const {
        made = false;
        if (const auto g = current(owner); g != 0) {
            return g;
        }
        made = true;
        return make();
    }
    // `g` is the owner's generation now, holding exactly `leases`.
    void begin(std::string_view owner, std::int64_t g, const std::vector<lease>& leases = {}) {
        auto& s = by_owner_[std::string(owner)];
        s = standing{g, 0, 0};
        for (const auto& l : leases) {
            s.digest ^= key(l);
            ++s.count;
        }
    }
    // After a commit that stamped what `got` took with generation `g` of `owner` (`made`: the
    // commit made g, the owner's first).
    void record(std::string_view owner, std::int64_t g, bool made,
                std::span<const acquisition> got) {
        if (made) {
            begin(owner, g);
        }
        for (const auto& a : got) {
            if (const auto* l = std::get_if<lease>(&a)) {
                add(*l);
            }
        }
    }
    // `l` was stamped with its owner's current generation.
    void add(const lease& l) {
        if (auto it = by_owner_.find(l.owner);
            it != by_owner_.end() && it->second.count != doubted) {
            it->second.digest ^= key(l);
            ++it->second.count;
        }
    }
    // `l` was released or removed by this store: out of its generation (if it was in it; if not,
    // the digest no longer matches and the next renewal goes lease by lease).
    void drop(const lease& l) {
        if (auto it = by_owner_.find(l.owner);
            it != by_owner_.end() && it->second.count > 0 && it->second.count != doubted) {
            it->second.digest ^= key(l);
            --it->second.count;
        }
    }
    // An operation failed and may have committed all the same (a lease stamped, or a renewal
    // into a new generation): until the next one begins, no digest matches.
    void doubt() {
        for (auto& [owner, s] : by_owner_) {
            s.count = doubted;
        }
    }
    // `held` (all of one owner) is exactly what the owner's current generation holds.
    bool covers(const std::vector<lease>& held) const {
        if (held.empty()) {
            return false;
        }
        std::uint64_t d = 0;
        for (const auto& l : held) {
            if (l.owner != held.front().owner) {
                return false;
            }
            d ^= key(l);
        }
        return covers(held.front().owner, held.size(), d);
    }
    // The owner's current generation holds `count` leases whose keys xor to `digest`.
    bool covers(std::string_view owner, std::size_t count, std::uint64_t digest) const {
        auto it = by_owner_.find(owner);
        return count > 0 && it != by_owner_.end() && it->second.generation != 0 &&
               it->second.count == count && it->second.digest == digest;
    }

    // splitmix64's finalizer over the id's hash and the epoch: xor of these is an order-free
    // digest of a set (a caller that keeps the set keeps its digest so: ownership/keeper.hpp).
    static std::uint64_t key(const lease& l) {
        std::uint64_t z =
            std::hash<std::string_view>{}(l.id.str()) ^ (l.epoch.value * 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }

  private:
    static constexpr std::size_t doubted = std::numeric_limits<std::size_t>::max();
    struct standing {
        std::int64_t generation = 0;
        std::uint64_t digest = 0;
        std::size_t count = 0;
    };
    std::map<std::string, standing, std::less<>> by_owner_;
};

}  // namespace wuhu::ownership
