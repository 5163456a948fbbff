// The request side of a worker: takes requests on `<prefix>.session.>` (with tenancy
// `<prefix>.*.session.>`, protocol/subjects.hpp) in the queue group `wuhu-workers` and
// requests forwarded to it on `<prefix>.worker.<worker-id>.…`, routes each by the session's
// lease (here, or forwarded to the live owner, which answers the caller directly: the caller's
// reply subject travels in the `Wuhu-Reply` header, because nats-server refuses a publish that
// carries the reply subject of a request that came through an account import; the owner
// acknowledges the forward on `<prefix>.worker.<forwarder>.ack.<n>` as it takes it, and a
// forward not acknowledged in `forward_ack_timeout` has the owner's lease watched: routed again
// once that lease expired or changed hands, so that a request sent to an owner that just died
// or froze is served when its lease runs out, not lost until the caller's timeout), answers after
// the command is durable, and publishes every session's committed patches, status changes and
// stream deltas. Any worker answers the fleet view (a tenant's, or every tenant's for the
// fleet's own account). libnats callbacks only copy the message and post it to the worker's
// executor; nothing blocks a libnats thread.
//
// Routing, per request: a command that creates a session (enqueue, system, configure) takes the
// lease if nobody live holds it; any other (subscribe, cancel, abort, pause, resume, delete)
// looks first, and a session that does not exist is answered as such, creating nothing. A
// request whose session was unloaded, deleted or fenced while it waited changed nothing, and is
// routed again (at most three times, then `owner_changed`, which clients retry).
//
// Every failed publish (a reply or an event) is logged with its session and counted.
//
// Executor: handle() and the event forwarding run on `ex`, the registry's executor.
#pragma once

#include "broker/admin.hpp"
#include "broker/admission.hpp"
#include "broker/answer.hpp"
#include "broker/door.hpp"
#include "broker/patch_batch.hpp"
#include "nats/connection.hpp"
#include "ownership/lease_desk.hpp"
#include "protocol/replies.hpp"
#include "protocol/requests.hpp"
#include "runtime/work_gate.hpp"
#include "worker/registry.hpp"

#include <spdlog/logger.h>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <map>
#include <set>
#include <mutex>
#include <unordered_map>
#include <chrono>
#include <functional>
#include <random>
#include <variant>

namespace wuhu::broker {

namespace asio = boost::asio;

struct server_options {
    std::string prefix = "wuhu";
    // Tenancy (DESIGN.md "Tenancy and access control"): the tenant is a token of every
    // subject, and part of every session's identity.
    protocol::tenancy tenancy;
    std::string queue_group = "wuhu-workers";
    protocol::request_limits limits;
    // The largest reply message; a larger subscribe reply goes out in ordered chunks. 0: the
    // server's max payload.
    std::size_t max_reply_bytes = 0;
    // How long the fleet view waits for the owners' pages (asked all at once).
    std::chrono::milliseconds admin_timeout{500};
    // The model endpoints of the providers file, each with whether it has a default model: a
    // configure whose model names none of them (and is not "scripted"), names one without a
    // model after it ("openai/"), or names one alone that has no default model, is refused.
    // Empty: no providers file, any model (the scripted one answers).
    std::map<std::string, bool> model_endpoints;
    // Told of each request answered here, on the executor: its verb (one of protocol's verbs,
    // or "invalid"), its result ("ok", or the error code) and how long it took.
    std::function<void(std::string_view verb, std::string_view result,
                       std::chrono::steady_clock::duration took)>
        on_answered;
    // Told when the store refused this worker's epoch for a request (a newer owner, or a
    // deletion): the lease is dropped and the request routed again.
    std::function<void()> on_fenced;
    // Bounds (DESIGN.md "Bounds"; docs/operations.md "Limits"). Requests taken and not yet
    // answered, at most: past it a request is answered `overloaded` at once, from the NATS
    // thread, before anything of it is kept (0: no limit).
    std::size_t max_in_flight = 1024;
    // Requests of one session taken and not yet answered, at most: past it a request is also
    // answered `overloaded` at the door, before it is read, so that a client flooding one
    // session costs the worker little of what the others need (0: no limit).
    // wuhu-worker: twice --max-commands-per-session (its waiting commands, and as many reads).
    std::size_t max_per_session = 128;
    // The wait an `overloaded` or `lane_full` refusal suggests (retry_after_ms).
    std::chrono::milliseconds retry_after{100};
    // Per tenant (the fleet's "" without tenancy): requests and new sessions per second, and
    // the sessions kept.
    tenant_limits tenants;
    // The fleet view: owners asked at once by one listing, at most (more are asked in waves),
    // and listings waiting for this worker's admin thread, at most (overloaded past it).
    std::size_t max_fanout = 32;
    // A subscribe reply holds at most this many entries and facts, and about this many bytes
    // of their text: a longer backfill comes in pages (`more`), each asked for since the last.
    std::size_t subscribe_page_items = 1000;
    std::size_t subscribe_page_bytes = 1024 * 1024;
    std::size_t max_pending_views = 64;
    // How long a forward waits for its owner's acknowledgement before the owner's lease is
    // watched (an owner that died or is frozen, its lease not yet expired).
    std::chrono::milliseconds forward_ack_timeout{250};
    // Told of each refusal of a bound (its code: overloaded, lane_full, rate_limited,
    // quota_exceeded), from any thread.
    std::function<void(std::string_view reason)> on_refused;
};

// The payload a loop event publishes on `<prefix>.events.<sid>.delta` (protocol/events.hpp),
// if it publishes one there (patches go to `.patch`).
std::optional<std::string> delta_event(const worker::loop_event& e);

class server {
  public:
    server(asio::any_io_executor ex, nats::connection& nats, ownership::lease_desk& leases,
           const tools::tool_registry& tools, server_options options,
           std::shared_ptr<spdlog::logger> log);

