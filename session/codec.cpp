#include "session/codec.hpp"

#include "session/json_reader.hpp"
#include "session/overloaded.hpp"
#include "session/text.hpp"

#include <stdexcept>

namespace wuhu::session {

namespace json = boost::json;
using detail::fail;
using detail::object_reader;

// Stored content may be as large as the largest content any limit allows; the configured,
// smaller limit is applied at the edge (request decoding).
static constexpr std::size_t stored_text_max = std::size_t{64} * 1024 * 1024;

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
               },
               j.fact);
    return o;
}

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
                       o["usage"] = json::object{{"input", m.usage.input},
                                                 {"cached_input", m.usage.cached_input},
                                                 {"output", m.usage.output}};
                       if (m.usage.cache_write > 0) {  // absent before issue 14
                           o["usage"].as_object()["cache_write"] = m.usage.cache_write;
                       }
                       o["model"] = m.model;
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
                   },
                   [&](const interruption& i) {
                       o["reason"] = i.reason;
                       o["kind"] = i.kind == interruption_kind::aborted ? "aborted" : "owner_lost";
                   },
                   [&](const diagnostic& d) {
                       o["code"] = d.code;
                       o["message"] = d.message;
                   },
               },
               e.body);
    return o;
}

json::value to_json(const settings& s) {
    json::array tools;
    for (const auto& t : s.tools) {
        tools.push_back(json::value(t));
    }
    return json::object{{"model", s.model},
                        {"system_prompt", s.system_prompt},
                        {"tools", std::move(tools)},
                        {"context_limit", s.context_limit},
                        {"compaction_buffer", s.compaction_buffer},
                        {"keep_recent_tokens", s.keep_recent_tokens},
                        {"utc_offset_minutes", s.utc_offset_minutes}};
}

