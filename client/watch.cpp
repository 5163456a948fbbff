// The gap-free watch (client.hpp): watch_cursor, its decisions without NATS (duplicates
// dropped, patch and sequence gaps found, a resync delivering only what was missed), and watch,
// which drives it over a subscription.
#include "client/client.hpp"
#include "client/replies.hpp"

#include "protocol/events.hpp"
#include "protocol/replies.hpp"

#include <memory>
#include <mutex>

namespace wuhu::client {

using detail::field;
using detail::invalid_id;
using protocol::read_count;

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