    // The forwarder to give the session registry: publishes patches and deltas. Called on the
    // executor. A patch waits until the executor has run what is ready, so that a loop state
    // change that follows a commit rides in its message (patch_batch); a delta or a reply
    // publishes the held patches first.
    worker::session_registry::event_forwarder publisher();
    // Publishes the held patches now. REQUIRES: on the executor.
    void flush_patches();
    // Subscribes; requests are then handled on the executor. Each request received, and each
    // subscription draining, holds a pass of `work` until it is done.
    void start(worker::session_registry& registry, runtime::work_gate& work);
    // The first step of a stop: drains the queue-group subscriptions (new requests go to the
    // other workers; those already received are still handled) and serves only the sessions
    // it has loaded and still holds (others get worker_stopping). Requests forwarded to this
    // worker are still taken until finish(). REQUIRES: on the executor.
    void stop_taking();
    // The last step, once the leases are released: drains the forwarding subscriptions.
    void finish();
    // Unsubscribes everything at once, dropping what libnats still holds (a node that never
    // ran: no callback may reach the server once it is gone).
    void cancel();
    // Requests received and not answered yet (the worker drains them before it stops).
    std::size_t in_flight() const { return in_flight_.load(); }

    // The answer to one request: its reply messages, in order (one, or the chunks of a large
    // subscribe reply; none when the request was forwarded to the session's owner), and its
    // outcome (routing.cpp).
    asio::awaitable<answer> handle(worker::session_registry& registry, nats::message m);

    const server_options& options() const { return options_; }
    const protocol::subject_layout& subjects() const { return subjects_; }
    const std::string& worker_id() const { return leases_.keeper().worker_id(); }
    // Whether a reply may be published to `reply`: not one of the fleet's own subjects
    // (`<prefix>.…`), where a reply would be published as the fleet (nats-server does not
    // check a reply subject against its sender's permissions).
    bool answerable(std::string_view reply) const { return !subjects_.within_prefix(reply); }
    // The answer to `<prefix>.admin.sessions` (blocking: it asks every owner; run it off the
    // executor).
    std::string list_sessions(const nats::message& m);

    // Requests this worker forwarded to another owner (for tests and logs).
    std::size_t forwarded() const { return forwarded_.load(); }
    // Forwarded requests that no owner acknowledged and that this worker routed again (their
    // owner's lease expired or changed hands while it watched).
    std::size_t rerouted() const { return rerouted_.load(); }
    // Replies and events that could not be published (too large, or the connection refused).
    std::size_t publish_failures() const { return publish_failures_.load(); }
    // Publishes; a failure is counted and logged with `what` and its session (or subject).
    void publish(const std::string& subject, std::string_view data, std::string_view what,
                 std::string_view context);
    void count_failure(std::string_view what, std::string_view context, std::size_t bytes);
    // A request was answered (tells server_options::on_answered).
    void answered(std::string_view verb, std::string_view result,
                  std::chrono::steady_clock::duration took) const {
        if (options_.on_answered) {
            options_.on_answered(verb, result, took);
        }
    }

