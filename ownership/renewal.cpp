#include "ownership/renewal.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace wuhu::ownership {

asio::awaitable<void> renewal::run([[maybe_unused]] runtime::work_gate::pass pass) {
    bool failing = false;
    auto next_renewal = std::chrono::steady_clock::now() + keeper_.settings().renew_interval;
    for (;;) {
        auto wake = next_renewal;
        if (auto deadline = keeper_.next_deadline(); deadline && *deadline < wake) {
            wake = *deadline;
        }
        timer_.expires_at(wake);
        boost::system::error_code ec;
        co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if ((co_await asio::this_coro::cancellation_state).cancelled() !=
            asio::cancellation_type::none) {
            co_return;  // `pass` goes with the frame
        }
        if (std::chrono::steady_clock::now() < next_renewal) {
            keeper_.expire_overdue();  // woken early: a deadline, or hasten()
            continue;
        }
        next_renewal = std::chrono::steady_clock::now() + keeper_.settings().renew_interval;
        auto renewing = desk_.renew();
        auto renewed = co_await std::move(renewing);
        if (!renewed && !failing) {
            log_->error(
                "lease renewal failed: {}; sessions are unloaded as their leases run out",
                renewed.error().message());
        } else if (renewed && failing) {
            log_->info("lease renewal works again");
        }
        if (renewed && renewed_) {
            renewed_(keeper_.held());
        }
        failing = !renewed;
    }
}

}  // namespace wuhu::ownership
