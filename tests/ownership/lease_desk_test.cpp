// The lease desk (ownership/lease_desk.hpp): lease-store calls run on one strand; a renewal goes
// ahead of the acquisitions already waiting there.
#include "ownership/lease_desk.hpp"
#include "ownership/memory_lease.hpp"
#include "tests/support/forwarding_lease.hpp"

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <mutex>
#include <thread>

namespace wuhu::testing {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// A lease store whose transactions take 10 ms (a slow disk): an acquisition, or a burst of
// them taken together (acquire_all). It records the order of its calls.
class slow_leases final : public forwarding_lease {
  public:
    explicit slow_leases(ownership::lease_store& inner) : forwarding_lease(inner) {}
    ownership::result<ownership::acquisition> acquire(const session::session_id& id,
                                                      std::string_view owner,
                                                      std::chrono::milliseconds ttl) override {
        std::this_thread::sleep_for(10ms);
        note("acquire " + id.str());
        return forwarding_lease::acquire(id, owner, ttl);
    }
    std::vector<ownership::result<ownership::acquisition>> acquire_all(
        const std::vector<session::session_id>& ids, std::string_view owner,
        std::chrono::milliseconds ttl) override {
        std::this_thread::sleep_for(10ms);
        note("acquire " + std::to_string(ids.size()));
        std::vector<ownership::result<ownership::acquisition>> out;
        for (const auto& id : ids) {
            out.push_back(forwarding_lease::acquire(id, owner, ttl));
        }
        return out;
    }
    ownership::result<std::vector<session::session_id>> renew(
        const std::vector<ownership::lease>& held, std::chrono::milliseconds ttl) override {
        note("renew");
        return forwarding_lease::renew(held, ttl);
    }

    std::vector<std::string> calls() {
        std::lock_guard lock(mu_);
        return calls_;
    }

  private:
    void note(std::string what) {
        std::lock_guard lock(mu_);
        calls_.push_back(std::move(what));
    }
    std::mutex mu_;
    std::vector<std::string> calls_;
};

asio::awaitable<void> place(ownership::lease_desk& desk, std::string id) {
    auto placed = co_await desk.place(session::session_id::parse(id).value());
    EXPECT_TRUE(placed) << id;
}

asio::awaitable<void> renew(ownership::lease_desk& desk, bool& renewed) {
    auto lost = co_await desk.renew();
    EXPECT_TRUE(lost);
    EXPECT_TRUE(lost && lost->empty()) << "nothing was lost";
    renewed = true;
}

}  // namespace

TEST(LeaseDesk, ARenewalGoesAheadOfTheAcquisitionsWaitingOnTheStrand) {
    ownership::memory_lease inner;
    slow_leases store(inner);
    ownership::keeper keeper(store, "w1", 60s);
    asio::thread_pool pool(1);
    asio::io_context io;
    ownership::lease_desk desk(keeper, asio::make_strand(pool.get_executor()));
    asio::co_spawn(io, place(desk, "held"), asio::detached);
    io.run();
    io.restart();
    // A burst of new sessions, then the renewal of the one held.
    constexpr int burst = 40;
    for (int i = 0; i < burst; ++i) {
        asio::co_spawn(io, place(desk, "s" + std::to_string(i)), asio::detached);
    }
    bool renewed = false;
    asio::co_spawn(io, renew(desk, renewed), asio::detached);
    io.run();
    pool.join();
    EXPECT_TRUE(renewed);
    const auto calls = store.calls();
    // The 40 are taken in a few transactions (those that came while one ran, together).
    std::size_t acquired = 0;
    for (const auto& c : calls) {
        if (c != "renew") {
            acquired += std::stoul(c.substr(std::string("acquire ").size()));
        }
    }
    EXPECT_EQ(acquired, burst + 1u);
    EXPECT_LT(calls.size(), burst + 2u) << "the burst was taken one lease at a time";
    const auto at = std::find(calls.begin(), calls.end(), "renew") - calls.begin();
    // Behind the one or two transactions already running when it came, not behind all.
    EXPECT_LE(at, 3) << "the renewal ran after " << at - 1 << " of the lease transactions";
}

}  // namespace wuhu::testing
