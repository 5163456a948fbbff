#include "broker/server.hpp"

#include "broker/admin.hpp"
#include "protocol/events.hpp"
#include "session/overloaded.hpp"
#include "storage/errc.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <set>

namespace wuhu::broker {

namespace s = wuhu::session;

namespace {

using protocol::verb;

// Routing a request more often than this (its session was unloaded, deleted or fenced each
// time it reached it) answers owner_changed: the client retries later. (A request that waited
// behind a delete needs three: closed, then refused at its old epoch, then a new session.)
constexpr int max_routes = 4;

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
        default:  // abort (nothing in flight), delete (idempotent)
            return {protocol::ok_reply(req.to.what, {})};
    }
}

// The loop's command for a request that changes the session (not subscribe or delete).
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
                return worker::abort_command{r.reason};
            },
            [](const protocol::pause_request&) -> worker::command {
                return worker::pause_command{};
            },
            [](const auto&) -> worker::command { return worker::resume_command{}; },
        },
        body);
}

protocol::command_result result_of(const worker::command_reply& r) {
    return protocol::command_result{r.id, r.canceled, r.config};
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

// One request, answered on the executor (a named coroutine taking its arguments by value).
asio::awaitable<void> serve(server* srv, worker::session_registry* reg, nats::message m) {
    const auto began = std::chrono::steady_clock::now();
    if (m.bad_reply) {
        // A reply subject with bytes a C string hides: answering it would reach another inbox.
        srv->count_failure("reply (the reply subject has a NUL byte)", m.subject, 0);
        co_return;
    }
    std::string reply_to = m.reply;
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

server::server(asio::any_io_executor ex, nats::connection& nats, lease_desk& leases,
               const worker::tool_registry& tools, server_options options,
               std::shared_ptr<spdlog::logger> log)
    : ex_(std::move(ex)),
      nats_(nats),
      leases_(leases),
      tools_(tools),
      options_(std::move(options)),
      log_(std::move(log)),
      forward_prefix_(protocol::worker_prefix(options_.prefix, leases_.keeper().worker_id())),
      patches_(std::make_shared<patch_batch>([this](const s::session_id& sid, const s::patch& p) {
          publish(protocol::patch_subject(options_.prefix, sid), protocol::patch_event(p), "patch",
                  sid.str());
      })) {
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
                return protocol::message_start(x.step);
            },
            [](const worker::stream_delta_event& x) -> std::optional<boost::json::object> {
                if (x.tool_call) {
                    return protocol::tool_call_delta(x.step, x.seq, x.tool_call->id,
                                                     x.tool_call->name, x.tool_call->arguments);
                }
                return protocol::text_delta(x.step, x.seq, x.text);
            },
            [](const worker::stream_ended_event& x) -> std::optional<boost::json::object> {
                if (x.committed) {
                    return std::nullopt;  // the patch with the assistant entry is message.end
                }
                return protocol::message_discard(x.step);
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
            publish(protocol::delta_subject(options_.prefix, sid), *d, "stream delta", sid.str());
        }
    };
}

void server::flush_patches() {
    patches_->flush();
}

void server::start(worker::session_registry& registry, worker::work_gate& work) {
    store_ = &registry.store();
    work_ = &work;
    // Counted from the libnats callback to the reply, so that a stopping worker can wait for
    // every request it has taken.
    auto on_request = [this, &registry](nats::message m) {
        ++in_flight_;
        auto pass = std::make_shared<worker::work_gate::pass>(work_->enter());
        asio::co_spawn(ex_, serve(this, &registry, std::move(m)),
                       [this, pass](const std::exception_ptr&) { --in_flight_; });
    };
    taking_.push_back(
        nats_.queue_subscribe(protocol::session_requests_subject(options_.prefix),
                                            options_.queue_group, on_request));
    // The fleet view: any one worker answers, asking each owner for a page of its sessions.
    taking_.push_back(nats_.queue_subscribe(
        protocol::sessions_subject(options_.prefix), options_.queue_group, [this](nats::message m) {
            if (m.reply.empty() || m.bad_reply) {
                return;  // nobody to answer
            }
            asio::post(admin_, [this, m = std::move(m)] {
                for (const auto& part : protocol::chunked(list_sessions(m), options_.max_reply_bytes)) {
                    publish(m.reply, part, "fleet view reply", "admin.sessions");
                }
            });
        }));
    forwarded_to_me_.push_back(nats_.subscribe(protocol::session_requests_subject(forward_prefix_), on_request));
    forwarded_to_me_.push_back(
        nats_.subscribe(protocol::local_sessions_subject(options_.prefix, leases_.keeper().worker_id()),
                        [this, &registry](nats::message m) {
            if (m.reply.empty() || m.bad_reply) {
                return;
            }
            ++in_flight_;
            auto pass = std::make_shared<worker::work_gate::pass>(work_->enter());
            asio::post(ex_, [this, &registry, m = std::move(m), pass] {
                publish(m.reply, local_sessions(registry, m), "fleet view page", "admin.local");
                --in_flight_;
            });
        }));
    nats_.flush();
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
    auto pass = std::make_shared<worker::work_gate::pass>(work_->enter());
    nats_.drain(token, [pass] { auto done = std::move(*pass); });
}

