#include "broker/server.hpp"

#include "protocol/events.hpp"
#include "session/overloaded.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <stdexcept>

namespace wuhu::broker {

namespace s = wuhu::session;

namespace {

using protocol::verb;

// The verb of a request's subject, from the bounded set (a metric label).
std::string_view verb_of(std::string_view subject) {
    const auto v = protocol::verb_named(subject.substr(subject.rfind('.') + 1));
    return v ? protocol::verb_name(*v) : std::string_view("invalid");
}

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
    answer a;
    try {
        auto handled = srv->handle(*reg, std::move(m));
        a = co_await std::move(handled);
    } catch (const std::exception& e) {
        // A bug, not bad input (that has its codes): the caller still gets an answer.
        a = answer::error("internal", e.what());
    }
    if (!reply_to.empty()) {
        srv->flush_patches();  // a command's patch goes out before its reply, as it happened
        for (const auto& r : a.replies) {
            srv->publish(reply_to, r, "reply", subject);
        }
    }
    if (!a.replies.empty()) {  // none: forwarded to the owner, which answers (and counts) it
        srv->answered(verb_of(subject), a.outcome, std::chrono::steady_clock::now() - began);
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
                    publish(to, refusal(s::errc::overloaded, options_.retry_after).replies.front(),
                            "reply",
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
            publish(m.reply, refusal(s::errc::overloaded, options_.retry_after).replies.front(),
                    "fleet view reply",
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

}  // namespace wuhu::broker
