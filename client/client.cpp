#include "client/client.hpp"
#include "client/replies.hpp"

#include "protocol/replies.hpp"
#include "session/errc.hpp"
#include "session/ids.hpp"

#include <boost/throw_exception.hpp>

#include <algorithm>
#include <array>
#include <random>
#include <stdexcept>
#include <thread>

namespace wuhu::client {

using detail::field;
using detail::invalid_id;

namespace {

// The reply object when it is {"ok":true,...}; its error otherwise.
outcome<json::object> decode_reply(std::string_view text) {
    return protocol::read_reply(text);
}

// Refusals that change nothing and that another try gets past: the session changed owner
// while the request was forwarded, the worker that took it is stopping, or a bound of the
// fleet's was reached for now (overloaded, rate_limited: after the wait the reply suggests).
// lane_full and quota_exceeded are the caller's to act on (the session has to take its input,
// or sessions have to go): not retried.
bool retryable(const failure& f) {
    return f.code == "owner_changed" || f.code == "worker_stopping" || f.code == "overloaded" ||
           f.code == "rate_limited";
}

// An id of the client's own for an enqueue, a system message or an abort sent without one (a
// UUIDv7, as the service makes them): the request is sent again on a retryable refusal, and
// each copy must be the same request. A worker that woke up from a freeze as its lease ran
// out may refuse (owner_changed) a request another worker served meanwhile
// (docs/protocol.md, Routing): with the id, sending it again gets that answer, not a second
// item.
std::string own_id() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::array<std::uint8_t, 10> random{};
    for (auto& b : random) {
        b = static_cast<std::uint8_t>(rng());
    }
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    return session::make_uuid_v7(session::unix_ms{now.count()}, random).str();
}

// The shortest wait of one copy of a request (options::attempt_timeout).
constexpr std::chrono::milliseconds min_attempt{100};

// Runs `attempt` until it succeeds, fails otherwise, or the timeout would pass.
template <class F>
auto with_retries(const options& o, F attempt) -> decltype(attempt()) {
    const auto deadline = std::chrono::steady_clock::now() + o.timeout;
    for (int tries = 1;; ++tries) {
        auto r = attempt();
        auto pause = std::chrono::milliseconds(std::min(20 * tries, 200));
        if (!r && r.error().retry_after) {
            pause = std::max(pause, *r.error().retry_after);
        }
        if (r || !retryable(r.error()) || std::chrono::steady_clock::now() + pause >= deadline) {
            return r;
        }
        std::this_thread::sleep_for(pause);
    }
}

failure no_reply(const std::string& subject) {
    return failure{"no_reply", "no reply on " + subject + " (is a worker running?)"};
}

}  // namespace

namespace {
protocol::subject_layout layout_of(const options& o) {
    if (!o.tenant.empty() && !protocol::valid_tenant(o.tenant)) {
        throw std::invalid_argument(
            "the tenant must be 1-64 characters of [A-Za-z0-9_-], and not session, admin, "
            "events, tools or worker: " + o.tenant);
    }
    return protocol::subject_layout(o.tenant.empty() ? o.prefix : o.prefix + "." + o.tenant);
}
}  // namespace

client::client(nats::connection& nats, options o)
    : nats_(nats), options_(std::move(o)), layout_(layout_of(options_)) {}

bool valid_session_id(std::string_view sid) {
    return session::is_id_token(sid);
}

outcome<json::object> client::call(const std::string& sid, std::string_view verb,
                                   const json::object& body) {
    auto id = session::session_id::parse(sid);
    if (!id) {
        return invalid_id(sid);
    }
    auto v = protocol::verb_named(verb);
    if (!v) {
        return failure{"unknown_command",
                       make_error_code(session::errc::unknown_command).message() + ": \"" +
                           std::string(verb) + "\""};
    }
    using protocol::verb;
    const auto subject = layout_.request(*id, *v);
    // Every copy of a request the client sends again is the same request: an enqueue, a
    // system message or an abort carries an id (the caller's, or one made here).
    json::object sent_body = body;
    if ((*v == verb::enqueue || *v == verb::system || *v == verb::abort) &&
        !sent_body.contains("id")) {
        sent_body["id"] = own_id();
    }
    const auto text = json::serialize(sent_body);
    // Sent again when unanswered within attempt_timeout (a worker took it and died or froze):
    // those with an id, cancel (by an item's id), subscribe (a read) and the decisions (by a
    // call's id: the same decision again is a duplicate). Configure, pause,
    // resume and delete are not: a late copy could undo another client's later command.
    const bool resend = *v == verb::enqueue || *v == verb::system || *v == verb::abort ||
                        *v == verb::cancel || *v == verb::subscribe || *v == verb::approve ||
                        *v == verb::reject || *v == verb::respond;
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    return with_retries(options_, [&]() -> outcome<json::object> {
        for (;;) {
            const auto now = std::chrono::steady_clock::now();
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
            if (left.count() <= 0) {
                return no_reply(subject);
            }
            const auto attempt = std::max(options_.attempt_timeout, min_attempt);
            const auto wait = resend ? std::min(left, attempt) : left;
            if (auto reply = nats_.request(subject, text, wait)) {
                return decode_reply(*reply);
            }
            // Failed at once (no worker at all, or no connection): answered as before, now.
            if (!resend || std::chrono::steady_clock::now() - now < wait / 2) {
                return no_reply(subject);
            }
        }
    });
}