namespace {

// A fleet-view query from a request body, or the error reply that refuses it.
std::variant<protocol::sessions_query, std::string> read_query(
    std::string_view data, const protocol::request_limits& limits) {
    auto body = protocol::parse_body(data, limits);
    if (!body) {
        return protocol::error_reply(body.error());
    }
    auto q = protocol::decode_sessions_query(*body);
    if (!q) {
        return protocol::error_reply(q.error());
    }
    return std::move(*q);
}

}  // namespace

std::string server::local_sessions(worker::session_registry& registry, const nats::message& m) {
    auto read = read_query(m.data, options_.limits);
    if (auto* refused = std::get_if<std::string>(&read)) {
        return std::move(*refused);
    }
    const auto* q = &std::get<protocol::sessions_query>(read);
    const auto& me = leases_.keeper().worker_id();
    std::vector<boost::json::object> loaded;
    if (q->ids) {
        // The rows of these sessions that are loaded here, in id order.
        auto ids = *q->ids;
        std::sort(ids.begin(), ids.end());
        for (const auto& id : ids) {
            if (q->after && id <= *q->after) {
                continue;
            }
            if (const auto* loop = registry.find_running(id); loop != nullptr) {
                loaded.push_back(loaded_row(*loop, me));
            }
        }
        protocol::sessions_query all = *q;
        all.limit = loaded.size();
        return local_page(all, loaded, options_.max_reply_bytes);
    }
    registry.each(
        [&](const worker::agent_loop& loop) {
            auto row = loaded_row(loop, me);
            if (row_matches(*q, row)) {
                loaded.push_back(std::move(row));
            }
            return loaded.size() <= q->limit;  // one more tells the page is cut
        },
        q->after ? q->after->str() : std::string());
    return local_page(*q, loaded, options_.max_reply_bytes);
}

std::map<std::string, std::optional<owner_page>> server::ask_owners(
    const std::vector<std::string>& owners, const std::vector<std::string>& bodies) {
    std::vector<std::string> subjects;
    for (const auto& owner : owners) {
        subjects.push_back(protocol::local_sessions_subject(options_.prefix, owner));
    }
    auto answers = bodies.size() == 1 && owners.size() != 1
                       ? nats_.request_all(subjects, bodies.front(), options_.admin_timeout)
                       : nats_.request_all(subjects, bodies, options_.admin_timeout);
    std::map<std::string, std::optional<owner_page>> pages;
    for (std::size_t i = 0; i < owners.size(); ++i) {
        pages[owners[i]] = answers[i] ? read_owner_page(*answers[i]) : std::nullopt;
    }
    return pages;
}

std::string server::list_sessions(const nats::message& m) {
    auto read = read_query(m.data, options_.limits);
    if (auto* refused = std::get_if<std::string>(&read)) {
        return std::move(*refused);
    }
    const auto& q = std::get<protocol::sessions_query>(read);
    // The store and the lease store are thread-safe; the registry is only read by its owner's
    // executor (through admin.local, also for this worker).
    if (q.state && is_loop_state(*q.state)) {
        // Only owners know: a page of each live owner's loaded sessions in that state.
        std::vector<std::string> owners;
        if (q.owner) {
            owners.push_back(*q.owner);
        } else {
            auto live = leases_.keeper().store().owners();
            if (!live) {
                return protocol::error_reply(live.error());
            }
            owners = std::move(*live);
        }
        return merge_owner_pages(q, ask_owners(owners, {local_query(q)}));
    }
    return indexed_page(q);
}

