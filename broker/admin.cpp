#include "broker/admin.hpp"

namespace wuhu::broker {

namespace json = boost::json;
namespace s = wuhu::session;

json::object session_summary(const worker::agent_loop& loop) {
    const auto& st = loop.state();
    std::int64_t last = st.transcript.empty() ? 0 : st.transcript.back().at.value;
    for (const auto& l : st.lanes) {
        if (!l.journal.empty()) {
            last = std::max(last, l.journal.back().at.value);
        }
    }
    auto depth = [&](s::lane l) { return st.lanes[static_cast<std::size_t>(l)].pending.size(); };
    return json::object{{"id", loop.id().str()},
                        {"state", s::loop_state_name(loop.current())},
                        {"has_work", st.has_work},
                        {"paused", st.paused},
                        {"lanes", json::object{{"system", depth(s::lane::system)},
                                               {"steer", depth(s::lane::steer)},
                                               {"followUp", depth(s::lane::follow_up)}}},
                        {"last_activity", last}};
}

std::string local_page(const protocol::sessions_query& q, const std::vector<json::object>& loaded,
                       const std::vector<s::session_id>& unloaded, std::size_t max_bytes) {
    // Both lists are the smallest ids of their kind, so the first `limit` of their merge are
    // the smallest overall.
    std::map<std::string, json::object> rows;
    bool cut = loaded.size() > q.limit;
    for (std::size_t i = 0; i < loaded.size() && i < q.limit; ++i) {
        rows.emplace(json::value_to<std::string>(loaded[i].at("id")), loaded[i]);
    }
    if (!q.state || *q.state == "unloaded") {
        std::size_t taken = 0;
        for (const auto& id : unloaded) {
            if (q.after && id.str() <= q.after->str()) {
                continue;
            }
            if (taken == q.limit) {
                cut = true;
                break;
            }
            rows.emplace(id.str(), json::object{{"id", id.str()}, {"state", "unloaded"}});
            ++taken;
        }
    }
    json::array out;
    for (auto& [id, row] : rows) {
        if (out.size() == q.limit) {
            cut = true;
            break;
        }
        out.push_back(std::move(row));
    }
    for (;;) {
        json::object reply{{"ok", true}, {"sessions", out}, {"complete", !cut}};
        std::string text = json::serialize(reply);
        if (text.size() <= max_bytes || out.empty()) {
            return text;
        }
        out.pop_back();  // over the max payload: a shorter page
        cut = true;
    }
}

std::optional<owner_page> read_owner_page(std::string_view reply) {
    boost::system::error_code ec;
    auto v = json::parse(reply, ec);
    if (ec || !v.is_object()) {
        return std::nullopt;
    }
    const auto& o = v.as_object();
    const auto* rows = o.if_contains("sessions");
    const auto* complete = o.if_contains("complete");
    if (rows == nullptr || !rows->is_array() || complete == nullptr || !complete->is_bool()) {
        return std::nullopt;
    }
    owner_page page;
    page.complete = complete->as_bool();
    for (const auto& row : rows->as_array()) {
        const auto* id = row.is_object() ? row.as_object().if_contains("id") : nullptr;
        const auto* state = row.is_object() ? row.as_object().if_contains("state") : nullptr;
        if (id != nullptr && id->is_string() && state != nullptr && state->is_string()) {
            page.rows[std::string(id->as_string())] = row.as_object();
        }
    }
    return page;
}

std::string local_query(const protocol::sessions_query& q) {
    json::object o{{"limit", q.limit}};
    if (q.after) {
        o["after"] = q.after->str();
    }
    if (q.state) {
        o["state"] = *q.state;
    }
    if (q.has_work) {
        o["has_work"] = *q.has_work;
    }
    return json::serialize(o);
}

std::string sessions_page(const protocol::sessions_query& q,
                          const std::vector<storage::catalog_entry>& catalog,
                          const std::vector<ownership::lease>& leases,
                          const std::map<std::string, std::optional<owner_page>>& pages) {
    std::map<std::string, const ownership::lease*> owner_of;
    for (const auto& l : leases) {
        owner_of[l.id.str()] = &l;
    }
    json::array rows;
    std::optional<std::string> next;
    std::string decided = q.after ? q.after->str() : std::string();  // everything up to here
    for (const auto& c : catalog) {
        const std::string id = c.id.str();
        if (q.after && id <= q.after->str()) {
            continue;
        }
        json::object row{{"id", id}, {"has_work", c.has_work}};
        if (auto l = owner_of.find(id); l == owner_of.end()) {
            row["state"] = "unowned";
        } else {
            row["owner"] = l->second->owner;
            row["epoch"] = l->second->epoch.value;
            auto p = pages.find(l->second->owner);
            if (p == pages.end() || !p->second) {
                row["state"] = "unreachable";
            } else if (auto r = p->second->rows.find(id); r != p->second->rows.end()) {
                for (const auto& [k, v] : r->second) {
                    row[k] = v;  // the owner's view is the live one
                }
            } else if (p->second->complete ||
                       (!p->second->rows.empty() && id < p->second->rows.rbegin()->first)) {
                // The owner left it out. Filtered, it does not match; unfiltered, the owner does
                // not have it loaded (its lease is one an earlier run of that worker took, or
                // its loop failed): the lease is live, the session is not running.
                if (q.state || q.has_work) {
                    decided = id;
                    continue;
                }
                row["state"] = "unloaded";
            } else {
                // Past the last row this owner answered: the page ends here, and the next one
                // starts where the owner's answer stopped.
                const std::string owner_last =
                    p->second->rows.empty() ? decided : p->second->rows.rbegin()->first;
                next = std::max(decided, owner_last);
                break;
            }
        }
        decided = id;
        const std::string state = json::value_to<std::string>(row.at("state"));
        const bool has_work = row.at("has_work").as_bool();
        if ((q.has_work && *q.has_work != has_work) ||
            (q.owner && (!row.contains("owner") || row.at("owner").as_string() != *q.owner)) ||
            (q.state && state != *q.state)) {
            continue;
        }
        if (rows.size() == q.limit) {
            next = json::value_to<std::string>(rows.back().at("id"));
            break;
        }
        rows.push_back(std::move(row));
    }
    json::object out{{"ok", true}, {"sessions", std::move(rows)}};
    if (next && !next->empty()) {
        out["next"] = *next;
    }
    return json::serialize(out);
}

}  // namespace wuhu::broker
