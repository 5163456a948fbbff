#include "broker/admin.hpp"

#include "session/summary.hpp"

#include <algorithm>

namespace wuhu::broker {

namespace json = boost::json;
namespace s = wuhu::session;

namespace {

// The row's store-side fields from a summary.
void put_summary(json::object& row, const s::session_summary& sum) {
    row["has_work"] = sum.has_work;
    row["paused"] = sum.paused;
    row["lanes"] = json::object{{"system", sum.lanes[s::index_of(s::lane::system)]},
                                {"steer", sum.lanes[s::index_of(s::lane::steer)]},
                                {"followUp", sum.lanes[s::index_of(s::lane::follow_up)]}};
    row["timers"] = sum.timers;
    if (sum.next_timer) {
        row["next_timer"] = sum.next_timer->value;
    }
    row["last_activity"] = sum.last_activity.value;
    row["approvals"] = sum.approvals;
    row["cost"] = sum.cost;
    row["tokens"] = sum.tokens;
}

std::string id_of(const json::object& row) {
    return json::value_to<std::string>(row.at("id"));
}

}  // namespace

json::object loaded_row(const worker::agent_loop& loop, std::string_view owner) {
    json::object row{{"id", loop.id().str()},
                     {"state", s::loop_state_name(loop.current())},
                     {"owner", owner},
                     {"epoch", loop.epoch().value}};
    put_summary(row, s::summarize(loop.state()));
    return row;
}

json::object index_row(const storage::catalog_entry& e, const ownership::lease* held) {
    json::object row{{"id", e.id.str()}, {"state", held != nullptr ? "unloaded" : "unowned"}};
    if (held != nullptr) {
        row["owner"] = held->owner;
        row["epoch"] = held->epoch.value;
    }
    put_summary(row, e.summary);
    return row;
}

bool row_matches(const protocol::sessions_query& q, const json::object& row) {
    if (q.state && row.at("state").as_string() != *q.state) {
        return false;
    }
    if (q.has_work && row.at("has_work").as_bool() != *q.has_work) {
        return false;
    }
    if (q.awaiting_approval &&
        (row.at("approvals").to_number<std::uint64_t>() > 0) != *q.awaiting_approval) {
        return false;
    }
    if (q.owner) {
        const auto* owner = row.if_contains("owner");
        return owner != nullptr && owner->as_string() == *q.owner;
    }
    return true;
}

bool is_loop_state(std::string_view state) {
    return state != "unloaded" && state != "unowned" && state != "unreachable";
}

std::string local_page(const protocol::sessions_query& q, const std::vector<json::object>& loaded,
                       std::size_t max_bytes) {
    bool cut = loaded.size() > q.limit;
    json::array out;
    for (std::size_t i = 0; i < loaded.size() && i < q.limit; ++i) {
        out.push_back(loaded[i]);
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

namespace {

bool is_uint(const json::value* v) {
    return v != nullptr && (v->is_uint64() || (v->is_int64() && v->as_int64() >= 0));
}

bool is_int(const json::value* v) {
    return v != nullptr && (v->is_int64() || (v->is_uint64() && v->as_uint64() <= INT64_MAX));
}

// An owner's row, every field of the shape loaded_row() writes and nothing else; nullopt when
// a field is missing or of another type (another worker's answer is input like any other).
std::optional<json::object> checked_row(const json::value& v) {
    if (!v.is_object()) {
        return std::nullopt;
    }
    const auto& r = v.as_object();
    const auto* id = r.if_contains("id");
    const auto* state = r.if_contains("state");
    const auto* owner = r.if_contains("owner");
    const auto* lanes = r.if_contains("lanes");
    const auto* has_work = r.if_contains("has_work");
    const auto* paused = r.if_contains("paused");
    const auto* next_timer = r.if_contains("next_timer");
    if (id == nullptr || !id->is_string() || !s::session_id::parse_key(id->as_string()) ||
        state == nullptr || !state->is_string() || !is_loop_state(state->as_string()) ||
        std::find(protocol::session_row_states.begin(), protocol::session_row_states.end(),
                  std::string_view(state->as_string())) == protocol::session_row_states.end() ||
        owner == nullptr || !owner->is_string() || !protocol::valid_worker_id(owner->as_string()) ||
        !is_uint(r.if_contains("epoch")) || has_work == nullptr || !has_work->is_bool() ||
        paused == nullptr || !paused->is_bool() || lanes == nullptr || !lanes->is_object() ||
        !is_uint(r.if_contains("timers")) || !is_int(r.if_contains("last_activity")) ||
        (next_timer != nullptr && !is_int(next_timer))) {
        return std::nullopt;
    }
    json::object checked_lanes;
    for (const auto* lane : {"system", "steer", "followUp"}) {
        const auto* depth = lanes->as_object().if_contains(lane);
        if (!is_uint(depth)) {
            return std::nullopt;
        }
        checked_lanes[lane] = *depth;
    }
    json::object out{{"id", *id},         {"state", *state},
                     {"owner", *owner},   {"epoch", r.at("epoch")},
                     {"has_work", *has_work}, {"paused", *paused},
                     {"lanes", std::move(checked_lanes)}, {"timers", r.at("timers")},
                     {"last_activity", r.at("last_activity")}};
    if (next_timer != nullptr) {
        out["next_timer"] = *next_timer;
    }
    // Issue 33's fields: 0 from an owner that does not send them (an older worker).
    for (const auto* key : {"approvals", "cost", "tokens"}) {
        const auto* n = r.if_contains(key);
        if (n != nullptr && !is_uint(n)) {
            return std::nullopt;
        }
        out[key] = n != nullptr ? *n : json::value(0);
    }
    return out;
}

}  // namespace

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
    for (const auto& row : rows->as_array()) {
        auto r = checked_row(row);
        if (!r) {
            return std::nullopt;  // not an owner's page: its sessions show "unreachable"
        }
        auto id = json::value_to<std::string>(r->at("id"));
        page.rows[std::move(id)] = std::move(*r);
    }
    if (!complete->as_bool()) {
        page.until = page.rows.empty() ? std::string() : page.rows.rbegin()->first;
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
    if (q.awaiting_approval) {
        o["awaiting_approval"] = *q.awaiting_approval;
    }
    if (q.tenant) {
        o["tenant"] = *q.tenant;
    }
    if (q.ids) {
        json::array ids;
        for (const auto& id : *q.ids) {
            ids.push_back(json::string(id.str()));
        }
        o["ids"] = std::move(ids);
    }
    return json::serialize(o);
}

std::vector<json::object> join_rows(const std::vector<storage::catalog_entry>& entries,
                                    const std::vector<ownership::lease>& leases,
                                    const std::map<std::string, std::optional<owner_page>>& pages) {
    std::map<std::string, const ownership::lease*> held;
    for (const auto& l : leases) {
        held[l.id.str()] = &l;
    }
    std::vector<json::object> out;
    for (const auto& e : entries) {
        auto l = held.find(e.id.str());
        auto row = index_row(e, l == held.end() ? nullptr : l->second);
        if (l != held.end()) {
            auto p = pages.find(l->second->owner);
            if (p == pages.end() || !p->second) {
                row["state"] = "unreachable";
            } else if (auto r = p->second->rows.find(e.id.str()); r != p->second->rows.end()) {
                for (const auto& [k, v] : r->second) {
                    row[k] = v;  // the owner's view is the live one
                }
            } else if (p->second->until && e.id.str() > *p->second->until) {
                if (!out.empty()) {
                    break;  // undecided: the next chunk starts here
                }
                row["state"] = "unreachable";
                out.push_back(std::move(row));
                break;
            }
        }
        out.push_back(std::move(row));
    }
    return out;
}

std::string merge_owner_pages(const protocol::sessions_query& q,
                              const std::map<std::string, std::optional<owner_page>>& pages) {
    // Rows past the end of a cut page may not be the smallest: the page stops there.
    std::optional<std::string> stop;
    json::array unreachable;
    std::map<std::string, const json::object*> rows;
    for (const auto& [owner, page] : pages) {
        if (!page) {
            unreachable.push_back(json::string(owner));
            continue;
        }
        if (page->until) {
            stop = stop ? std::min(*stop, *page->until) : *page->until;
        }
        for (const auto& [id, row] : page->rows) {
            if ((!q.after || id > q.after->str()) && row_matches(q, row)) {
                rows.emplace(id, &row);
            }
        }
    }
    json::array out;
    std::optional<std::string> next;
    for (const auto& [id, row] : rows) {
        if (stop && id > *stop) {
            next = *stop;
            break;
        }
        if (out.size() == q.limit) {
            next = id_of(out.back().as_object());
            break;
        }
        out.push_back(*row);
    }
    if (!next && stop) {
        next = *stop;  // the cut owner has more after its last row
    }
    if (next && next->empty()) {
        next.reset();  // an owner cut before its first row: nothing to go on from
    }
    json::object reply{{"ok", true}, {"sessions", std::move(out)}};
    if (next) {
        reply["next"] = *next;
    }
    if (!unreachable.empty()) {
        reply["unreachable"] = std::move(unreachable);
    }
    return json::serialize(reply);
}

}  // namespace wuhu::broker
