#include "client/client.hpp"

#include "protocol/events.hpp"
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

std::string field(const json::object& o, const char* key) {
    const auto* x = o.if_contains(key);
    return x != nullptr && x->is_string() ? std::string(x->as_string()) : std::string();
}

using protocol::read_count;

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

namespace {
failure invalid_id(std::string_view sid) {
    return failure{"invalid_session_id", "session id must be 1-64 characters of [A-Za-z0-9_-]: \"" +
                                             std::string(sid) + "\""};
}
}  // namespace

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
    // those with an id, cancel (by an item's id) and subscribe (a read). Configure, pause,
    // resume and delete are not: a late copy could undo another client's later command.
    const bool resend = *v == verb::enqueue || *v == verb::system || *v == verb::abort ||
                        *v == verb::cancel || *v == verb::subscribe;
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

// ---- watch_cursor

namespace {

bool covered(const json::value& to, const json::value& version) {
    if (!to.is_object() || !version.is_object()) {
        return false;
    }
    for (const char* k : {"transcript", "system", "steer", "followUp"}) {
        if (read_count(to.as_object(), k) > read_count(version.as_object(), k)) {
            return false;
        }
    }
    return true;
}

// Whether the patch commits an interruption (what was streaming is not coming back).
bool interrupts(const json::object& patch) {
    if (const auto* t = patch.if_contains("transcript"); t != nullptr && t->is_array()) {
        for (const auto& e : t->as_array()) {
            if (e.is_object() && field(e.as_object(), "type") == "interruption") {
                return true;
            }
        }
    }
    return false;
}

std::uint64_t assistant_entries(const json::object& patch) {
    std::uint64_t n = 0;
    if (const auto* t = patch.if_contains("transcript"); t != nullptr && t->is_array()) {
        for (const auto& e : t->as_array()) {
            n += e.is_object() && field(e.as_object(), "type") == "assistant_message";
        }
    }
    return n;
}

// The backfill patch of a subscribe reply, with the reply's registers.
json::object backfill_patch(const json::object& reply) {
    json::object p = reply.at("patch").as_object();
    for (const char* k : {"status", "settings"}) {
        if (const auto* v = reply.if_contains(k); v != nullptr && !p.contains(k)) {
            p[k] = *v;
        }
    }
    return p;
}

// The (epoch, seq) that orders a status (session::status), if it has one.
std::optional<std::pair<std::uint64_t, std::uint64_t>> status_rev(const json::object& holder) {
    const auto* st = holder.if_contains("status");
    if (st == nullptr || !st->is_object() || !st->as_object().contains("seq")) {
        return std::nullopt;
    }
    return std::pair{read_count(st->as_object(), "epoch"), read_count(st->as_object(), "seq")};
}

}  // namespace

void watch_cursor::note_status(const json::object& holder) {
    if (auto rev = status_rev(holder); rev && *rev > status_rev_) {
        status_rev_ = *rev;
    }
}

void watch_cursor::take_patch(const json::object& p, delivery& out) {
    version_ = p.at("to");
    next_step_ += assistant_entries(p);
    if (streaming_ && step_ < next_step_) {
        streaming_ = false;  // its assistant entry is committed: the patch is its message.end
    } else if (streaming_ && interrupts(p)) {
        // The owner stopped (or the turn was aborted) while it streamed: that message is not
        // coming back. Its discard follows the patch.
        out.deltas.push_back(protocol::message_discard(step_, epoch_));
        streaming_ = false;
    }
    out.patches.push_back(p);
}

void watch_cursor::begin(std::uint64_t step, std::uint64_t epoch, delivery& out) {
    if (streaming_) {  // the message it replaces is dropped first
        out.deltas.push_back(protocol::message_discard(step_, epoch_));
    }
    streaming_ = true;
    step_ = step;
    epoch_ = epoch;
    seq_ = 0;
    text_delivered_ = 0;
    calls_delivered_ = 0;
    out.deltas.push_back(protocol::message_start(step, epoch));
}