outcome<json::object> client::sessions(const json::object& query) {
    // A page near the max payload may come in chunks, like a large subscribe reply.
    return chunked_request(layout_.views(), json::serialize(query));
}

outcome<std::string> client::enqueue(const std::string& sid, std::string_view lane,
                                     std::string_view content, const std::optional<author>& from,
                                     std::optional<std::string> id) {
    json::object body{{"lane", lane}, {"content", content}};
    if (from) {
        json::object a{{"id", from->id}, {"name", from->name}, {"kind", from->kind}};
        if (!from->email.empty()) {
            a["email"] = from->email;
        }
        body["author"] = std::move(a);
    }
    if (id) {
        body["id"] = *id;
    }
    auto r = call(sid, "enqueue", body);
    if (!r) {
        return r.error();
    }
    return outcome<std::string>(boost::system::in_place_value, field(*r, "id"));
}

outcome<std::string> client::system(const std::string& sid, std::string_view source,
                                    std::string_view content, std::optional<std::string> id) {
    json::object body{{"source", source}, {"content", content}};
    if (id) {
        body["id"] = *id;
    }
    auto r = call(sid, "system", body);
    if (!r) {
        return r.error();
    }
    return outcome<std::string>(boost::system::in_place_value, field(*r, "id"));
}

outcome<bool> client::cancel(const std::string& sid, std::string_view lane, std::string_view id) {
    auto r = call(sid, "cancel", json::object{{"lane", lane}, {"id", id}});
    if (!r) {
        return r.error();
    }
    const auto* c = r->if_contains("canceled");
    return outcome<bool>(boost::system::in_place_value,
                         c != nullptr && c->is_bool() && c->as_bool());
}

outcome<json::object> client::configure(const std::string& sid, json::object settings) {
    auto r = call(sid, "configure", settings);
    if (!r) {
        return r.error();
    }
    const auto* s = r->if_contains("settings");
    return outcome<json::object>(boost::system::in_place_value,
                                 s != nullptr && s->is_object() ? s->as_object() : json::object{});
}

namespace {
outcome<void> done(const outcome<json::object>& r) {
    if (!r) {
        return r.error();
    }
    return {};
}
}  // namespace

outcome<json::object> client::abort(const std::string& sid, std::optional<std::string> reason,
                                    std::optional<std::string> id) {
    json::object body;
    if (reason) {
        body["reason"] = *reason;
    }
    if (id) {
        body["id"] = *id;
    }
    return call(sid, "abort", body);
}

outcome<void> client::pause(const std::string& sid) {
    return done(call(sid, "pause", {}));
}

outcome<void> client::resume(const std::string& sid) {
    return done(call(sid, "resume", {}));
}

outcome<void> client::remove(const std::string& sid) {
    return done(call(sid, "delete", {}));
}

outcome<json::object> client::subscribe(const std::string& sid,
                                        const std::optional<json::value>& since) {
    auto id = session::session_id::parse(sid);
    if (!id) {
        return invalid_id(sid);
    }
    json::object body;
    if (since) {
        body["since"] = *since;
    }
    const auto subject = layout_.request(*id, protocol::verb::subscribe);
    auto first =
        with_retries(options_, [&] { return chunked_request(subject, json::serialize(body)); });
    // A long backfill comes in pages: each asked for since the last one's end, and appended.
    // Gap-free: a page ends at a version the next starts from; events meanwhile are the
    // watch's, which drops what the pages hold.
    while (first && first->contains("more")) {
        const auto* patch = first->if_contains("patch");
        if (patch == nullptr || !patch->is_object() || !patch->as_object().contains("to")) {
            return failure{"bad_reply", "a page of a subscribe reply without its patch's end"};
        }
        json::object again{{"since", patch->as_object().at("to")}};
        auto next = with_retries(options_, [&] {
            return chunked_request(subject, json::serialize(again));
        });
        if (!next) {
            return next.error();
        }
        if (!next->contains("patch") || !next->at("patch").is_object()) {
            return failure{"bad_reply", "a page of a subscribe reply without its patch"};
        }
        protocol::append_page(*first, std::move(*next));
    }
    return first;
}

outcome<json::object> client::chunked_request(const std::string& subject,
                                              const std::string& request) {
    // A large reply comes in chunks (protocol::chunked), reassembled in order.
    protocol::reply_assembler reply;
    auto progress = protocol::reply_assembler::progress::more;
    const bool answered =
        nats_.request_many(subject, request, options_.timeout, [&](std::string m) {
            progress = reply.take(std::move(m));
            return progress == protocol::reply_assembler::progress::more;
        });
    if (progress == protocol::reply_assembler::progress::bad) {
        return failure{"bad_reply", "reply chunk out of order or malformed"};
    }
    if (!answered || progress != protocol::reply_assembler::progress::done) {
        return no_reply(subject);
    }
    return decode_reply(reply.text());
}

}  // namespace wuhu::client