json::value to_json(const status& s) {
    json::object o{
        {"state", loop_state_name(s.state)}, {"paused", s.paused}, {"has_work", s.has_work}};
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

// ---------------------------------------------------------------------------------- decoders

namespace {

template <class Id>
decoded<Id> id_field(object_reader& r, std::string_view key) {
    WUHU_TRY(s, r.str(key));
    auto id = Id::parse(s);
    if (!id) {
        return fail(static_cast<errc>(id.error().value()), r.path(key));
    }
    return *id;
}

decoded<lane> lane_field(object_reader& r, std::string_view key) {
    WUHU_TRY(s, r.str(key));
    auto l = parse_lane(s);
    if (!l) {
        return fail(errc::invalid_lane, r.path(key));
    }
    return *l;
}

decoded<system_source> source_field(object_reader& r, std::string_view key) {
    WUHU_TRY(s, r.str(key));
    auto src = system_source::parse(s);
    if (!src) {
        return fail(errc::invalid_source, r.path(key));
    }
    return *src;
}

decoded<author> author_at(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    WUHU_TRY(kind, r.str("kind"));
    if (kind == "unknown" || kind == "system") {
        WUHU_CHECK(r.finish());
        return kind == "unknown" ? author{unknown_author{}} : author{system_author{}};
    }
    if (kind != "human" && kind != "bot") {
        return fail(errc::invalid_author, r.path("kind"));
    }
    WUHU_TRY(id, id_field<participant_id>(r, "id"));
    WUHU_TRY(name, r.str("name"));
    WUHU_TRY(email, r.opt_str("email"));
    WUHU_CHECK(r.finish());
    auto p = make_participant(std::move(id), std::string(name), std::string(email.value_or("")),
                              kind == "human" ? participant_kind::human : participant_kind::bot);
    if (!p) {
        return fail(errc::invalid_author, path);
    }
    return author{std::move(*p)};
}

decoded<queue_item> queue_item_at(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    WUHU_TRY(id, id_field<queue_item_id>(r, "id"));
    WUHU_TRY(in, lane_field(r, "lane"));
    WUHU_TRY(at, r.i64("enqueued_at"));
    WUHU_TRY(content, r.text("content", stored_text_max));
    queue_item q{std::move(id), in, unix_ms{at}, user_input{unknown_author{}, {}}};
    if (in == lane::system) {
        WUHU_TRY(src, source_field(r, "source"));
        q.payload = system_input{std::move(src), std::move(content)};
    } else {
        WUHU_TRY(a, r.val("author"));
        WUHU_TRY(who, author_at(*a, r.path("author")));
        q.payload = user_input{std::move(who), std::move(content)};
    }
    WUHU_CHECK(r.finish());
    return q;
}

decoded<journal_entry> journal_at(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    WUHU_TRY(seq, r.u64("seq"));
    WUHU_TRY(at, r.i64("at"));
    WUHU_TRY(fact, r.str("fact"));
    decltype(journal_entry::fact) f = canceled_fact{queue_item_id::parse("-").value()};
    if (fact == "enqueued") {
        WUHU_TRY(item, r.val("item"));
        WUHU_TRY(q, queue_item_at(*item, r.path("item")));
        f = enqueued_fact{std::move(q)};
    } else if (fact == "canceled") {
        WUHU_TRY(id, id_field<queue_item_id>(r, "id"));
        f = canceled_fact{std::move(id)};
    } else if (fact == "materialized") {
        WUHU_TRY(id, id_field<queue_item_id>(r, "id"));
        WUHU_TRY(e, r.u64("entry"));
        f = materialized_fact{std::move(id), entry_seq{e}};
    } else {
        return fail(errc::invalid_entry, r.path("fact"));
    }
    journal_entry j{journal_seq{seq}, unix_ms{at}, std::move(f)};
    WUHU_CHECK(r.finish());
    return j;
}

decoded<tool_call> tool_call_at(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    WUHU_TRY(id, id_field<tool_call_id>(r, "id"));
    WUHU_TRY(name, r.str("name"));
    WUHU_TRY(args, r.text("arguments", stored_text_max));
    WUHU_CHECK(r.finish());
    return tool_call{std::move(id), std::string(name), std::move(args)};
}

decoded<entry_body> body_at(object_reader& r, std::string_view type) {
    if (type == "party_message") {
        WUHU_TRY(a, r.val("author"));
        WUHU_TRY(who, author_at(*a, r.path("author")));
        WUHU_TRY(via, lane_field(r, "lane"));
        WUHU_TRY(item, id_field<queue_item_id>(r, "item"));
        WUHU_TRY(content, r.text("content", stored_text_max));
        return entry_body{party_message{std::move(who), via, std::move(item), std::move(content)}};
    }
    if (type == "system_message") {
        WUHU_TRY(src, source_field(r, "source"));
        WUHU_TRY(item, id_field<queue_item_id>(r, "item"));
        WUHU_TRY(content, r.text("content", stored_text_max));
        return entry_body{system_message{std::move(src), std::move(item), std::move(content)}};
    }
    if (type == "assistant_message") {
        assistant_message m;
        WUHU_TRY(text, r.text("text", stored_text_max));
        m.text = std::move(text);
        WUHU_TRY(calls, r.arr("tool_calls"));
        for (std::size_t i = 0; i < calls->size(); ++i) {
            WUHU_TRY(c, tool_call_at((*calls)[i], r.path("tool_calls." + std::to_string(i))));
            m.tool_calls.push_back(std::move(c));
        }
        WUHU_TRY(u, r.val("usage"));
        WUHU_TRY(ur, object_reader::open(*u, r.path("usage")));
        WUHU_TRY(input, ur.u64("input"));
        WUHU_TRY(cached, ur.u64("cached_input"));
        WUHU_TRY(output, ur.u64("output"));
        WUHU_TRY(cache_write, ur.opt_u64("cache_write"));
        WUHU_CHECK(ur.finish());
        m.usage = {input, cached, output, cache_write.value_or(0)};
        WUHU_TRY(model, r.opt_str("model"));
        m.model = std::string(model.value_or(""));
        return entry_body{std::move(m)};
    }
    if (type == "tool_started") {
        WUHU_TRY(call, id_field<tool_call_id>(r, "call"));
        WUHU_TRY(tool, r.str("tool"));
        return entry_body{tool_started{std::move(call), std::string(tool)}};
    }
    if (type == "tool_result") {
        WUHU_TRY(call, id_field<tool_call_id>(r, "call"));
        WUHU_TRY(tool, r.str("tool"));
        WUHU_TRY(output, r.text("output", stored_text_max));
        WUHU_TRY(is_error, r.boolean("is_error"));
        return entry_body{
            tool_result{std::move(call), std::string(tool), std::move(output), is_error}};
    }
    if (type == "compaction") {
        WUHU_TRY(summary, r.text("summary", stored_text_max));
        WUHU_TRY(first_kept, r.u64("first_kept"));
        WUHU_TRY(tokens, r.u64("tokens_before"));
        return entry_body{compaction{std::move(summary), entry_seq{first_kept}, tokens}};
    }
    if (type == "interruption") {
        WUHU_TRY(reason, r.text("reason", stored_text_max));
        WUHU_TRY(kind, r.str("kind"));
        if (kind != "aborted" && kind != "owner_lost") {
            return fail(errc::invalid_entry, r.path("kind"));
        }
        return entry_body{interruption{std::move(reason), kind == "aborted"
                                                              ? interruption_kind::aborted
                                                              : interruption_kind::owner_lost}};
    }
    if (type == "diagnostic") {
        WUHU_TRY(code, r.str("code"));
        WUHU_TRY(message, r.text("message", stored_text_max));
        return entry_body{diagnostic{std::string(code), std::move(message)}};
    }
    return fail(errc::invalid_entry, r.path("type"));
}

decoded<entry> entry_at(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    WUHU_TRY(id, r.u64("id"));
    WUHU_TRY(at, r.i64("at"));
    WUHU_TRY(type, r.str("type"));
    WUHU_TRY(body, body_at(r, type));
    WUHU_CHECK(r.finish());
    return entry{entry_seq{id}, unix_ms{at}, std::move(body)};
}

decoded<version_vector> version_at(const json::value& v, const std::string& path) {
    auto r = object_reader::open(v, path);
    if (!r) {
        return fail(errc::invalid_version, path);
    }
    version_vector out;
    for (auto [key, slot] :
         {std::pair{"transcript", &out.transcript}, std::pair{"system", &out.system},
          std::pair{"steer", &out.steer}, std::pair{"followUp", &out.follow_up}}) {
        auto n = r->u64(key);  // every component: a partial vector is not a version
        if (!n) {
            return fail(errc::invalid_version, n.error().field);
        }
        *slot = *n;
    }
    if (auto f = r->finish(); !f) {
        return fail(errc::invalid_version, f.error().field);
    }
    return out;
}

}  // namespace

decoded<author> author_from_json(const json::value& v, const std::string& path) {
    return author_at(v, path);
}
decoded<queue_item> queue_item_from_json(const json::value& v) {
    return queue_item_at(v, "");
}
decoded<journal_entry> journal_entry_from_json(const json::value& v) {
    return journal_at(v, "");
}
decoded<entry> entry_from_json(const json::value& v) {
    return entry_at(v, "");
}
decoded<version_vector> version_from_json(const json::value& v) {
    return version_at(v, "");
}

namespace {

decoded<settings> settings_at(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    settings s;
    WUHU_TRY(model, r.str("model"));
    s.model = std::string(model);
    WUHU_TRY(prompt, r.text("system_prompt", stored_text_max));
    s.system_prompt = std::move(prompt);
    WUHU_TRY(tools, r.arr("tools"));
    for (std::size_t i = 0; i < tools->size(); ++i) {
        const auto& t = (*tools)[i];
        if (!t.is_string()) {
            return fail(errc::invalid_type, r.path("tools." + std::to_string(i)));
        }
        s.tools.emplace_back(t.get_string());
    }
    WUHU_TRY(limit, r.u64("context_limit"));
    WUHU_TRY(buffer, r.u64("compaction_buffer"));
    WUHU_TRY(keep, r.u64("keep_recent_tokens"));
    WUHU_TRY(offset, r.i64("utc_offset_minutes"));
    WUHU_CHECK(r.finish());
    s.context_limit = limit;
    s.compaction_buffer = buffer;
    s.keep_recent_tokens = keep;
    if (offset < -24 * 60 || offset > 24 * 60) {
        return fail(errc::invalid_settings, r.path("utc_offset_minutes"));
    }
    s.utc_offset_minutes = static_cast<int>(offset);
    if (!validate(s)) {
        return fail(errc::invalid_settings, path);
    }
    return s;
}

decoded<status> status_at(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    WUHU_TRY(state, r.str("state"));
    WUHU_TRY(paused, r.boolean("paused"));
    WUHU_TRY(has_work, r.boolean("has_work"));
    WUHU_TRY(epoch, r.opt_u64("epoch"));
    WUHU_TRY(seq, r.opt_u64("seq"));
    WUHU_CHECK(r.finish());
    for (auto ls : {loop_state::idle, loop_state::preparing, loop_state::inferring,
                    loop_state::executing_tools, loop_state::compacting}) {
        if (loop_state_name(ls) == state) {
            return status{ls, paused, has_work, epoch.value_or(0), seq.value_or(0)};
        }
    }
    return fail(errc::invalid_type, r.path("state"));
}

}  // namespace

decoded<settings> settings_from_json(const json::value& v) {
    return settings_at(v, "");
}
decoded<status> status_from_json(const json::value& v) {
    return status_at(v, "");
}

decoded<patch> patch_from_json(const json::value& v) {
    WUHU_TRY(r, object_reader::open(v, ""));
    patch p;
    WUHU_TRY(from, r.val("from"));
    WUHU_TRY(from_v, version_at(*from, "from"));
    WUHU_TRY(to, r.val("to"));
    WUHU_TRY(to_v, version_at(*to, "to"));
    p.from = from_v;
    p.to = to_v;
    WUHU_TRY(entries, r.arr("transcript"));
    for (std::size_t i = 0; i < entries->size(); ++i) {
        WUHU_TRY(e, entry_at((*entries)[i], "transcript." + std::to_string(i)));
        p.transcript.push_back(std::move(e));
    }
    WUHU_TRY(journal, r.val("journal"));
    WUHU_TRY(jr, object_reader::open(*journal, "journal"));
    for (lane l : all_lanes) {
        WUHU_TRY(facts, jr.arr(lane_name(l)));
        for (std::size_t i = 0; i < facts->size(); ++i) {
            WUHU_TRY(j, journal_at((*facts)[i], jr.path(lane_name(l)) + "." + std::to_string(i)));
            p.journal[index_of(l)].push_back(std::move(j));
        }
    }
    WUHU_CHECK(jr.finish());
    if (const json::value* s = r.opt_val("settings")) {
        WUHU_TRY(cfg, settings_at(*s, "settings"));
        p.config = std::move(cfg);
    }
    if (const json::value* s = r.opt_val("status")) {
        WUHU_TRY(st, status_at(*s, "status"));
        p.state = st;
    }
    WUHU_CHECK(r.finish());
    return p;
}

decoded<timer> timer_from_json(const json::value& v) {
    WUHU_TRY(r, object_reader::open(v, ""));
    WUHU_TRY(id, id_field<queue_item_id>(r, "id"));
    WUHU_TRY(due, r.i64("due"));
    WUHU_TRY(src, source_field(r, "source"));
    WUHU_TRY(content, r.text("content", stored_text_max));
    WUHU_CHECK(r.finish());
    return timer{std::move(id), unix_ms{due}, std::move(src), std::move(content)};
}

decoded<action> action_from_json(const json::value& v) {
    WUHU_TRY(r, object_reader::open(v, ""));
    WUHU_TRY(kind, r.str("action"));
    action out = has_work_set{};
    if (kind == "entry") {
        WUHU_TRY(e, r.val("entry"));
        WUHU_TRY(x, entry_at(*e, "entry"));
        out = entry_appended{std::move(x)};
    } else if (kind == "journal") {
        WUHU_TRY(in, lane_field(r, "lane"));
        WUHU_TRY(f, r.val("fact"));
        WUHU_TRY(j, journal_at(*f, "fact"));
        out = journal_recorded{in, std::move(j)};
    } else if (kind == "settings") {
        WUHU_TRY(s, r.val("settings"));
        WUHU_TRY(cfg, settings_at(*s, "settings"));
        out = settings_set{std::move(cfg)};
    } else if (kind == "timer") {
        WUHU_TRY(t, r.val("timer"));
        WUHU_TRY(x, timer_from_json(*t));
        out = timer_scheduled{std::move(x)};
    } else if (kind == "timer_cleared") {
        WUHU_TRY(id, id_field<queue_item_id>(r, "id"));
        out = timer_cleared{std::move(id)};
    } else if (kind == "has_work" || kind == "paused") {
        WUHU_TRY(b, r.boolean("value"));
        out = kind == "has_work" ? action{has_work_set{b}} : action{paused_set{b}};
    } else {
        return fail(errc::invalid_entry, "action");
    }
    WUHU_CHECK(r.finish());
    return out;
}

decoded<json::value> parse_json(std::string_view raw) {
    if (!is_valid_utf8(raw)) {
        return fail(errc::invalid_utf8, "");
    }
    boost::system::error_code ec;
    json::value v = json::parse(raw, ec);
    if (ec) {
        return fail(errc::invalid_json, "");
    }
    return v;
}

}  // namespace wuhu::session
