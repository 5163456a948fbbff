#include "broker/server.hpp"

#include "protocol/events.hpp"
#include "runtime/offload.hpp"
#include "session/overloaded.hpp"
#include "storage/errc.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <stdexcept>

namespace wuhu::broker {

namespace s = wuhu::session;

namespace {

using protocol::verb;

// Routing a request more often than this (its session was unloaded, deleted or fenced each
// time it reached it) answers owner_changed: the client retries later. (A request that waited
// behind a delete needs three: closed, then refused at its old epoch, then a new session.)
// A forward that its owner did not acknowledge and that is routed again (server.hpp) counts
// as one of these routes.
constexpr int max_routes = 4;

// Forwards watched at once, at most (each holds a coroutine and, once unacknowledged, asks the
// lease store a few times a second, on the strand every lease operation of this worker takes):
// past it, a forward is sent as before, unwatched.
constexpr std::size_t max_held_forwards = 64;

// The answer to a request for a session that does not exist: nothing is created.
std::vector<std::string> absent_session(const protocol::request& req,
                                        std::size_t max_reply_bytes) {
    switch (req.to.what) {
        case verb::subscribe: {
            const s::session_state empty;
            auto p = s::since(empty, std::get<protocol::subscribe_request>(req.body).since);
            if (!p) {
                return {protocol::error_reply(p.error())};
            }
            return protocol::chunked(protocol::subscribe_reply(*p, *p->state, 0, std::nullopt),
                                     max_reply_bytes);
        }
        case verb::cancel:
            return {protocol::error_reply(s::errc::item_not_found)};
        case verb::pause:
        case verb::resume:
            return {protocol::error_reply(s::errc::session_not_found)};
        default:  // abort (nothing to stop), delete (idempotent)
            return {protocol::ok_reply(req.to.what, {})};
    }
}

// The loop's command for a request that changes the session. Every request type is named (a
// new one does not compile until it is mapped); subscribe and delete are served without a
// command, and never come here.
worker::command command_for(const protocol::request_body& body) {
    return std::visit(
        s::overloaded{
            [](const s::enqueue_input& in) -> worker::command {
                return worker::enqueue_command{in};
            },
            [](const protocol::cancel_request& r) -> worker::command {
                return worker::cancel_command{r.in, r.id};
            },
            [](const s::settings_update& u) -> worker::command {
                return worker::configure_command{u};
            },
            [](const protocol::abort_request& r) -> worker::command {
                return worker::abort_command{r.reason, r.id};
            },
            [](const protocol::pause_request&) -> worker::command {
                return worker::pause_command{};
            },
            [](const protocol::resume_request&) -> worker::command {
                return worker::resume_command{};
            },
            [](const protocol::subscribe_request&) -> worker::command {
                throw std::logic_error("subscribe is served without a command");
            },
            [](const protocol::remove_request&) -> worker::command {
                throw std::logic_error("delete is served without a command");
            },
        },
        body);
}

protocol::command_result result_of(const worker::command_reply& r) {
    return protocol::command_result{r.id,
                                    r.canceled,
                                    r.config,
                                    r.aborted.stopped,
                                    r.aborted.entry,
                                    r.aborted.duplicate};
}

// The verb of a request's subject, from the bounded set (a metric label).
std::string_view verb_of(std::string_view subject) {
    const auto v = protocol::verb_named(subject.substr(subject.rfind('.') + 1));
    return v ? protocol::verb_name(*v) : std::string_view("invalid");
}

// "ok", or the error code of a reply (a metric label: the codes are a bounded set).
std::string_view outcome_of(std::string_view reply) {
    if (reply.starts_with(R"({"ok":true)")) {
        return "ok";
    }
    constexpr std::string_view key = R"("code":")";
    const auto at = reply.find(key);
    if (at == std::string_view::npos) {
        return "error";
    }
    const auto code = reply.substr(at + key.size(), 40);
    const auto end = code.find('"');
    if (end == std::string_view::npos ||
        code.substr(0, end).find_first_not_of("abcdefghijklmnopqrstuvwxyz_") !=
            std::string_view::npos) {
        return "error";
    }
    return code.substr(0, end);
}

// The header that carries a forwarded request's reply subject (server.hpp).
constexpr std::string_view reply_header = "Wuhu-Reply";
// The header that names the subject on which the owner acknowledges a forwarded request.
constexpr std::string_view ack_header = "Wuhu-Ack";

// One request, answered on the executor (a named coroutine taking its arguments by value).
// `began`: when the worker took it (its wait at the door counts).
asio::awaitable<void> serve(server* srv, worker::session_registry* reg, nats::message m,
                            std::chrono::steady_clock::time_point began) {
    if (m.bad_reply) {
        // A reply subject with bytes a C string hides: answering it would reach another inbox.
        srv->count_failure("reply (the reply subject has a NUL byte)", m.subject, 0);
        co_return;
    }
    const std::string reply_to = srv->reply_target(m);
    std::string subject = m.subject;
    std::vector<std::string> replies;
    try {
        auto handled = srv->handle(*reg, std::move(m));
        replies = co_await std::move(handled);
    } catch (const std::exception& e) {
        // A bug, not bad input (that has its codes): the caller still gets an answer.
        replies = {protocol::error_reply("internal", e.what())};
    }
    if (!reply_to.empty()) {
        srv->flush_patches();  // a command's patch goes out before its reply, as it happened
        for (const auto& r : replies) {
            srv->publish(reply_to, r, "reply", subject);
        }
    }
    if (!replies.empty()) {  // empty: forwarded to the owner, which answers (and counts) it
        srv->answered(verb_of(subject), outcome_of(replies.front()),
                      std::chrono::steady_clock::now() - began);
    }
}

}  // namespace