namespace {

// The session ids of leases or index entries, in their order.
template <class Rows>
std::vector<s::session_id> ids_of(const Rows& rows) {
    std::vector<s::session_id> out;
    for (const auto& r : rows) {
        out.push_back(r.id);
    }
    return out;
}

}  // namespace

std::string server::indexed_page(const protocol::sessions_query& q) {
    using clock = std::chrono::steady_clock;
    auto& leases = leases_.keeper().store();
    // Another chunk is read while the page is short, until this much time has gone (a filter
    // few sessions pass must not keep the caller waiting: `next` tells where to go on).
    const auto give_up = clock::now() + options_.admin_timeout;
    const bool filtered = q.state.has_value() || (q.owner && q.has_work);
    boost::json::array rows;
    std::optional<s::session_id> cursor = q.after;
    bool exhausted = false;
    while (rows.size() < q.limit && !exhausted && clock::now() < give_up) {
        const std::size_t want = q.limit - rows.size();
        const std::size_t chunk = filtered ? std::clamp<std::size_t>(want * 4, 256, 1000) : want;
        std::vector<storage::catalog_entry> entries;
        std::vector<ownership::lease> held;
        if (q.owner && !q.ids) {
            // That owner's leases first (an index serves them), then their index rows.
            ownership::lease_query by_owner;
            by_owner.owner = q.owner;
            by_owner.after = cursor;
            by_owner.limit = chunk;
            auto got = leases.live(by_owner);
            if (!got) {
                return protocol::error_reply(got.error());
            }
            held = std::move(*got);
            exhausted = held.size() < chunk;
            if (held.empty()) {
                break;
            }
            cursor = held.back().id;
            storage::catalog_query of_them;
            of_them.ids = ids_of(held);
            of_them.has_work = q.has_work;
            auto found = store_->sessions(of_them);
            if (!found) {
                return protocol::error_reply(found.error());
            }
            entries = std::move(*found);
        } else {
            storage::catalog_query page;
            page.after = cursor;
            page.limit = q.ids ? std::numeric_limits<std::size_t>::max() : chunk;
            page.has_work = q.has_work;
            page.ids = q.ids;
            auto found = store_->sessions(page);
            if (!found) {
                return protocol::error_reply(found.error());
            }
            entries = std::move(*found);
            exhausted = q.ids.has_value() || entries.size() < chunk;
            if (entries.empty()) {
                break;
            }
            cursor = entries.back().id;
            ownership::lease_query of_them;
            of_them.ids = ids_of(entries);
            auto got = leases.live(of_them);
            if (!got) {
                return protocol::error_reply(got.error());
            }
            held = std::move(*got);
        }
        // Ask each owner about its sessions of this chunk only (unowned ones need no one).
        std::map<std::string, std::vector<s::session_id>> by_owner;
        if (!(q.state && *q.state == "unowned")) {
            for (const auto& l : held) {
                by_owner[l.owner].push_back(l.id);
            }
        }
        std::vector<std::string> owners;
        std::vector<std::string> bodies;
        std::map<std::string, std::string> asked_until;  // owners asked about their first ids
        for (auto& [owner, ids] : by_owner) {
            protocol::sessions_query ask;
            ask.ids = std::move(ids);
            // A request must fit in a message as much as a reply.
            while (ask.ids->size() > 1 && local_query(ask).size() > options_.max_reply_bytes) {
                ask.ids->erase(ask.ids->begin() + static_cast<std::ptrdiff_t>(ask.ids->size() / 2),
                               ask.ids->end());
                asked_until[owner] = ask.ids->back().str();
            }
            owners.push_back(owner);
            bodies.push_back(local_query(ask));
        }
        auto pages = ask_owners(owners, bodies);
        for (const auto& [owner, last] : asked_until) {
            if (auto& p = pages[owner]) {
                p->until = p->until ? std::min(*p->until, last) : last;  // the rest: undecided
            }
        }
        auto joined = join_rows(entries, held, pages);
        if (joined.size() < entries.size()) {
            exhausted = false;  // an owner's answer was cut: go on after the last row
            cursor = entries[joined.size() - 1].id;
        }
        for (auto& row : joined) {
            if (!row_matches(q, row)) {
                continue;
            }
            if (rows.size() == q.limit) {
                exhausted = false;
                break;
            }
            rows.push_back(std::move(row));
        }
    }
    boost::json::object out{{"ok", true}, {"sessions", std::move(rows)}};
    if (!exhausted && cursor) {
        // Where the next page starts: after the last row given, or after the last session
        // looked at when the page ran out of time.
        const auto& given = out.at("sessions").as_array();
        out["next"] = given.size() == q.limit
                          ? boost::json::value_to<std::string>(given.back().at("id"))
                          : cursor->str();
    }
    return boost::json::serialize(out);
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
    const bool forwarded = m.subject.starts_with(forward_prefix_ + ".");
    const auto& prefix = forwarded ? forward_prefix_ : options_.prefix;
    auto decoded = protocol::decode_request(m.subject, prefix, m.data, options_.limits,
                                            [this] { return new_item_id(); });
    if (!decoded) {
        co_return replies{error_reply(decoded.error())};
    }
    const protocol::request req = std::move(*decoded);
    if (auto refused = refused_settings(req.body)) {
        co_return replies{std::move(*refused)};
    }
    const s::session_id& sid = req.to.sid;
    const verb what = req.to.what;
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
            ++forwarded_;
            const auto subject = protocol::request_subject(
                protocol::worker_prefix(options_.prefix, other->owner), sid, what);
            if (!nats_.publish_request(subject, m.reply, m.data)) {
                count_failure("forwarded request", sid.str(), m.data.size());
            }
            co_return replies{};
        }
        const s::lease_epoch epoch = std::get<ownership::keeper::here>(where).epoch;

        if (what == verb::remove) {
            auto removing = registry.remove(sid, epoch);
            auto r = co_await std::move(removing);
            if (!r) {
                if (route_again(r.error(), epoch)) {
                    continue;
                }
                co_return replies{error_reply(r.error())};
            }
            auto forgetting = leases_.remove(sid, epoch);
            auto l = co_await std::move(forgetting);
            co_return replies{l ? protocol::ok_reply(what, {}) : error_reply(l.error())};
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
            co_return subscribe(**loop, *sub);
        }
        auto sent = (*loop)->send(command_for(req.body));  // made afresh: it may be routed again
        auto r = co_await std::move(sent);
        if (!r) {
            if (route_again(r.error(), epoch)) {
                continue;
            }
            co_return replies{error_reply(r.error())};
        }
        co_return replies{protocol::ok_reply(what, result_of(*r))};
    }
    co_return replies{error_reply(ownership::errc::owner_changed)};
}

