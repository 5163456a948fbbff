// The request side of a worker: takes requests on `<prefix>.session.>` in the queue group
// `wuhu-workers` and requests forwarded to it on `<prefix>.worker.<worker-id>.session.>`,
// routes each by the session's lease (here, or forwarded to the live owner with the reply
// subject unchanged), answers after the command is durable, and publishes every session's
// committed patches and stream deltas. Any worker answers `<prefix>.admin.sessions`. libnats
// callbacks only copy the message and post it to the worker's executor; nothing blocks a libnats
// thread.
//
// Executor: handle() and the event forwarding run on `ex`, the registry's executor.
#pragma once

#include "broker/nats_client.hpp"
#include "broker/protocol.hpp"
#include "ownership/keeper.hpp"
#include "worker/registry.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <random>

namespace wuhu::broker {

namespace asio = boost::asio;

struct server_options {
    std::string prefix = "wuhu";
    std::string queue_group = "wuhu-workers";
    session::request_limits limits;
    // The largest reply message; a larger subscribe reply goes out in ordered chunks. 0: the
    // server's max payload.
    std::size_t max_reply_bytes = 0;
};

class server {
  public:
    server(asio::any_io_executor ex, nats_client& nats, ownership::keeper& keeper,
           server_options options);

    // The forwarder to give the session registry: publishes patches and deltas.
    worker::session_registry::event_forwarder publisher();
    // The epoch source to give the session registry: the keeper's lease.
    worker::session_registry::epoch_source epochs();
    // Subscribes; requests are then handled on the executor.
    void start(worker::session_registry& registry);
    // Unsubscribes (on shutdown, first): new requests go to the other workers of the queue
    // group, and forwarded ones time out for their callers, who retry. Requests already
    // received are still answered: those of loaded sessions as usual, the others with
    // worker_stopping. REQUIRES: on the executor.
    void stop();
    // Requests received and not answered yet (the worker drains them before it stops).
    std::size_t in_flight() const { return in_flight_.load(); }

    // The reply messages to one request, in order (one, or the chunks of a large subscribe
    // reply); none when the request was forwarded to the session's owner.
    asio::awaitable<std::vector<std::string>> handle(worker::session_registry& registry,
                                                     nats_message m);

    const server_options& options() const { return options_; }
    // The answer to `<prefix>.admin.sessions` (blocking: it asks every owner; run it off the
    // executor).
    std::string list_sessions(const nats_message& m);

    // Requests this worker forwarded to another owner (for tests and logs).
    std::size_t forwarded() const { return forwarded_.load(); }

  private:
    session::queue_item_id new_item_id();

    asio::any_io_executor ex_;
    nats_client& nats_;
    ownership::keeper& keeper_;
    server_options options_;
    std::string forward_prefix_;  // <prefix>.worker.<worker-id>
    worker::system_clock clock_;
    std::mt19937_64 rng_{std::random_device{}()};
    std::atomic<std::size_t> forwarded_{0};
    std::atomic<std::size_t> in_flight_{0};
    bool stopping_ = false;  // executor only
    std::vector<std::size_t> subscriptions_;
    // The registry's store, for the admin thread (thread-safe, and it outlives the server).
    storage::session_store* store_ = nullptr;
    // Admin listings wait on other workers' replies: one thread of their own, off the executor.
    asio::thread_pool admin_{1};
};

}  // namespace wuhu::broker
