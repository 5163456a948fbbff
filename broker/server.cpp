#include "broker/server.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

namespace wuhu::broker {

namespace s = wuhu::session;

server::server(asio::any_io_executor ex, nats_client& nats, server_options options)
    : ex_(std::move(ex)), nats_(nats), options_(std::move(options)) {
    auto max = nats_.max_payload();
    if (max > 0) {
        options_.limits.max_request_bytes = static_cast<std::size_t>(max);
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

namespace {

// One request, answered on the executor (a named coroutine taking its arguments by value).
asio::awaitable<void> serve(server* srv, worker::session_registry* reg, nats_client* nats,
                            nats_message m) {
    std::string reply_to = m.reply;
    std::string reply = co_await srv->handle(*reg, std::move(m));
    if (!reply_to.empty()) {
        nats->publish(reply_to, reply);
    }
}

}  // namespace

void server::start(worker::session_registry& registry) {
    nats_.queue_subscribe(
        options_.prefix + ".session.>", options_.queue_group, [this, &registry](nats_message m) {
            asio::co_spawn(ex_, serve(this, &registry, &nats_, std::move(m)), asio::detached);
        });
    nats_.flush();
}

s::queue_item_id server::new_item_id() {
    std::array<std::uint8_t, 10> random{};
    for (auto& b : random) {
        b = static_cast<std::uint8_t>(rng_());
    }
    return s::make_uuid_v7(clock_.now(), random);
}

asio::awaitable<std::string> server::handle(worker::session_registry& registry, nats_message m) {
    auto route = parse_subject(m.subject, options_.prefix);
    if (!route) {
        co_return error_reply(route.error());
    }
    auto body = s::parse_body(m.data, options_.limits);
    if (!body) {
        co_return error_reply(body.error());
    }
    if (route->what == verb::remove) {
        if (auto d = s::decode_empty(*body); !d) {
            co_return error_reply(d.error());
        }
        auto r = registry.remove(route->sid);
        co_return r ? ok_reply(verb::remove, {}) : error_reply(r.error());
    }
    if (route->what == verb::subscribe) {
        auto req = s::decode_subscribe(*body);
        if (!req) {
            co_return error_reply(req.error());
        }
        auto loop = registry.get(route->sid);
        if (!loop) {
            co_return error_reply(loop.error());
        }
        const auto& st = (*loop)->state();
        auto p = s::since(st, req->since, (*loop)->current());
        if (!p) {
            co_return error_reply(p.error());
        }
        co_return subscribe_reply(*p, *p->state, (*loop)->inflight());
    }
    auto cmd = decode_command(route->what, *body, options_.limits, new_item_id());
    if (!cmd) {
        co_return error_reply(cmd.error());
    }
    auto loop = registry.get(route->sid);
    if (!loop) {
        co_return error_reply(loop.error());
    }
    auto r = co_await (*loop)->send(std::move(*cmd));
    if (!r) {
        co_return error_reply(r.error());
    }
    co_return ok_reply(route->what, *r);
}

}  // namespace wuhu::broker
