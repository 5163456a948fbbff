// The recovery sweep: every `interval`, claims sessions that need an owner (work to do, or a
// timer due within two intervals) and have no live lease, and loads them; their loops resume by
// the normal sequence (the only recovery path). Several workers may sweep at once: the lease
// decides. Each round claims at most `batch` sessions in one lease-store transaction, from the
// candidates in an order of this worker's own: workers sweeping at once share the orphans out
// (on PostgreSQL, rows another worker is claiming are skipped), and 10,000 orphans after a
// crash are taken up at a bounded rate, not all at once. Sessions whose lease this worker holds
// but that are not loaded (a loop that failed, a load that did not happen) are this sweep's to
// load too. Logs each round that recovers sessions, and every session it recovers.
//
// Executor: the node's (the registry's); one round at a time.
#pragma once

#include "metrics/metrics.hpp"
#include "ownership/lease_desk.hpp"
#include "runtime/clock.hpp"
#include "runtime/work_gate.hpp"
#include "worker/registry.hpp"

#include <spdlog/logger.h>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <memory>
#include <random>

namespace wuhu::app {

namespace asio = boost::asio;

class recovery_sweep {
  public:
    struct settings {
        std::chrono::milliseconds interval;
        std::size_t batch = 64;
    };

    // `stopping`: read after each wait; once true the sweep ends (the stop releases what a
    // round took).
    recovery_sweep(settings s, worker::session_registry& registry, ownership::keeper& keeper,
                   ownership::lease_desk& leases, metrics::worker_metrics& metrics,
                   runtime::clock& clock, std::shared_ptr<spdlog::logger> log, const bool& stopping)
        : settings_(s),
          registry_(registry),
          keeper_(keeper),
          leases_(leases),
          metrics_(metrics),
          clock_(clock),
          log_(std::move(log)),
          stopping_(stopping) {}

    // Sweeps until the stop (or a cancellation), holding `pass` until it returns. Call once.
    asio::awaitable<void> run(runtime::work_gate::pass pass);

  private:
    asio::awaitable<void> round();

    settings settings_;
    worker::session_registry& registry_;
    ownership::keeper& keeper_;
    ownership::lease_desk& leases_;
    metrics::worker_metrics& metrics_;
    runtime::clock& clock_;
    std::shared_ptr<spdlog::logger> log_;
    const bool& stopping_;
    std::mt19937_64 rng_{std::random_device{}()};  // this worker's order of the orphans
};

}  // namespace wuhu::app
