// The server's routing (server.hpp): where a request goes (here, to its owner, nowhere), the
// forward to another owner and the watch of its acknowledgement, and the request served here.
#include "broker/server.hpp"

#include "protocol/events.hpp"
#include "session/overloaded.hpp"
#include "storage/errc.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
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
answer absent_session(const protocol::request& req, std::size_t max_reply_bytes) {
    switch (req.to.what) {
        case verb::subscribe: {
            const s::session_state empty;
            auto p = s::since(empty, std::get<protocol::subscribe_request>(req.body).since);
            if (!p) {
                return answer::error(p.error());
            }
            return answer::ok(protocol::chunked(
                protocol::subscribe_reply(*p, *p->state, 0, std::nullopt), max_reply_bytes));
        }
        case verb::cancel:
            return answer::error(s::errc::item_not_found);
        case verb::pause:
        case verb::resume:
        case verb::approve:
        case verb::reject:
        case verb::respond:
            return answer::error(s::errc::session_not_found);
        default:  // abort (nothing to stop), delete (idempotent)
            return answer::ok(protocol::ok_reply(req.to.what, {}));
    }
}

// The loop's command for a request that changes the session. Every request type is named (a
// new one does not compile until it is mapped); subscribe and delete are served without a
// command, and never come here.
worker::command command_for(const protocol::request_body& body) {
    return std::visit(s::overloaded{
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
                          [](const protocol::decide_request& r) -> worker::command {
                              return worker::decide_command{r.in};
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
                                    r.aborted.duplicate || (r.decided && r.duplicate),
                                    r.decided};
}

}  // namespace

asio::awaitable<answer> server::handle(worker::session_registry& registry, nats::message m) {
    // Bad input is answered by whichever worker received it, before any routing.
    const bool forwarded = subjects_.for_worker(m.subject, worker_id());
    auto decoded = protocol::decode_request(
        forwarded ? subjects_.parse_forwarded(m.subject, worker_id())
                  : subjects_.parse_request(m.subject),
        m.data, options_.limits, [this] { return new_item_id(); });
    if (!decoded) {
        co_return answer::error(decoded.error());
    }
    const protocol::request req = std::move(*decoded);
    if (!forwarded) {  // a forwarded request was admitted by the worker that took it
        if (auto wait = admission_.request(req.to.sid.tenant(), std::chrono::steady_clock::now())) {
            co_return refusal(s::errc::rate_limited, wait);
        }
    }
    // The owner (and epoch) an unacknowledged forward went to, once it is routed again: never
    // sent to it twice (it would serve both copies).
    std::optional<ownership::keeper::elsewhere> sent_to;
    for (int attempt = 0; attempt < max_routes; ++attempt) {
        auto routing = route(registry, req);
        auto where = co_await std::move(routing);
        std::optional<answer> done;
        if (auto* now = std::get_if<answer>(&where)) {
            done = std::move(*now);
        } else if (std::holds_alternative<nobody>(where)) {
            auto reading = read_unowned(registry, req);
            done = co_await std::move(reading);
        } else if (const auto* other = std::get_if<ownership::keeper::elsewhere>(&where)) {
            if (forwarded) {  // never forwarded twice: the client retries and is routed afresh
                co_return answer::error(ownership::errc::owner_changed);
            }
            auto forwarding = forward(m, req, *other, sent_to);
            done = co_await std::move(forwarding);
        } else {
            const s::lease_epoch epoch = std::get<ownership::keeper::here>(where).epoch;
            auto serving = serve_here(registry, req, epoch);
            done = co_await std::move(serving);
        }
        if (done) {
            co_return std::move(*done);
        }  // else routed again
    }
    co_return answer::error(ownership::errc::owner_changed);
}

asio::awaitable<server::route_to> server::route(worker::session_registry& registry,
                                                const protocol::request& req) {
    const s::session_id& sid = req.to.sid;
    const verb what = req.to.what;
    auto placed = [](const ownership::keeper::placement& p) -> route_to {
        return std::visit([](const auto& at) -> route_to { return at; }, p);
    };
    if (stopping_) {
        // Leaving: serve only what is loaded here under a lease still held; take nothing.
        auto locating = leases_.locate(sid);
        auto at = co_await std::move(locating);
        if (!at) {
            co_return answer::error(at.error());
        }
        if (!*at || !std::holds_alternative<ownership::keeper::here>(**at) ||
            !registry.contains(sid)) {
            co_return answer::error(ownership::errc::worker_stopping);
        }
        co_return placed(**at);
    }
    if (protocol::creates_session(what)) {
        auto placing = leases_.place(sid);
        auto at = co_await std::move(placing);
        if (!at) {
            co_return answer::error(at.error());
        }
        co_return placed(*at);
    }
    auto locating = leases_.locate(sid);
    auto at = co_await std::move(locating);
    if (!at) {
        co_return answer::error(at.error());
    }
    if (*at) {
        co_return placed(**at);
    }
    if (what == verb::subscribe) {
        co_return nobody{};
    }
    // Nobody runs it: read what exists, create nothing.
    auto checking = registry.exists(sid);
    auto there = co_await std::move(checking);
    if (!there) {
        co_return answer::error(there.error());
    }
    if (!*there) {
        co_return absent_session(req, options_.max_reply_bytes);
    }
    auto taking = leases_.place(sid);
    auto taken = co_await std::move(taking);
    if (!taken) {
        co_return answer::error(taken.error());
    }
    co_return placed(*taken);
}

asio::awaitable<answer> server::read_unowned(worker::session_registry& registry,
                                             const protocol::request& req) {
    // Answered from the store, without taking its lease (a dashboard that polls a session must
    // not keep it loaded): a page from the stored state, read lease-free; nothing is created.
    auto reading = registry.read(req.to.sid);
    auto stored = co_await std::move(reading);
    if (!stored) {
        co_return answer::error(stored.error());
    }
    if (!*stored) {
        co_return absent_session(req, options_.max_reply_bytes);
    }
    auto serializing =
        serialize(subscribe(**stored, std::get<protocol::subscribe_request>(req.body)));
    auto served = co_await std::move(serializing);
    co_return served;
}

asio::awaitable<std::optional<answer>> server::forward(
    const nats::message& m, const protocol::request& req, ownership::keeper::elsewhere other,
    std::optional<ownership::keeper::elsewhere>& sent_to) {
    const s::session_id& sid = req.to.sid;
    if (sent_to && sent_to->owner == other.owner && sent_to->epoch == other.epoch) {
        co_return answer::forwarded();  // it has the request (it renewed its lease): it answers
    }
    const auto subject = subjects_.forward(other.owner, sid, req.to.what);
    if (!subject) {
        // The lease store names an owner that is no subject token: never put in a subject (it
        // could name another one, or add a command to the protocol).
        co_return answer::error("internal", "the session's owner id is invalid");
    }
    ++forwarded_;
    // The caller's reply subject in a header: nats-server refuses a publish carrying the reply
    // subject of a request that came through an account import (`_R_.…`), and the owner
    // answers the caller directly. Any other reply subject is also the message's own, for an
    // owner of an earlier release (a rolling upgrade).
    nats::header_list headers;
    if (!m.reply.empty()) {
        headers.emplace_back(reply_header, m.reply);
    }
    const bool imported = m.reply.starts_with("_R_.");
    // The owner acknowledges the forward as it takes it. Without an acknowledgement in time,
    // the owner may have died or be frozen with its lease not yet expired: its lease is
    // watched, and the request routed again once that lease expired or changed hands (served
    // here, or by the new owner; the old owner, fenced, can no longer change anything). A lost
    // request then costs its caller the lease's expiry, not the caller's own timeout.
    std::shared_ptr<forward_wait> wait;
    std::uint64_t n = 0;
    if (!stopping_) {
        std::lock_guard lock(acks_mu_);
        if (acks_.size() < max_held_forwards) {
            wait = std::make_shared<forward_wait>(ex_, other.owner);
            n = next_forward_++;
            headers.emplace_back(ack_header, subjects_.forward_ack(worker_id(), n));
            acks_.emplace(n, wait);
        }
    }
    const bool sent = nats_.publish_request(*subject, imported ? "" : m.reply, headers, m.data);
    if (!sent) {
        count_failure("forwarded request", sid.str(), m.data.size());
    }
    if (!wait) {
        co_return answer::forwarded();
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
        auto watching = unacknowledged(wait, sid, other);
        again = co_await std::move(watching);
    }
    if (!again || wait->acked) {
        co_return answer::forwarded();
    }
    ++rerouted_;
    sent_to = other;
    co_return std::nullopt;
}

asio::awaitable<std::optional<answer>> server::serve_here(worker::session_registry& registry,
                                                          const protocol::request& req,
                                                          s::lease_epoch epoch) {
    const s::session_id& sid = req.to.sid;
    const verb what = req.to.what;
    const auto mode =
        protocol::creates_session(what) ? storage::open_mode::create : storage::open_mode::existing;
    // The store refused this worker's epoch (a newer owner, or a deletion at that epoch or
    // later): nothing changed; forget that lease (if still this one) and route again. A loop
    // this worker closed itself (`closed`: deleted, unloaded, replaced) needs only the routing:
    // the lease is already as it should be.
    auto route_again = [&](const boost::system::error_code& ec) {
        if (ec == storage::errc::lease_lost) {
            if (options_.on_fenced) {
                options_.on_fenced();
            }
            leases_.lost(sid, epoch);  // if still the lease at that epoch
            registry.unload(sid, epoch);
        }
        return ec == storage::errc::lease_lost || ec == storage::errc::closed;
    };
    // Settings are checked by the owner, against its own tools and endpoints: during a rollout
    // the same configure is not accepted or refused by whichever worker took it.
    if (auto refused = refused_settings(sid, req.body)) {
        if (!registry.contains(sid)) {
            leases_.release(sid, epoch);  // taken for a session that is not made
        }
        co_return std::move(*refused);
    }
    if (what == verb::remove) {
        auto removing = registry.remove(sid, epoch);
        auto r = co_await std::move(removing);
        if (!r) {
            if (route_again(r.error())) {
                co_return std::nullopt;
            }
            co_return answer::error(r.error());
        }
        // Its data is gone for good: its watchers learn it (before the reply, as a command's
        // patch goes out before its reply).
        publish(subjects_.deleted(sid),
                boost::json::serialize(protocol::session_deleted(epoch.value)), "deletion event",
                sid.str());
        auto forgetting = leases_.remove(sid, epoch);
        auto l = co_await std::move(forgetting);
        co_return l ? answer::ok(protocol::ok_reply(what, {})) : answer::error(l.error());
    }
    if (mode == storage::open_mode::create && !registry.contains(sid)) {
        auto admitting = admit_creation(registry, sid);
        if (auto refused = co_await std::move(admitting)) {
            if (!registry.contains(sid)) {
                leases_.release(sid, epoch);  // taken for a session that is not made
            }
            co_return std::move(*refused);
        }
    }
    auto getting = registry.get(sid, epoch, mode);
    auto loop = co_await std::move(getting);
    if (!loop) {
        if (loop.error() == storage::errc::not_found) {
            // A read of a session that is gone (deleted since it was looked up): the lease it
            // took for it is given back, and nothing is created.
            if (!registry.contains(sid)) {
                leases_.release(sid, epoch);  // if still the lease at that epoch
            }
            co_return absent_session(req, options_.max_reply_bytes);
        }
        if (route_again(loop.error())) {
            co_return std::nullopt;
        }
        co_return answer::error(loop.error());
    }
    if (const auto* sub = std::get_if<protocol::subscribe_request>(&req.body)) {
        auto serializing = serialize(subscribe(**loop, *sub));
        auto served = co_await std::move(serializing);
        co_return served;
    }
    auto sent = (*loop)->send(command_for(req.body));  // made afresh: it may be routed again
    auto r = co_await std::move(sent);
    if (!r) {
        if (route_again(r.error())) {
            co_return std::nullopt;
        }
        // A refusal of a bound carries its retry hint.
        const auto& ec = r.error();
        if (ec.category() == s::session_category() &&
            s::is_refusal(static_cast<s::errc>(ec.value()))) {
            co_return refusal(static_cast<s::errc>(ec.value()), options_.retry_after);
        }
        co_return answer::error(ec);
    }
    co_return answer::ok(protocol::ok_reply(what, result_of(*r)));
}

asio::awaitable<void> server::forward_wait::sleep(std::chrono::milliseconds d) {
    wake.expires_after(d);
    boost::system::error_code ec;  // operation_aborted: woken early
    co_await wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

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

}  // namespace wuhu::broker