void watch_cursor::take_inflight(const json::object& reply, delivery& out) {
    const auto* in = reply.if_contains("inflight");
    if (in == nullptr || !in->is_object()) {
        if (streaming_) {  // neither committed (the patch would have said) nor streaming
            out.deltas.push_back(protocol::message_discard(step_, epoch_));
            streaming_ = false;
        }
        return;
    }
    const auto& i = in->as_object();
    const auto step = read_count(i, "step");
    const auto epoch = read_count(i, "epoch");
    const std::string text = field(i, "text");
    if (!streaming_ || step != step_ || epoch != epoch_) {
        begin(step, epoch, out);
    }
    seq_ = read_count(i, "seq");
    if (text.size() > text_delivered_) {
        out.deltas.push_back(protocol::text_delta(
            step, epoch, seq_, std::string_view(text).substr(text_delivered_)));
        text_delivered_ = text.size();
    }
    if (const auto* calls = i.if_contains("tool_calls"); calls != nullptr && calls->is_array()) {
        const auto& list = calls->as_array();
        for (; calls_delivered_ < list.size(); ++calls_delivered_) {
            const auto& c = list[calls_delivered_];
            if (!c.is_object()) {
                continue;  // not a delta of the contract
            }
            const auto& o = c.as_object();
            out.deltas.push_back(protocol::tool_call_delta(step, epoch, seq_, field(o, "id"),
                                                           field(o, "name"),
                                                           field(o, "arguments")));
        }
    }
}

watch_cursor::delivery watch_cursor::start(const json::object& reply) {
    delivery out;
    note_status(reply);
    out.patches.push_back(backfill_patch(reply));
    version_ = reply.at("patch").at("to");
    next_step_ = read_count(reply, "step");
    take_inflight(reply, out);
    return out;
}

watch_cursor::delivery watch_cursor::resync(const json::object& reply) {
    delivery out;
    note_status(reply);
    auto p = backfill_patch(reply);
    if (p.at("from") == version_) {
        take_patch(p, out);
    } else {
        out.patches.push_back(p);  // an older since than asked: take it whole
        version_ = p.at("to");
    }
    next_step_ = read_count(reply, "step");
    take_inflight(reply, out);
    return out;
}

watch_cursor::delivery watch_cursor::patch(const json::object& p) {
    delivery out;
    const auto* from = p.if_contains("from");
    const auto* to = p.if_contains("to");
    const auto* transcript = p.if_contains("transcript");
    if (from == nullptr || to == nullptr || transcript == nullptr || !from->is_object() ||
        !to->is_object() || !transcript->is_array()) {
        return out;  // not a patch of the contract (anyone may publish on the subject)
    }
    if (*from == version_) {
        // A status older than the one delivered (published before the backfill was read, and
        // received after it) is dropped; so is a patch that carried nothing else.
        if (auto rev = status_rev(p); rev && *rev <= status_rev_) {
            if (*from == *to) {
                return out;
            }
            json::object rest = p;
            rest.erase("status");
            take_patch(rest, out);
            return out;
        }
        note_status(p);
        take_patch(p, out);
    } else if (!covered(*to, version_)) {
        out.gap = true;  // a patch is missing between version_ and this one
    }
    return out;
}

