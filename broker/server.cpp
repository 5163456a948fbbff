#include "broker/server.hpp"

#include "broker/admin.hpp"
#include "storage/errc.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <set>

namespace wuhu::broker {

namespace s = wuhu::session;

namespace {

struct remove_work {};
// A request decoded and validated, ready to run on the session's owner.
using work = std::variant<remove_work, s::subscribe_request, worker::command>;

}  // namespace

server::server(asio::any_io_executor ex, nats_client& nats, ownership::keeper& keeper,
               server_options options)
    : ex_(std::move(ex)),
      nats_(nats),
      keeper_(keeper),
      options_(std::move(options)),
      forward_prefix_(options_.prefix + ".worker." + keeper_.worker_id()) {
    auto max = nats_.max_payload();
    if (max > 0) {
        options_.limits.max_request_bytes = static_cast<std::size_t>(max);
        if (options_.max_reply_bytes == 0) {
            options_.max_reply_bytes = static_cast<std::size_t>(max);
        }
    }
}

worker::session_registry::event_forwarder server::publisher() {
    return [this](const s::session_id& sid, const worker::loop_event& e) {
        if (const auto* c = std::get_if<worker::committed_event>(&e)) {
            nats_.publish(patch_subject(options_.prefix, sid), patch_event(c->patch));
        } else if (auto d = delta_event(e)) {
            nats_.publish(delta_subject(options_.prefix, sid), *d);
        }
    };
}

worker::session_registry::epoch_source server::epochs() {
    return [this](const s::session_id& sid) { return keeper_.epoch_of(sid); };
}

namespace {

// One request, answered on the executor (a named coroutine taking its arguments by value).
asio::awaitable<void> serve(server* srv, worker::session_registry* reg, nats_client* nats,
                            nats_message m) {
    std::string reply_to = m.reply;
    std::vector<std::string> replies;
    try {
        auto handled = srv->handle(*reg, std::move(m));
        replies = co_await std::move(handled);
    } catch (const std::exception& e) {
        // A bug, not bad input (that has its codes): the caller still gets an answer.
        replies = {error_reply("internal", e.what())};
    }
    if (!reply_to.empty()) {
        for (const auto& r : replies) {
            nats->publish(reply_to, r);
        }
    }
}

}  // namespace

void server::start(worker::session_registry& registry) {
    store_ = &registry.store();
    // Counted from the libnats callback to the reply, so that a stopping worker can wait for
    // every request it has taken.
    auto on_request = [this, &registry](nats_message m) {
        ++in_flight_;
        asio::co_spawn(ex_, serve(this, &registry, &nats_, std::move(m)),
                       [this](const std::exception_ptr&) { --in_flight_; });
    };
    subscriptions_.push_back(
        nats_.queue_subscribe(options_.prefix + ".session.>", options_.queue_group, on_request));
    subscriptions_.push_back(nats_.subscribe(forward_prefix_ + ".session.>", on_request));
    // The fleet view: any one worker answers, asking each owner for its loaded sessions.
    subscriptions_.push_back(nats_.queue_subscribe(
        options_.prefix + ".admin.sessions", options_.queue_group, [this](nats_message m) {
            if (m.reply.empty()) {
                return;  // nobody to answer
            }
            asio::post(admin_,
                       [this, m = std::move(m)] { nats_.publish(m.reply, list_sessions(m)); });
        }));
    subscriptions_.push_back(
        nats_.subscribe(forward_prefix_ + ".admin.local", [this, &registry](nats_message m) {
            asio::post(ex_, [this, &registry, m = std::move(m)] {
                boost::json::array local;
                registry.each([&](const worker::agent_loop& loop) {
                    local.push_back(session_summary(loop));
                });
                nats_.publish(m.reply, boost::json::serialize(
                                           boost::json::object{{"ok", true}, {"sessions", local}}));
            });
        }));
    nats_.flush();
}

void server::stop() {
    stopping_ = true;
    for (auto token : subscriptions_) {
        nats_.unsubscribe(token);
    }
    subscriptions_.clear();
    nats_.flush();
}

std::string server::list_sessions(const nats_message& m) {
    auto body = s::parse_body(m.data, options_.limits);
    if (!body) {
        return error_reply(body.error());
    }
    auto q = s::decode_sessions_query(*body);
    if (!q) {
        return error_reply(q.error());
    }
    // The store and the lease store are thread-safe; the registry is only read by its owner's
    // executor (through admin.local, also for this worker).
    auto catalog = store_->sessions(false);
    if (!catalog) {
        return error_reply(catalog.error());
    }
    auto leases = keeper_.store().live();
    if (!leases) {
        return error_reply(leases.error());
    }
    std::set<std::string> owners;
    for (const auto& l : *leases) {
        owners.insert(l.owner);
    }
    std::map<std::string, boost::json::object> summaries;
    for (const auto& owner : owners) {
        auto r = nats_.request(options_.prefix + ".worker." + owner + ".admin.local", "{}",
                               std::chrono::seconds(2));
        if (!r) {
            continue;  // a worker that does not answer: its rows show the lease only
        }
        boost::system::error_code ec;
        auto v = boost::json::parse(*r, ec);
        const auto* rows = !ec && v.is_object() ? v.as_object().if_contains("sessions") : nullptr;
        if (rows == nullptr || !rows->is_array()) {
            continue;
        }
        for (const auto& row : rows->as_array()) {
            const auto* id = row.is_object() ? row.as_object().if_contains("id") : nullptr;
            const auto* state = row.is_object() ? row.as_object().if_contains("state") : nullptr;
            if (id != nullptr && id->is_string() && state != nullptr && state->is_string()) {
                summaries[std::string(id->as_string())] = row.as_object();
            }
        }
    }
    return sessions_page(*q, *catalog, *leases, summaries);
}

s::queue_item_id server::new_item_id() {
    std::array<std::uint8_t, 10> random{};
    for (auto& b : random) {
        b = static_cast<std::uint8_t>(rng_());
    }
    return s::make_uuid_v7(clock_.now(), random);
}

asio::awaitable<std::vector<std::string>> server::handle(worker::session_registry& registry,
                                                         nats_message m) {
    using replies = std::vector<std::string>;
    const bool forwarded = m.subject.starts_with(forward_prefix_ + ".");
    auto route = parse_subject(m.subject, forwarded ? forward_prefix_ : options_.prefix);
    if (!route) {
        co_return replies{error_reply(route.error())};
    }
    // Bad input is answered by whichever worker received it, before any routing.
    auto body = s::parse_body(m.data, options_.limits);
    if (!body) {
        co_return replies{error_reply(body.error())};
    }
    work w;
    if (route->what == verb::remove) {
        if (auto d = s::decode_empty(*body); !d) {
            co_return replies{error_reply(d.error())};
        }
        w = remove_work{};
    } else if (route->what == verb::subscribe) {
        auto req = s::decode_subscribe(*body);
        if (!req) {
            co_return replies{error_reply(req.error())};
        }
        w = std::move(*req);
    } else {
        auto cmd = decode_command(route->what, *body, options_.limits, new_item_id());
        if (!cmd) {
            co_return replies{error_reply(cmd.error())};
        }
        w = std::move(*cmd);
    }

    const s::session_id sid = route->sid;
    if (stopping_ && !registry.contains(sid)) {
        co_return replies{error_reply(ownership::errc::worker_stopping)};
    }
    auto where = keeper_.place(sid);
    if (!where) {
        co_return replies{error_reply(where.error())};
    }
    if (const auto* other = std::get_if<ownership::keeper::elsewhere>(&*where)) {
        if (forwarded) {  // never forwarded twice: the client retries and is routed afresh
            co_return replies{error_reply(ownership::errc::owner_changed)};
        }
        ++forwarded_;
        nats_.publish_request(
            request_subject(options_.prefix + ".worker." + other->owner, sid, route->what), m.reply,
            m.data);
        co_return replies{};
    }

    if (std::holds_alternative<remove_work>(w)) {
        auto r = registry.remove(sid);
        if (!r) {
            co_return replies{error_reply(r.error())};
        }
        auto l = keeper_.remove(sid);
        co_return replies{l ? ok_reply(verb::remove, {}) : error_reply(l.error())};
    }
    auto loop = registry.get(sid);
    if (!loop) {
        if (loop.error() == storage::errc::lease_lost) {
            keeper_.release(sid);  // a newer owner fenced this one out: route afresh next time
        }
        co_return replies{error_reply(loop.error())};
    }
    if (const auto* req = std::get_if<s::subscribe_request>(&w)) {
        const auto& st = (*loop)->state();
        auto p = s::since(st, req->since, (*loop)->current());
        if (!p) {
            co_return replies{error_reply(p.error())};
        }
        co_return chunked(
            subscribe_reply(*p, *p->state, s::assistant_count(st), (*loop)->inflight()),
            options_.max_reply_bytes);
    }
    auto cmd = std::get<worker::command>(std::move(w));
    auto sent = (*loop)->send(std::move(cmd));
    auto r = co_await std::move(sent);
    if (!r) {
        co_return replies{error_reply(r.error())};
    }
    co_return replies{ok_reply(route->what, *r)};
}

}  // namespace wuhu::broker
