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

std::string sessions_page(const s::sessions_query& q,
                          const std::vector<storage::catalog_entry>& catalog,
                          const std::vector<ownership::lease>& leases,
                          const std::map<std::string, json::object>& summaries) {
    std::map<std::string, const ownership::lease*> owner_of;
    for (const auto& l : leases) {
        owner_of[l.id.str()] = &l;
    }
    json::array rows;
    std::optional<std::string> next;
    for (const auto& c : catalog) {
        if (q.after && c.id.str() <= q.after->str()) {
            continue;
        }
        json::object row{{"id", c.id.str()}, {"has_work", c.has_work}};
        std::string state = "unowned";
        if (auto l = owner_of.find(c.id.str()); l != owner_of.end()) {
            row["owner"] = l->second->owner;
            row["epoch"] = l->second->epoch.value;
            if (auto sum = summaries.find(c.id.str()); sum != summaries.end()) {
                for (const auto& [k, v] : sum->second) {
                    row[k] = v;  // the owner's view is the live one
                }
                state = json::value_to<std::string>(sum->second.at("state"));
            }
        }
        if (!row.contains("state")) {
            row["state"] = state;
        }
        const bool has_work = row.at("has_work").as_bool();
        if ((q.has_work && *q.has_work != has_work) ||
            (q.owner && (!row.contains("owner") || row.at("owner").as_string() != *q.owner)) ||
            (q.state && state != s::loop_state_name(*q.state))) {
            continue;
        }
        if (rows.size() == q.limit) {
            next = json::value_to<std::string>(rows.back().at("id"));
            break;
        }
        rows.push_back(std::move(row));
    }
    json::object out{{"ok", true}, {"sessions", std::move(rows)}};
    if (next) {
        out["next"] = *next;
    }
    return json::serialize(out);
}

}  // namespace wuhu::broker