std::optional<std::string> server::refused_settings(const protocol::request_body& body) const {
    const auto* update = std::get_if<s::settings_update>(&body);
    if (update == nullptr) {
        return std::nullopt;
    }
    const auto& endpoints = options_.model_endpoints;
    if (update->model && !endpoints.empty() && *update->model != "scripted") {
        const std::string endpoint = update->model->substr(0, update->model->find('/'));
        if (std::find(endpoints.begin(), endpoints.end(), endpoint) == endpoints.end()) {
            std::string names;
            for (const auto& n : endpoints) {
                names.append(names.empty() ? "" : ", ").append(n);
            }
            return protocol::error_reply(s::code_name(s::errc::invalid_settings),
                                         "the model " + *update->model +
                                             " names no configured endpoint (" + names +
                                             "; or scripted) (field: model)");
        }
    }
    if (!update->tools) {
        return std::nullopt;
    }
    for (std::size_t i = 0; i < update->tools->size(); ++i) {
        const auto& name = (*update->tools)[i];
        if (tools_.find(name, {}) == nullptr) {
            return protocol::error_reply(
                s::code_name(s::errc::invalid_settings),
                "no tool is named " + name + " (field: tools." + std::to_string(i) + ")");
        }
    }
    return std::nullopt;
}

std::vector<std::string> server::subscribe(worker::agent_loop& loop,
                                           const protocol::subscribe_request& req) {
    auto p = s::since(loop.state(), req.since, loop.current());
    if (!p) {
        return {protocol::error_reply(p.error())};
    }
    p->state = loop.status_now();
    std::optional<protocol::inflight> streaming;
    if (const auto& m = loop.inflight()) {
        streaming = protocol::inflight{m->step, m->text, m->deltas};
    }
    return protocol::chunked(
        protocol::subscribe_reply(*p, *p->state, s::assistant_count(loop.state()), streaming),
        options_.max_reply_bytes);
}

}  // namespace wuhu::broker