    // Where the answer to `m` goes: its reply subject, or the Wuhu-Reply header's of a request
    // forwarded to this worker; empty when nobody may be answered (none, or one of the fleet's
    // own subjects: counted as a failure).
    std::string reply_target(const nats::message& m);
    // Answers a refusal of a bound (an error reply with its retry hint) and counts it.
    answer refusal(session::errc why, std::optional<std::chrono::milliseconds> retry_after);

    // The header that carries a forwarded request's reply subject.
    static constexpr std::string_view reply_header = "Wuhu-Reply";
    // The header that names the subject on which the owner acknowledges a forwarded request.
    static constexpr std::string_view ack_header = "Wuhu-Ack";

  private:
    // Where a request goes (routing.cpp): here under an epoch, to another owner, nowhere (a
    // subscribe of a session nobody owns: read from the store, no lease taken), or an answer
    // now (the lease store failed, the worker is stopping, the session does not exist and the
    // request would not create it). The lease is taken for a request that creates the session,
    // or that changes one that exists.
    struct nobody {};
    using route_to =
        std::variant<ownership::keeper::here, ownership::keeper::elsewhere, nobody, answer>;
    asio::awaitable<route_to> route(worker::session_registry& registry,
                                    const protocol::request& req);
    // The subscribe reply from the stored state of a session nobody owns.
    asio::awaitable<answer> read_unowned(worker::session_registry& registry,
                                         const protocol::request& req);
    // Forwards `req` to its owner `to` and watches the acknowledgement: its answer (none to
    // send: the owner answers), or nullopt when it must be routed again (`sent_to` then names
    // that owner and epoch, never sent the request twice).
    asio::awaitable<std::optional<answer>> forward(
        const nats::message& m, const protocol::request& req, ownership::keeper::elsewhere to,
        std::optional<ownership::keeper::elsewhere>& sent_to);
    // Serves `req` here under `epoch`: its answer, or nullopt when it must be routed again (the
    // store refused the epoch, or the loop was closed).
    asio::awaitable<std::optional<answer>> serve_here(worker::session_registry& registry,
                                                      const protocol::request& req,
                                                      session::lease_epoch epoch);
    session::queue_item_id new_item_id();
    // A request of a session not loaded here that would create it: nullopt when the session
    // exists or its tenant may have one more (its token is taken), else the refusal.
    asio::awaitable<std::optional<answer>> admit_creation(worker::session_registry& registry,
                                                          const session::session_id& sid);
    // The refusal of a configure that names a tool this worker does not have, or a model
    // that names none of its endpoints.
    std::optional<answer> refused_settings(const session::session_id& sid,
                                           const protocol::request_body& body) const;
    // A page of a subscribe reply, copied from the loop's state now (on the executor); it is
    // serialized there when small, on the replies thread when large.
    struct subscribe_page {
        session::patch patch;  // its registers hold the status
        std::uint64_t step = 0;
        std::optional<protocol::inflight> streaming;
        bool more = false;
        std::size_t items() const;  // entries and facts
        std::vector<std::string> replies(std::size_t max_reply_bytes) const;
    };
    // The subscribe reply's page from the loop's state now (or the error reply).
    std::variant<subscribe_page, answer> subscribe(worker::agent_loop& loop,
                                                         const protocol::subscribe_request& req);
    // The page from a state read from the store, of a session nobody owns (idle; its status
    // stamped older than any an owner publishes).
    std::variant<subscribe_page, answer> subscribe(const session::session_state& st,
                                                        const protocol::subscribe_request& req);
    // The page from `st` with status `now` (and what `streaming` streams, if anything).
    std::variant<subscribe_page, answer> page_of(const session::session_state& st,
                                                      const protocol::subscribe_request& req,
                                                      session::loop_state current,
                                                      const session::status& now,
                                                      const worker::inflight_message* streaming);
    // A page's replies (serialized here when small, on the replies thread when large), or the
    // error reply that came instead of a page.
    asio::awaitable<answer> serialize(std::variant<subscribe_page, answer> page_or_error);
    std::string local_sessions(worker::session_registry& registry, const nats::message& m);
    // A page of the fleet view for a query whose sessions are named by their keys.
    std::string list_page(const protocol::sessions_query& q);
    // The fleet view's page from the store's index (every query but a loop state's): rows
    // with session keys as ids.
    std::string indexed_page(const protocol::sessions_query& q);
    // A page as the asker sees it: `tenant` set (a tenant's view), each row's id is the
    // session's id within the tenant; nullopt (the whole fleet's), with tenancy each row also
    // names its tenant and `next` is a key.
    std::string presented(std::string page, const std::optional<std::string>& tenant) const;
    // Asks each owner's admin.local at once: one body for all, or one each. Their pages by
    // owner (nullopt: no answer in time, or not a page).
    std::map<std::string, std::optional<owner_page>> ask_owners(
        const std::vector<std::string>& owners, const std::vector<std::string>& bodies);
    // A forward waiting for its owner's acknowledgement.
    struct forward_wait {
        forward_wait(const asio::any_io_executor& ex, std::string to)
            : wake(ex), owner(std::move(to)) {}
        // Sleeps `d`, or until the acknowledgement (or the worker's stop) cancels the wait.
        asio::awaitable<void> sleep(std::chrono::milliseconds d);
        asio::steady_timer wake;  // executor only
        const std::string owner;  // the worker the request was forwarded to
        std::atomic<bool> acked{false};
    };
    // Whether a forward of `sid` to `to` must be routed again: not acknowledged in time, and
    // the lease it was sent under expired or changed hands while it was watched (false: it
    // was acknowledged, the owner renewed its lease and lives, or the watch ran out).
    asio::awaitable<bool> unacknowledged(std::shared_ptr<forward_wait> wait,
                                         session::session_id sid,
                                         ownership::keeper::elsewhere to);
    // The acknowledgement of forward `n` arrived (any thread).
    void acknowledged(std::uint64_t n);
    // Starts the next request the door holds, and schedules the one after it.
    void start_next(worker::session_registry& registry);
    // Drains one subscription, holding a pass of the gate until the drain completes.
    void drain(std::size_t token);