watch_cursor::delivery watch_cursor::delta(const json::object& d) {
    delivery out;
    const std::string type = field(d, "type");
    const auto step = read_count(d, "step");
    const auto epoch = read_count(d, "epoch");
    if (step < next_step_) {
        return out;  // the message is already committed in what was delivered
    }
    // An event of an owner older than the one streaming this step (its last events, arriving
    // after the new owner's first ones) is stale.
    const bool this_message = streaming_ && step == step_;
    if (this_message && epoch < epoch_) {
        return out;
    }
    if (type == "message.start") {
        if (!(this_message && epoch == epoch_)) {  // else a repeat of the one delivered
            begin(step, epoch, out);  // a new message, or this one restarted by a new owner
        }
        return out;
    }
    if (type == "message.discard") {
        if (this_message && epoch == epoch_) {
            streaming_ = false;
            out.deltas.push_back(d);
        }
        return out;
    }
    if (!this_message || epoch != epoch_) {
        out.gap = true;  // a delta of a message whose start was missed
        return out;
    }
    const auto seq = read_count(d, "seq");
    if (seq <= seq_) {
        return out;  // already delivered (the backfill's inflight text held it)
    }
    if (seq != seq_ + 1) {
        out.gap = true;
        return out;
    }
    seq_ = seq;
    if (type == "text.delta") {
        text_delivered_ += field(d, "text").size();
    } else if (type == "tool_call.delta") {
        ++calls_delivered_;
    }
    out.deltas.push_back(d);
    return out;
}

// ---- watch

watch::watch(client& c, std::string sid)
    : client_(c), sid_(std::move(sid)), inbox_(std::make_shared<inbox>()) {}

watch::~watch() {
    client_.nats().unsubscribe(token_);
}

outcome<std::unique_ptr<watch>> watch::open(client& c, const std::string& sid,
                                            const std::optional<json::value>& since) {
    auto id = session::session_id::parse(sid);
    if (!id) {
        return invalid_id(sid);
    }
    std::unique_ptr<watch> w(new watch(c, sid));
    // Events first, then the backfill: nothing falls between the two.
    w->token_ = c.nats().subscribe(c.subjects().events(*id),
                                   [box = w->inbox_](nats::message m) {
                                       std::lock_guard lock(box->mu);
                                       box->queue.push_back(std::move(m));
                                       box->cv.notify_one();
                                   });
    c.nats().flush();
    auto reply = c.subscribe(sid, since);
    if (!reply) {
        return reply.error();
    }
    w->backfill_ = w->cursor_.start(*reply);
    return w;
}

outcome<bool> watch::deliver(watch_cursor::delivery d, const handlers& h) {
    bool any = false;
    for (;;) {
        for (const auto& p : d.patches) {
            if (h.on_patch) {
                h.on_patch(p);
            }
            any = true;
        }
        for (const auto& x : d.deltas) {
            if (h.on_delta) {
                h.on_delta(x);
            }
            any = true;
        }
        if (!d.gap) {
            return any;
        }
        ++resyncs_;
        auto reply = client_.subscribe(sid_, cursor_.version());
        if (!reply) {
            return reply.error();
        }
        d = cursor_.resync(*reply);
    }
}

outcome<bool> watch::next(std::chrono::steady_clock::time_point deadline, const handlers& h) {
    if (deleted_) {
        return false;
    }
    if (backfill_) {
        auto d = std::move(*backfill_);
        backfill_.reset();
        return deliver(std::move(d), h);
    }
    for (;;) {
        std::unique_lock lock(inbox_->mu);
        if (!inbox_->cv.wait_until(lock, deadline, [&] { return !inbox_->queue.empty(); })) {
            return false;
        }
        nats::message m = std::move(inbox_->queue.front());
        inbox_->queue.pop_front();
        lock.unlock();
        boost::system::error_code ec;
        auto v = json::parse(m.data, ec);
        if (ec || !v.is_object()) {
            continue;  // not ours to judge: skip what does not parse
        }
        if (m.subject.ends_with(".deleted")) {
            if (field(v.as_object(), "type") != "session.deleted") {
                continue;  // not an event of the contract
            }
            deleted_ = true;
            if (h.on_deleted) {
                h.on_deleted(v.as_object());
            }
            return true;
        }
        auto d = m.subject.ends_with(".patch") ? cursor_.patch(v.as_object())
                                               : cursor_.delta(v.as_object());
        auto r = deliver(std::move(d), h);
        if (!r || *r) {
            return r;
        }
    }
}

}  // namespace wuhu::client