std::string server::reply_target(const nats::message& m) {
    std::string to = m.reply;
    if (subjects_.for_worker(m.subject, worker_id())) {
        // Forwarded by another worker (only the fleet reaches these subjects): the caller's
        // reply subject is in the header (a worker of an earlier version kept it as the reply
        // subject). It is published to as any reply subject: checked whole first (nats/).
        for (const auto& [name, value] : m.headers) {
            if (name == reply_header) {
                to = value;
                break;
            }
        }
    }
    if (!answerable(to)) {
        // A reply subject among the fleet's own: answering would publish there as the fleet
        // (an event, a tool call, another worker's subject). The request is still served.
        count_failure("reply (the reply subject is one of the fleet's own subjects)", m.subject,
                      0);
        to.clear();
    }
    return to;
}

server::server(asio::any_io_executor ex, nats::connection& nats, ownership::lease_desk& leases,
               const tools::tool_registry& tools, server_options options,
               std::shared_ptr<spdlog::logger> log)
    : ex_(std::move(ex)),
      nats_(nats),
      leases_(leases),
      tools_(tools),
      options_(std::move(options)),
      log_(std::move(log)),
      subjects_(options_.prefix, options_.tenancy),
      patches_(std::make_shared<patch_batch>([this](const s::session_id& sid, const s::patch& p) {
          publish(subjects_.patch(sid), protocol::patch_event(p), "patch", sid.str());
      })),
      admission_(options_.tenants) {
    if (!subjects_.valid_worker(worker_id())) {
        throw std::invalid_argument(
            "the worker id must be 1-64 characters of [A-Za-z0-9_-] (and with tenancy not "
            "session, admin, events, tools or worker): " + worker_id());
    }
    // Forward numbers start anywhere (below 10^15, far from the 19 digits an acknowledgement
    // may have), so that a late acknowledgement meant for an earlier run of this worker id
    // acknowledges no forward of this one.
    next_forward_ = rng_() % 1'000'000'000'000'000ULL;
    auto max = nats_.max_payload();
    if (max > 0) {
        options_.limits.max_request_bytes = static_cast<std::size_t>(max);
        if (options_.max_reply_bytes == 0) {
            options_.max_reply_bytes = static_cast<std::size_t>(max);
        }
    }
}

void server::publish(const std::string& subject, std::string_view data, std::string_view what,
                     std::string_view context) {
    if (!nats_.publish(subject, data)) {
        count_failure(what, context, data.size());
    }
}

void server::count_failure(std::string_view what, std::string_view context, std::size_t bytes) {
    // Logged one by one at first, then once per thousand: an outage must not flood the log.
    const auto n = ++publish_failures_;
    if (n <= 20 || n % 1000 == 0) {
        log_->warn("could not publish a {} of {} ({} bytes; {} publishes failed so far)", what,
                   context, bytes, n);
    }
}