    asio::any_io_executor ex_;
    nats::connection& nats_;
    ownership::lease_desk& leases_;
    runtime::work_gate* work_ = nullptr;
    const tools::tool_registry& tools_;
    server_options options_;
    std::shared_ptr<spdlog::logger> log_;
    protocol::subject_layout subjects_;
    std::shared_ptr<patch_batch> patches_;  // executor only
    runtime::system_clock clock_;
    std::mt19937_64 rng_{std::random_device{}()};
    std::atomic<std::size_t> forwarded_{0};
    std::atomic<std::size_t> rerouted_{0};
    // Forwards waiting for their acknowledgement, by number (any thread, under acks_mu_); at
    // most max_held_forwards are watched at once (past it, a forward is not watched).
    std::mutex acks_mu_;
    std::unordered_map<std::uint64_t, std::shared_ptr<forward_wait>> acks_;
    std::set<std::string> ackers_;  // the owners that acknowledged a forward of this worker
    std::atomic<std::uint64_t> next_forward_{0};
    std::atomic<std::size_t> in_flight_{0};
    std::atomic<std::size_t> publish_failures_{0};
    std::atomic<std::size_t> views_pending_{0};
    // Requests taken and not started, started one session at a time in turn (door.hpp).
    struct waiting {
        nats::message m;
        std::shared_ptr<runtime::work_gate::pass> pass;
        std::chrono::steady_clock::time_point taken;
    };
    door<waiting> door_{options_.max_per_session};
    admission admission_;  // executor only
    bool stopping_ = false;                     // executor only
    std::vector<std::size_t> taking_;           // queue-group subscriptions (drained first)
    std::vector<std::size_t> forwarded_to_me_;  // this worker's own subjects (drained last)
    // The registry's store, for the admin thread (thread-safe, and it outlives the server).
    storage::session_store* store_ = nullptr;
    // Admin listings wait on other workers' replies: one thread of their own, off the executor.
    asio::thread_pool admin_{1};
    // Large subscribe pages are serialized on a thread of their own, off the executor.
    asio::thread_pool replies_{1};
};

}  // namespace wuhu::broker
