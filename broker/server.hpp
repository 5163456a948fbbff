// The request side of a worker: takes requests on `<prefix>.session.>` in the queue group
// `wuhu-workers`, answers each after its command is durable, and publishes every session's
// committed patches and stream deltas. libnats callbacks only copy the message and post it to
// the worker's executor; nothing blocks a libnats thread.
//
// Executor: handle() and the event forwarding run on `ex`, the registry's executor.
#pragma once

#include "broker/nats_client.hpp"
#include "broker/protocol.hpp"
#include "worker/registry.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <random>

namespace wuhu::broker {

namespace asio = boost::asio;

struct server_options {
    std::string prefix = "wuhu";
    std::string queue_group = "wuhu-workers";
    session::request_limits limits;
};

class server {
  public:
    server(asio::any_io_executor ex, nats_client& nats, server_options options);

    // The forwarder to give the session registry: publishes patches and deltas.
    worker::session_registry::event_forwarder publisher();
    // Subscribes; requests are then handled on the executor.
    void start(worker::session_registry& registry);

    // The reply to one request (also used directly by tests).
    asio::awaitable<std::string> handle(worker::session_registry& registry, nats_message m);

  private:
    session::queue_item_id new_item_id();

    asio::any_io_executor ex_;
    nats_client& nats_;
    server_options options_;
    worker::system_clock clock_;
    std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace wuhu::broker
