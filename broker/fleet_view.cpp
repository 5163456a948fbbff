// The fleet view (`wuhu.admin.sessions`): a page of sessions from this worker's registry, from
// the store's index, and the owners asked for what only they know.
#include "broker/server.hpp"

#include "broker/admin.hpp"

#include <algorithm>

namespace wuhu::broker {

namespace s = wuhu::session;

namespace {

// A fleet-view query from a request body, or the error reply that refuses it.
std::variant<protocol::sessions_query, std::string> read_query(
    std::string_view data, const protocol::request_limits& limits,
    protocol::session_names names) {
    auto body = protocol::parse_body(data, limits);
    if (!body) {
        return protocol::error_reply(body.error());
    }
    auto q = protocol::decode_sessions_query(*body, names);
    if (!q) {
        return protocol::error_reply(q.error());
    }
    return std::move(*q);
}

// The sessions a query names (`after`, `ids`), as they are kept: a tenant's ids within that
// tenant; the fleet's own keys with the default tenant's sessions kept without one.
s::result<void> as_kept(protocol::sessions_query& q, const protocol::subject_layout& subjects,
                        const std::optional<std::string>& tenant) {
    auto kept = [&](const s::session_id& named) -> s::result<s::session_id> {
        if (tenant) {
            return subjects.session_of(*tenant, named.str());
        }
        if (!named.tenant().empty()) {
            return subjects.session_of(named.tenant(), named.local());
        }
        return named;
    };
    if (q.after) {
        auto k = kept(*q.after);
        if (!k) {
            return k.error();
        }
        q.after = std::move(*k);
    }
    if (q.ids) {
        for (auto& id : *q.ids) {
            auto k = kept(id);
            if (!k) {
                return k.error();
            }
            id = std::move(*k);
        }
    }
    return {};
}

}  // namespace

std::string server::local_sessions(worker::session_registry& registry, const nats::message& m) {
    // Between workers, sessions are named by their keys.
    auto read = read_query(m.data, options_.limits, protocol::session_names::keys);
    if (auto* refused = std::get_if<std::string>(&read)) {
        return std::move(*refused);
    }
    const auto* q = &std::get<protocol::sessions_query>(read);
    const auto& me = leases_.keeper().worker_id();
    auto in_scope = [&](const s::session_id& id) {
        return !q->tenant || subjects_.belongs_to(id, *q->tenant);
    };
    std::vector<boost::json::object> loaded;
    if (q->ids) {
        // The rows of these sessions that are loaded here, in id order.
        auto ids = *q->ids;
        std::sort(ids.begin(), ids.end());
        for (const auto& id : ids) {
            if (q->after && id <= *q->after) {
                continue;
            }
            if (const auto* loop = registry.find_running(id); loop != nullptr && in_scope(id)) {
                loaded.push_back(loaded_row(*loop, me));
            }
        }
        protocol::sessions_query all = *q;
        all.limit = loaded.size();
        return local_page(all, loaded, options_.max_reply_bytes);
    }
    registry.each(
        [&](const worker::agent_loop& loop) {
            if (!in_scope(loop.id())) {
                return true;
            }
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
        // An owner id read from the lease store that is no subject token is asked nothing
        // (an empty subject is never published to): its sessions show "unreachable".
        auto subject = subjects_.local_sessions(owner);
        subjects.push_back(subject ? std::move(*subject) : std::string());
    }
    // In waves of at most max_fanout owners: what one listing has in flight (requests, and
    // answers of up to a max payload each) is bounded whatever the size of the fleet.
    const std::size_t wave = std::max<std::size_t>(1, options_.max_fanout);
    std::map<std::string, std::optional<owner_page>> pages;
    for (std::size_t from = 0; from < owners.size(); from += wave) {
        const std::size_t to = std::min(owners.size(), from + wave);
        std::vector<std::string> some(subjects.begin() + static_cast<std::ptrdiff_t>(from),
                                      subjects.begin() + static_cast<std::ptrdiff_t>(to));
        std::vector<std::optional<std::string>> answers;
        if (bodies.size() == 1) {
            answers = nats_.request_all(some, std::string_view(bodies.front()),
                                        options_.admin_timeout);
        } else {
            answers = nats_.request_all(
                some,
                std::vector<std::string>(bodies.begin() + static_cast<std::ptrdiff_t>(from),
                                         bodies.begin() + static_cast<std::ptrdiff_t>(to)),
                options_.admin_timeout);
        }
        for (std::size_t i = from; i < to; ++i) {
            pages[owners[i]] = answers[i - from] ? read_owner_page(*answers[i - from]) : std::nullopt;
        }
    }
    return pages;
}

std::string server::list_sessions(const nats::message& m) {
    // Whose sessions: a tenant's (its own view, nats-server put its name in the subject), or
    // the whole fleet's (without tenancy; with it, the fleet's own account only).
    auto scope = subjects_.parse_view(m.subject);
    if (!scope) {
        return protocol::error_reply(scope.error());
    }
    const auto& tenant = *scope;
    // A tenant names its sessions by their ids; the whole fleet's view by their keys (with
    // tenancy `<tenant>.<id>`; without, ids, and the keys of tenants' sessions left from when
    // tenancy was on).
    const auto names = tenant ? protocol::session_names::ids : protocol::session_names::keys;
    auto read = read_query(m.data, options_.limits, names);
    if (auto* refused = std::get_if<std::string>(&read)) {
        return std::move(*refused);
    }
    auto& q = std::get<protocol::sessions_query>(read);
    if (q.tenant && (tenant || !subjects_.tenancy_on())) {
        return protocol::error_reply(
            s::code_name(s::errc::invalid_query),
            tenant ? "a tenant's view lists that tenant's sessions only (field: tenant)"
                   : "this fleet has no tenants (field: tenant)");
    }
    if (tenant) {
        q.tenant = *tenant;
    }
    if (auto kept = as_kept(q, subjects_, tenant); !kept) {
        return protocol::error_reply(kept.error());
    }
    return presented(list_page(q), tenant);
}

std::string server::list_page(const protocol::sessions_query& q) {
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
        auto pages = ask_owners(owners, {local_query(q)});
        if (q.tenant) {
            // Another worker's answer is input: a row of another tenant is never shown.
            for (auto& [owner, page] : pages) {
                if (!page) {
                    continue;
                }
                std::erase_if(page->rows, [&](const auto& row) {
                    auto key = s::session_id::parse_key(row.first);
                    return !key || !subjects_.belongs_to(*key, *q.tenant);
                });
            }
        }
        return merge_owner_pages(q, pages);
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
    // By cost: the index's order, its cursor (cost, id) the last entry looked at.
    std::optional<std::uint64_t> cursor_cost = q.after_cost;
    std::map<std::string, std::uint64_t> index_cost;  // of the entries looked at
    // A tenant's sessions are a range of keys in the index and the leases.
    std::optional<std::string> scope;
    if (q.tenant) {
        scope = subjects_.scope_of(*q.tenant);
    }
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
            by_owner.tenant = scope;
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
            page.tenant = scope;
            page.awaiting_approval = q.awaiting_approval;
            page.by_cost = q.by_cost;
            page.after_cost = cursor_cost;
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
            cursor_cost = entries.back().summary.cost;
            for (const auto& e : entries) {
                index_cost[e.id.str()] = e.summary.cost;
            }
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
            cursor_cost = entries[joined.size() - 1].summary.cost;
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
        if (q.by_cost) {
            // The cost the index holds for that row (a loaded row shows its owner's newer one).
            const auto it = index_cost.find(std::string(out["next"].as_string()));
            out["next_cost"] = it != index_cost.end() ? it->second : cursor_cost.value_or(0);
        }
    }
    return boost::json::serialize(out);
}

std::string server::presented(std::string page, const std::optional<std::string>& tenant) const {
    if (!tenant && !subjects_.tenancy_on()) {
        return page;  // keys are ids
    }
    boost::system::error_code ec;
    auto v = boost::json::parse(page, ec);
    if (ec || !v.is_object() || v.as_object().if_contains("sessions") == nullptr) {
        return page;  // an error reply
    }
    auto& o = v.as_object();
    // A key as the asker names it: the id within its tenant, or `<tenant>.<id>`.
    auto named = [&](std::string_view key_text) -> std::string {
        auto key = s::session_id::parse_key(key_text);
        if (!key) {
            return std::string(key_text);
        }
        if (tenant) {
            return std::string(key->local());
        }
        const auto t = subjects_.tenant_of(*key);
        return t.empty() ? key->str() : std::string(t) + "." + std::string(key->local());
    };
    for (auto& row : o.at("sessions").as_array()) {
        auto& r = row.as_object();
        const std::string key(r.at("id").as_string());
        auto id = s::session_id::parse_key(key);
        if (!id) {
            continue;
        }
        if (!tenant) {
            const auto t = subjects_.tenant_of(*id);
            r["tenant"] = t.empty() ? boost::json::value(nullptr) : boost::json::value(t);
        }
        r["id"] = id->local();
    }
    if (auto* next = o.if_contains("next"); next != nullptr && next->is_string()) {
        *next = named(next->as_string());
    }
    return boost::json::serialize(o);
}

}  // namespace wuhu::broker