std::optional<std::string> delta_event(const worker::loop_event& e) {
    auto payload = std::visit(
        s::overloaded{
            [](const worker::stream_began_event& x) -> std::optional<boost::json::object> {
                return protocol::message_start(x.step, x.epoch);
            },
            [](const worker::stream_delta_event& x) -> std::optional<boost::json::object> {
                if (x.tool_call) {
                    return protocol::tool_call_delta(x.step, x.epoch, x.seq, x.tool_call->id,
                                                     x.tool_call->name, x.tool_call->arguments);
                }
                return protocol::text_delta(x.step, x.epoch, x.seq, x.text);
            },
            [](const worker::stream_ended_event& x) -> std::optional<boost::json::object> {
                if (x.committed) {
                    return std::nullopt;  // the patch with the assistant entry is message.end
                }
                return protocol::message_discard(x.step, x.epoch);
            },
            [](const auto&) -> std::optional<boost::json::object> { return std::nullopt; },
        },
        e);
    if (!payload) {
        return std::nullopt;
    }
    return boost::json::serialize(*payload);
}

worker::session_registry::event_forwarder server::publisher() {
    return [this](const s::session_id& sid, const worker::loop_event& e) {
        const s::patch* p = nullptr;
        bool loop_change = false;
        if (const auto* c = std::get_if<worker::committed_event>(&e)) {
            p = &c->patch;
        } else if (const auto* st = std::get_if<worker::state_event>(&e)) {
            p = &st->patch;
            loop_change = true;
        }
        if (p != nullptr) {
            if (patches_->add(sid, *p, loop_change)) {
                // Once the executor has run what is ready (the loop's next step, usually).
                asio::post(ex_, [held = std::weak_ptr<patch_batch>(patches_)] {
                    if (auto b = held.lock()) {
                        b->flush();
                    }
                });
            }
        } else if (auto d = delta_event(e)) {
            patches_->flush();  // in the order things happened
            publish(subjects_.delta(sid), *d, "stream delta", sid.str());
        }
    };
}

void server::flush_patches() {
    patches_->flush();
}

void server::start(worker::session_registry& registry, runtime::work_gate& work) {
    store_ = &registry.store();
    work_ = &work;
    // Counted from the libnats callback to the reply, so that a stopping worker can wait for
    // every request it has taken.
    auto on_request = [this, &registry](nats::message m) {
        // Admission: refused here, on the NATS thread, before anything of it is kept (a
        // coroutine, a pass) or read. Nothing changed; the client retries after the hint.
        auto turn_away = [this](const nats::message& refused) {
            if (!refused.bad_reply) {
                if (const auto to = reply_target(refused); !to.empty()) {
                    publish(to, refusal(s::errc::overloaded, options_.retry_after), "reply",
                            refused.subject);
                }
            }
        };
        const bool forwarded = subjects_.for_worker(m.subject, worker_id());
        if (forwarded) {
            // Taken: the worker that forwarded it stops watching this worker's lease. Only a
            // forward acknowledgement subject of the fleet is ever published to.
            for (const auto& [name, value] : m.headers) {
                if (name == ack_header && subjects_.is_forward_ack(value)) {
                    publish(value, "", "forward acknowledgement", m.subject);
                    break;
                }
            }
        }
        if (options_.max_in_flight > 0 && in_flight_.load() >= options_.max_in_flight) {
            return turn_away(m);
        }
        // The session's key (requests with a bad subject share one: serve() answers them).
        std::string key;
        auto to = forwarded ? subjects_.parse_forwarded(m.subject, worker_id())
                            : subjects_.parse_request(m.subject);
        if (to) {
            key = to->sid.str();
        }
        ++in_flight_;
        waiting w{std::move(m), std::make_shared<runtime::work_gate::pass>(work_->enter()),
                  std::chrono::steady_clock::now()};
        switch (door_.take(key, std::move(w))) {  // moved from only when taken
            case door<waiting>::taken::refused:
                --in_flight_;
                return turn_away(w.m);
            case door<waiting>::taken::start_next:
                asio::post(ex_, [this, &registry] { start_next(registry); });
                break;
            case door<waiting>::taken::waiting:
                break;
        }
    };
    taking_.push_back(
        nats_.queue_subscribe(subjects_.requests(), options_.queue_group, on_request));
    // The fleet view: any one worker answers, asking each owner for a page of its sessions.
    auto on_view = [this](nats::message m) {
        if (m.reply.empty() || m.bad_reply || !answerable(m.reply)) {
            return;  // nobody to answer (or a reply subject of the fleet's own)
        }
        if (options_.max_pending_views > 0 && views_pending_.load() >= options_.max_pending_views) {
            publish(m.reply, refusal(s::errc::overloaded, options_.retry_after), "fleet view reply",
                    "admin.sessions");
            return;
        }
        ++views_pending_;
        asio::post(admin_, [this, m = std::move(m)] {
            std::string page;
            try {
                page = list_sessions(m);
            } catch (const std::exception& e) {
                // A bug, not bad input (that has its codes): the caller still gets an answer.
                page = protocol::error_reply("internal", e.what());
            }
            for (const auto& part : protocol::chunked(page, options_.max_reply_bytes)) {
                publish(m.reply, part, "fleet view reply", "admin.sessions");
            }
            --views_pending_;
        });
    };
    taking_.push_back(nats_.queue_subscribe(subjects_.views(), options_.queue_group, on_view));
    if (const auto all = subjects_.fleet_view()) {
        taking_.push_back(nats_.queue_subscribe(*all, options_.queue_group, on_view));
    }
    forwarded_to_me_.push_back(
        nats_.subscribe(subjects_.forwarded_requests(worker_id()), on_request));
    forwarded_to_me_.push_back(
        nats_.subscribe(subjects_.forward_acks(worker_id()), [this](nats::message m) {
            if (auto n = subjects_.parse_forward_ack(m.subject, worker_id())) {
                acknowledged(*n);
            }
        }));
    forwarded_to_me_.push_back(
        nats_.subscribe(subjects_.local_sessions(worker_id()).value(),
                        [this, &registry](nats::message m) {
            if (m.reply.empty() || m.bad_reply || !answerable(m.reply)) {
                return;
            }
            ++in_flight_;
            auto pass = std::make_shared<runtime::work_gate::pass>(work_->enter());
            asio::post(ex_, [this, &registry, m = std::move(m), pass] {
                publish(m.reply, local_sessions(registry, m), "fleet view page", "admin.local");
                --in_flight_;
            });
        }));
    nats_.flush();
}

