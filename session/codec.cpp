#include "session/codec.hpp"

#include "session/overloaded.hpp"

#include <stdexcept>

namespace wuhu::session {

namespace json = boost::json;

std::string decode_error::message() const {
    std::string m = make_error_code(code).message();
    if (!field.empty()) {
        m.append(" (field: ").append(field).append(")");
    }
    return m;
}

void throw_exception_from_error(const decode_error& e, const boost::source_location&) {
    throw std::runtime_error(std::string(code_name(e.code)) + ": " + e.message());
}

// ---------------------------------------------------------------------------------- encoders

json::value to_json(const author& a) {
    return std::visit(overloaded{
                          [](const participant& p) -> json::value {
                              json::object o;
                              o["kind"] = p.kind == participant_kind::human ? "human" : "bot";
                              o["id"] = p.id.str();
                              o["name"] = p.name;
                              if (!p.email.empty()) {
                                  o["email"] = p.email;
                              }
                              return o;
                          },
                          [](const unknown_author&) -> json::value {
                              return json::object{{"kind", "unknown"}};
                          },
                          [](const system_author&) -> json::value {
                              return json::object{{"kind", "system"}};
                          },
                      },
                      a);
}

json::value to_json(const queue_item& q) {
    json::object o;
    o["id"] = q.id.str();
    o["lane"] = lane_name(q.in);
    o["enqueued_at"] = q.enqueued_at.value;
    std::visit(overloaded{
                   [&](const user_input& u) {
                       o["author"] = to_json(u.from);
                       o["content"] = u.content;
                   },
                   [&](const system_input& s) {
                       o["source"] = s.source.str();
                       o["content"] = s.content;
                   },
               },
               q.payload);
    return o;
}

json::value to_json(const journal_entry& j) {
    json::object o;
    o["seq"] = j.seq.value;
    o["at"] = j.at.value;
    std::visit(overloaded{
                   [&](const enqueued_fact& f) {
                       o["fact"] = "enqueued";
                       o["item"] = to_json(f.item);
                   },
                   [&](const canceled_fact& f) {
                       o["fact"] = "canceled";
                       o["id"] = f.id.str();
                   },
                   [&](const materialized_fact& f) {
                       o["fact"] = "materialized";
                       o["id"] = f.id.str();
                       o["entry"] = f.entry.value;
                   },
                   [&](const scheduled_fact& f) {
                       o["fact"] = "scheduled";
                       o["timer"] = to_json(f.t);
                   },
                   [&](const unscheduled_fact& f) {
                       o["fact"] = f.fired ? "fired" : "unscheduled";
                       o["id"] = f.id.str();
                   },
               },
               j.fact);
    return o;
}

namespace {

// What an inference that is not an answer used (a compaction's summary, a billed attempt), when
// it used anything: entries without usage keep their shape.
void put_billing(json::object& o, const token_usage& u, const std::string& model,
                 std::uint64_t cost) {
    if (u == token_usage{} && cost == 0 && model.empty()) {
        return;
    }
    o["usage"] = to_json(u);
    o["model"] = model;
    if (cost > 0) {
        o["cost"] = cost;
    }
}

}  // namespace

json::value to_json(const entry& e) {
    json::object o;
    o["id"] = e.id.value;
    o["at"] = e.at.value;
    o["type"] = type_name(e.body);
    std::visit(overloaded{
                   [&](const party_message& m) {
                       o["author"] = to_json(m.from);
                       o["lane"] = lane_name(m.via);
                       o["item"] = m.item.str();
                       o["content"] = m.content;
                       if (m.sent_at.value != 0) {
                           o["sent_at"] = m.sent_at.value;
                       }
                   },
                   [&](const system_message& m) {
                       o["source"] = m.source.str();
                       o["item"] = m.item.str();
                       o["content"] = m.content;
                   },
                   [&](const assistant_message& m) {
                       o["text"] = m.text;
                       json::array calls;
                       for (const auto& c : m.tool_calls) {
                           calls.push_back(json::object{
                               {"id", c.id.str()}, {"name", c.name}, {"arguments", c.arguments}});
                       }
                       o["tool_calls"] = std::move(calls);
                       o["usage"] = to_json(m.usage);
                       o["model"] = m.model;
                       if (m.cost > 0) {  // absent before issue 33
                           o["cost"] = m.cost;
                       }
                   },
                   [&](const tool_started& t) {
                       o["call"] = t.call.str();
                       o["tool"] = t.tool;
                   },
                   [&](const tool_result& r) {
                       o["call"] = r.call.str();
                       o["tool"] = r.tool;
                       o["output"] = r.output;
                       o["is_error"] = r.is_error;
                   },
                   [&](const compaction& c) {
                       o["summary"] = c.summary;
                       o["first_kept"] = c.first_kept.value;
                       o["tokens_before"] = c.tokens_before;
                       put_billing(o, c.usage, c.model, c.cost);
                   },
                   [&](const interruption& i) {
                       o["reason"] = i.reason;
                       o["kind"] = i.kind == interruption_kind::aborted ? "aborted" : "owner_lost";
                       if (i.stopped != abort_stage::none) {
                           o["stopped"] = stage_name(i.stopped);
                       }
                       if (!i.abort_id.empty()) {
                           o["abort_id"] = i.abort_id;
                       }
                   },
                   [&](const diagnostic& d) {
                       o["code"] = d.code;
                       o["message"] = d.message;
                       put_billing(o, d.usage, d.model, d.cost);
                   },
                   [&](const approval_requested& a) {
                       o["call"] = a.call.str();
                       o["tool"] = a.tool;
                       o["arguments"] = a.arguments;
                       if (a.deadline.value != 0) {
                           o["deadline"] = a.deadline.value;
                       }
                       o["on_deadline"] = decision_name(a.on_deadline);
                   },
                   [&](const approval_decided& d) {
                       json::value fields = to_json(d);
                       for (auto& kv : fields.as_object()) {
                           o[kv.key()] = kv.value();
                       }
                   },
               },
               e.body);
    return o;
}

json::value to_json(const budget& b) {
    json::object o;
    if (b.tokens != 0) {
        o["tokens"] = b.tokens;
    }
    if (b.cost != 0) {
        o["cost_usd"] = dollars(b.cost);  // a decimal string: exact
    }
    if (b.turns != 0) {
        o["turns"] = b.turns;
    }
    if (b.tool_calls != 0) {
        o["tool_calls"] = b.tool_calls;
    }
    if (b.soft_percent != 0) {
        o["soft_percent"] = b.soft_percent;
    }
    return o;
}

json::value to_json(const approval_decided& d) {
    json::object o{{"call", d.call.str()},
                   {"tool", d.tool},
                   {"decision", decision_name(d.what)},
                   {"by", to_json(d.by)}};
    if (d.what == decision::approve) {
        o["arguments"] = d.arguments;
    } else {
        o["message"] = d.message;
    }
    if (d.by_deadline) {
        o["by_deadline"] = true;
    }
    return o;
}

json::value to_json(const approval_settings& a) {
    json::object tools;
    for (const auto& [name, mode] : a.tools) {
        tools[name] = approval_mode_name(mode);
    }
    json::object o{{"tools", std::move(tools)}};
    if (a.deadline_ms != 0) {
        o["deadline_ms"] = a.deadline_ms;
    }
    if (a.on_deadline) {
        o["on_deadline"] = decision_name(*a.on_deadline);
    }
    return o;
}

json::value to_json(const settings& s) {
    json::array tools;
    for (const auto& t : s.tools) {
        tools.push_back(json::value(t));
    }
    json::object o{{"model", s.model},
                   {"system_prompt", s.system_prompt},
                   {"tools", std::move(tools)},
                   {"context_limit", s.context_limit},
                   {"compaction_buffer", s.compaction_buffer},
                   {"keep_recent_tokens", s.keep_recent_tokens},
                   {"utc_offset_minutes", s.utc_offset_minutes}};
    if (s.limits != budget{}) {  // absent before issue 33, and when the fleet's applies
        o["budget"] = to_json(s.limits);
    }
    if (s.approval != approval_settings{}) {  // absent before issue 33, and when the tools file's
        o["approval"] = to_json(s.approval);
    }
    return o;
}

json::value to_json(const token_usage& u) {
    json::object o{{"input", u.input}, {"cached_input", u.cached_input}, {"output", u.output}};
    if (u.cache_write > 0) {  // absent before issue 14
        o["cache_write"] = u.cache_write;
    }
    if (u.reasoning > 0) {  // absent before issue 33
        o["reasoning"] = u.reasoning;
    }
    return o;
}

json::value to_json(const usage_totals& t) {
    json::object o = to_json(t.tokens).as_object();
    o["cost"] = t.cost;
    o["turns"] = t.turns;
    o["tool_calls"] = t.tool_calls;
    return o;
}

json::value to_json(const status& s) {
    json::object o{{"state", loop_state_name(s.state)},
                   {"paused", s.paused},
                   {"has_work", s.has_work},
                   {"usage", to_json(s.usage)}};
    if (s.epoch != 0) {
        o["epoch"] = s.epoch;
        o["seq"] = s.seq;
    }
    return o;
}

json::value to_json(const version_vector& v) {
    return json::object{{"transcript", v.transcript},
                        {"system", v.system},
                        {"steer", v.steer},
                        {"followUp", v.follow_up}};
}

json::value to_json(const patch& p) {
    json::object o;
    o["from"] = to_json(p.from);
    o["to"] = to_json(p.to);
    json::array entries;
    for (const auto& e : p.transcript) {
        entries.push_back(to_json(e));
    }
    o["transcript"] = std::move(entries);
    json::object journal;
    for (lane l : all_lanes) {
        json::array facts;
        for (const auto& j : p.journal[index_of(l)]) {
            facts.push_back(to_json(j));
        }
        journal[lane_name(l)] = std::move(facts);
    }
    o["journal"] = std::move(journal);
    if (p.config) {
        o["settings"] = to_json(*p.config);
    }
    if (p.state) {
        o["status"] = to_json(*p.state);
    }
    return o;
}

json::value to_json(const timer& t) {
    return json::object{{"id", t.id.str()},
                        {"due", t.due.value},
                        {"source", t.source.str()},
                        {"content", t.content}};
}

json::value to_json(const action& a) {
    return std::visit(
        overloaded{
            [](const entry_appended& x) -> json::value {
                return json::object{{"action", "entry"}, {"entry", to_json(x.e)}};
            },
            [](const journal_recorded& x) -> json::value {
                return json::object{
                    {"action", "journal"}, {"lane", lane_name(x.in)}, {"fact", to_json(x.j)}};
            },
            [](const settings_set& x) -> json::value {
                return json::object{{"action", "settings"}, {"settings", to_json(x.value)}};
            },
            [](const has_work_set& x) -> json::value {
                return json::object{{"action", "has_work"}, {"value", x.value}};
            },
            [](const paused_set& x) -> json::value {
                return json::object{{"action", "paused"}, {"value", x.value}};
            },
            [](const timer_scheduled& x) -> json::value {
                return json::object{{"action", "timer"}, {"timer", to_json(x.t)}};
            },
            [](const timer_cleared& x) -> json::value {
                return json::object{{"action", "timer_cleared"}, {"id", x.id.str()}};
            },
        },
        a);
}

}  // namespace wuhu::session