void server::start_next(worker::session_registry& registry) {
    auto next = door_.next();
    if (!next) {
        return;  // none waits: the next request taken schedules a start
    }
    auto& [key, w] = *next;
    asio::co_spawn(
        ex_, serve(this, &registry, std::move(w.m), w.taken),
        [this, pass = std::move(w.pass), key = std::move(key)](const std::exception_ptr&) {
            --in_flight_;
            door_.answered(key);
        });
    // The next one after what is already queued here (this one's start included): one
    // request of each session in turn.
    asio::post(ex_, [this, &registry] { start_next(registry); });
}

struct server::forward_wait {
    forward_wait(const asio::any_io_executor& ex, std::string to)
        : wake(ex), owner(std::move(to)) {}
    // Sleeps `d`, or until the acknowledgement (or the worker's stop) cancels the wait.
    asio::awaitable<void> sleep(std::chrono::milliseconds d) {
        wake.expires_after(d);
        boost::system::error_code ec;  // operation_aborted: woken early
        co_await wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    asio::steady_timer wake;  // executor only
    const std::string owner;  // the worker the request was forwarded to
    std::atomic<bool> acked{false};
};

void server::acknowledged(std::uint64_t n) {
    std::shared_ptr<forward_wait> wait;
    {
        std::lock_guard lock(acks_mu_);
        if (auto it = acks_.find(n); it != acks_.end()) {
            wait = it->second;
        }
    }
    if (wait) {
        {
            std::lock_guard lock(acks_mu_);
            ackers_.insert(wait->owner);
        }
        wait->acked = true;
        asio::post(ex_, [wait] { wait->wake.cancel(); });
    }
}

asio::awaitable<bool> server::unacknowledged(std::shared_ptr<forward_wait> wait,
                                             session::session_id sid,
                                             ownership::keeper::elsewhere to) {
    auto sleeping = wait->sleep(options_.forward_ack_timeout);
    co_await std::move(sleeping);
    if (wait->acked || stopping_) {
        co_return false;
    }
    // Only an owner that acknowledged a forward before is known to acknowledge each one it
    // takes: one of an earlier release never does, and may well have served the request (a
    // request routed again would then be served twice).
    bool acknowledges = false;
    {
        std::lock_guard lock(acks_mu_);
        acknowledges = ackers_.contains(to.owner);
    }
    if (!acknowledges) {
        co_return false;
    }
    // The lease the forward went under ends within its TTL, unless its owner renews it (it
    // lives, and answers): watched until then, a few times a second.
    const auto ttl = leases_.keeper().ttl();
    const auto poll = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(ttl / 10),
                                 std::chrono::milliseconds(50), std::chrono::milliseconds(250));
    const auto until = std::chrono::steady_clock::now() + ttl + options_.forward_ack_timeout;
    while (!wait->acked && !stopping_ && std::chrono::steady_clock::now() < until) {
        auto locating = leases_.locate(sid);
        auto at = co_await std::move(locating);
        if (wait->acked || stopping_) {
            break;
        }
        if (at) {
            if (!*at) {
                co_return true;  // nobody holds it now
            }
            const auto* e = std::get_if<ownership::keeper::elsewhere>(&**at);
            if (e == nullptr || e->owner != to.owner || e->epoch != to.epoch) {
                co_return true;  // taken here, or by another owner (or epoch)
            }
            if (e->expires.value > to.expires.value) {
                co_return false;  // renewed since: the owner lives, and answers
            }
        }  // else the lease store did not answer: asked again
        auto pausing = wait->sleep(poll);
        co_await std::move(pausing);
    }
    co_return false;
}

void server::cancel() {
    for (auto* list : {&taking_, &forwarded_to_me_}) {
        for (auto token : *list) {
            nats_.unsubscribe(token);
        }
        list->clear();
    }
}

void server::stop_taking() {
    stopping_ = true;
    {
        // Watched forwards stop watching (stopping_): the worker leaves, and routes nothing.
        std::lock_guard lock(acks_mu_);
        for (auto& [n, wait] : acks_) {
            wait->wake.cancel();
        }
    }
    for (auto token : taking_) {
        drain(token);
    }
    taking_.clear();
    nats_.flush();
}

void server::finish() {
    for (auto token : forwarded_to_me_) {
        drain(token);
    }
    forwarded_to_me_.clear();
    patches_->flush();
    nats_.flush();
}

void server::drain(std::size_t token) {
    // Requests already received may still be handed over until the drain completes.
    auto pass = std::make_shared<runtime::work_gate::pass>(work_->enter());
    nats_.drain(token, [pass] { auto done = std::move(*pass); });
}

s::queue_item_id server::new_item_id() {
    std::array<std::uint8_t, 10> random{};
    for (auto& b : random) {
        b = static_cast<std::uint8_t>(rng_());
    }
    return s::make_uuid_v7(clock_.now(), random);
}

asio::awaitable<std::vector<std::string>> server::handle(worker::session_registry& registry,
                                                         nats::message m) {
    using replies = std::vector<std::string>;
    using protocol::error_reply;
    // Bad input is answered by whichever worker received it, before any routing.
    const bool forwarded = subjects_.for_worker(m.subject, worker_id());
    auto decoded = protocol::decode_request(
        forwarded ? subjects_.parse_forwarded(m.subject, worker_id())
                  : subjects_.parse_request(m.subject),
        m.data, options_.limits, [this] { return new_item_id(); });
    if (!decoded) {
        co_return replies{error_reply(decoded.error())};
    }
    const protocol::request req = std::move(*decoded);
    const s::session_id& sid = req.to.sid;
    const verb what = req.to.what;
    if (!forwarded) {  // a forwarded request was admitted by the worker that took it
        if (auto wait = admission_.request(sid.tenant(), std::chrono::steady_clock::now())) {
            co_return replies{refusal(s::errc::rate_limited, wait)};
        }
    }
    // An error reply; a refusal of a bound carries its retry hint.
    auto failed = [&](const boost::system::error_code& ec) {
        if (ec.category() == s::session_category() &&
            s::is_refusal(static_cast<s::errc>(ec.value()))) {
            return refusal(static_cast<s::errc>(ec.value()), options_.retry_after);
        }
        return error_reply(ec);
    };
    const auto mode =
        protocol::creates_session(what) ? storage::open_mode::create : storage::open_mode::existing;
    // The store refused this worker's epoch (a newer owner, or a deletion at that epoch or
    // later): nothing changed; forget that lease (if still this one) and route again. A loop
    // this worker closed itself (`closed`: deleted, unloaded, replaced) needs only the routing:
    // the lease is already as it should be.
    auto fenced = [&](s::lease_epoch epoch) {
        if (options_.on_fenced) {
            options_.on_fenced();
        }
        leases_.lost(sid, epoch);  // if still the lease at that epoch
        registry.unload(sid, epoch);
    };
    auto route_again = [&](const boost::system::error_code& ec, s::lease_epoch epoch) {
        if (ec == storage::errc::lease_lost) {
            fenced(epoch);
        }
        return ec == storage::errc::lease_lost || ec == storage::errc::closed;
    };
    // The owner (and epoch) an unacknowledged forward went to, once it is routed again: never
    // sent to it twice (it would serve both copies).
    std::optional<ownership::keeper::elsewhere> sent_to;
    for (int attempt = 0; attempt < max_routes; ++attempt) {
        ownership::keeper::placement where;
        if (stopping_) {
            // Leaving: serve only what is loaded here under a lease still held; take nothing.
            auto locating = leases_.locate(sid);
            auto at = co_await std::move(locating);
            if (!at) {
                co_return replies{error_reply(at.error())};
            }
            if (!*at || !std::holds_alternative<ownership::keeper::here>(**at) ||
                !registry.contains(sid)) {
                co_return replies{error_reply(ownership::errc::worker_stopping)};
            }
            where = **at;
        } else if (protocol::creates_session(what)) {
            auto placing = leases_.place(sid);
            auto at = co_await std::move(placing);
            if (!at) {
                co_return replies{error_reply(at.error())};
            }
            where = *at;
        } else {
            auto locating = leases_.locate(sid);
            auto at = co_await std::move(locating);
            if (!at) {
                co_return replies{error_reply(at.error())};
            }
            if (!*at && what == verb::subscribe) {
                // Nobody runs it: answered from the store, without taking its lease (a
                // dashboard that polls a session must not keep it loaded). A page from the
                // stored state, read lease-free; nothing is created.
                auto reading = registry.read(sid);
                auto stored = co_await std::move(reading);
                if (!stored) {
                    co_return replies{error_reply(stored.error())};
                }
                if (!*stored) {
                    co_return absent_session(req, options_.max_reply_bytes);
                }
                auto serializing = serialize(
                    subscribe(**stored, std::get<protocol::subscribe_request>(req.body)));
                co_return co_await std::move(serializing);
            }
            if (!*at) {
                // Nobody runs it: read what exists, create nothing.
                auto checking = registry.exists(sid);
                auto there = co_await std::move(checking);
                if (!there) {
                    co_return replies{error_reply(there.error())};
                }
                if (!*there) {
                    co_return absent_session(req, options_.max_reply_bytes);
                }
                auto taking = leases_.place(sid);
                auto taken = co_await std::move(taking);
                if (!taken) {
                    co_return replies{error_reply(taken.error())};
                }
                where = *taken;
            } else {
                where = **at;
            }
        }
        if (const auto* other = std::get_if<ownership::keeper::elsewhere>(&where)) {
            if (forwarded) {  // never forwarded twice: the client retries and is routed afresh
                co_return replies{error_reply(ownership::errc::owner_changed)};
            }
            if (sent_to && sent_to->owner == other->owner && sent_to->epoch == other->epoch) {
                co_return replies{};  // it has the request (it renewed its lease): it answers
            }
            const auto subject = subjects_.forward(other->owner, sid, what);
            if (!subject) {
                // The lease store names an owner that is no subject token: never put in a
                // subject (it could name another one, or add a command to the protocol).
                co_return replies{error_reply("internal", "the session's owner id is invalid")};
            }
            ++forwarded_;
            // The caller's reply subject in a header: nats-server refuses a publish carrying
            // the reply subject of a request that came through an account import (`_R_.…`),
            // and the owner answers the caller directly. Any other reply subject is also the
            // message's own, for an owner of an earlier release (a rolling upgrade).
            nats::header_list headers;
            if (!m.reply.empty()) {
                headers.emplace_back(reply_header, m.reply);
            }
            const bool imported = m.reply.starts_with("_R_.");
            // The owner acknowledges the forward as it takes it. Without an acknowledgement in
            // time, the owner may have died or be frozen with its lease not yet expired: its
            // lease is watched, and the request routed again once that lease expired or
            // changed hands (served here, or by the new owner; the old owner, fenced, can no
            // longer change anything). A lost request then costs its caller the lease's expiry,
            // not the caller's own timeout.
            std::shared_ptr<forward_wait> wait;
            std::uint64_t n = 0;
            if (!stopping_) {
                std::lock_guard lock(acks_mu_);
                if (acks_.size() < max_held_forwards) {
                    wait = std::make_shared<forward_wait>(ex_, other->owner);
                    n = next_forward_++;
                    headers.emplace_back(ack_header, subjects_.forward_ack(worker_id(), n));
                    acks_.emplace(n, wait);
                }
            }
            const bool sent =
                nats_.publish_request(*subject, imported ? "" : m.reply, headers, m.data);
            if (!sent) {
                count_failure("forwarded request", sid.str(), m.data.size());
            }
            if (!wait) {
                co_return replies{};
            }
            // Until the watch ends, however it ends (an exception included).
            struct unwatch {
                server* self;
                std::uint64_t n;
                ~unwatch() {
                    std::lock_guard lock(self->acks_mu_);
                    self->acks_.erase(n);
                }
            } unwatching{this, n};
            bool again = false;
            if (sent) {
                auto watching = unacknowledged(wait, sid, *other);
                again = co_await std::move(watching);
            }
            if (!again || wait->acked) {
                co_return replies{};
            }
            ++rerouted_;
            sent_to = *other;
            continue;
        }
        const s::lease_epoch epoch = std::get<ownership::keeper::here>(where).epoch;
        // Settings are checked by the owner, against its own tools and endpoints: during a
        // rollout the same configure is not accepted or refused by whichever worker took it.
        if (auto refused = refused_settings(req.body)) {
            if (!registry.contains(sid)) {
                leases_.release(sid, epoch);  // taken for a session that is not made
            }
            co_return replies{std::move(*refused)};
        }

        if (what == verb::remove) {
            auto removing = registry.remove(sid, epoch);
            auto r = co_await std::move(removing);
            if (!r) {
                if (route_again(r.error(), epoch)) {
                    continue;
                }
                co_return replies{error_reply(r.error())};
            }
            // Its data is gone for good: its watchers learn it (before the reply, as a
            // command's patch goes out before its reply).
            publish(subjects_.deleted(sid),
                    boost::json::serialize(protocol::session_deleted(epoch.value)),
                    "deletion event", sid.str());
            auto forgetting = leases_.remove(sid, epoch);
            auto l = co_await std::move(forgetting);
            co_return replies{l ? protocol::ok_reply(what, {}) : error_reply(l.error())};
        }
        if (mode == storage::open_mode::create && !registry.contains(sid)) {
            auto admitting = admit_creation(registry, sid);
            if (auto refused = co_await std::move(admitting)) {
                if (!registry.contains(sid)) {
                    leases_.release(sid, epoch);  // taken for a session that is not made
                }
                co_return replies{std::move(*refused)};
            }
        }
        auto getting = registry.get(sid, epoch, mode);
        auto loop = co_await std::move(getting);
        if (!loop) {
            if (loop.error() == storage::errc::not_found) {
                // A read of a session that is gone (deleted since it was looked up): the lease
                // it took for it is given back, and nothing is created.
                if (!registry.contains(sid)) {
                    leases_.release(sid, epoch);  // if still the lease at that epoch
                }
                co_return absent_session(req, options_.max_reply_bytes);
            }
            if (route_again(loop.error(), epoch)) {
                continue;
            }
            co_return replies{error_reply(loop.error())};
        }
        if (const auto* sub = std::get_if<protocol::subscribe_request>(&req.body)) {
            auto serializing = serialize(subscribe(**loop, *sub));
            co_return co_await std::move(serializing);
        }
        auto sent = (*loop)->send(command_for(req.body));  // made afresh: it may be routed again
        auto r = co_await std::move(sent);
        if (!r) {
            if (route_again(r.error(), epoch)) {
                continue;
            }
            co_return replies{failed(r.error())};
        }
        co_return replies{protocol::ok_reply(what, result_of(*r))};
    }
    co_return replies{error_reply(ownership::errc::owner_changed)};
}

}  // namespace wuhu::broker
