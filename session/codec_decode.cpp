// The codec's decoders: JSON to the domain's values, each failure naming the field it found.
#include "session/codec.hpp"

#include "session/json_reader.hpp"
#include "session/text.hpp"

#include <algorithm>
#include <cmath>

namespace wuhu::session {

namespace json = boost::json;
using detail::fail;
using detail::object_reader;

// Stored content may be as large as the largest content any limit allows; the configured,
// smaller limit is applied at the edge (request decoding).
static constexpr std::size_t stored_text_max = std::size_t{64} * 1024 * 1024;

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

decoded<decision> decision_field(object_reader& r, std::string_view key) {
    WUHU_TRY(name, r.str(key));
    const auto d = decision_named(name);
    if (!d) {
        return fail(errc::invalid_entry, r.path(key));
    }
    return *d;
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
    } else if (fact == "scheduled") {
        WUHU_TRY(t, r.val("timer"));
        WUHU_TRY(x, timer_from_json(*t));
        f = scheduled_fact{std::move(x)};
    } else if (fact == "unscheduled" || fact == "fired") {
        WUHU_TRY(id, id_field<queue_item_id>(r, "id"));
        f = unscheduled_fact{std::move(id), fact == "fired"};
    } else {
        return fail(errc::invalid_entry, r.path("fact"));
    }
    journal_entry j{journal_seq{seq}, unix_ms{at}, std::move(f)};
    WUHU_CHECK(r.finish());
    return j;
}

// The token fields of an object (an entry's usage, a ledger's totals); the caller finishes it.
decoded<token_usage> tokens_of(object_reader& r) {
    WUHU_TRY(input, r.u64("input"));
    WUHU_TRY(cached, r.u64("cached_input"));
    WUHU_TRY(output, r.u64("output"));
    WUHU_TRY(cache_write, r.opt_u64("cache_write"));
    WUHU_TRY(reasoning, r.opt_u64("reasoning"));
    return token_usage{input, cached, output, cache_write.value_or(0), reasoning.value_or(0)};
}

decoded<usage_totals> totals_at(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    WUHU_TRY(tokens, tokens_of(r));
    WUHU_TRY(cost, r.u64("cost"));
    WUHU_TRY(turns, r.u64("turns"));
    WUHU_TRY(tool_calls, r.u64("tool_calls"));
    WUHU_CHECK(r.finish());
    return usage_totals{tokens, cost, turns, tool_calls};
}

// The usage, model and cost of an entry that may have them (absent: none).
struct billing {
    token_usage usage;
    std::string model;
    std::uint64_t cost = 0;
};
decoded<billing> billing_of(object_reader& r) {
    billing b;
    if (const json::value* u = r.opt_val("usage")) {
        WUHU_TRY(ur, object_reader::open(*u, r.path("usage")));
        WUHU_TRY(tokens, tokens_of(ur));
        WUHU_CHECK(ur.finish());
        b.usage = tokens;
    }
    WUHU_TRY(model, r.opt_str("model"));
    b.model = std::string(model.value_or(""));
    WUHU_TRY(cost, r.opt_u64("cost"));
    b.cost = cost.value_or(0);
    return b;
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
        WUHU_TRY(sent_at, r.opt_i64("sent_at"));  // absent in entries stored before it
        return entry_body{party_message{std::move(who), via, std::move(item), std::move(content),
                                        unix_ms{sent_at.value_or(0)}}};
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
        WUHU_TRY(tokens, tokens_of(ur));
        WUHU_CHECK(ur.finish());
        m.usage = tokens;
        WUHU_TRY(model, r.opt_str("model"));
        m.model = std::string(model.value_or(""));
        WUHU_TRY(cost, r.opt_u64("cost"));
        m.cost = cost.value_or(0);
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
        WUHU_TRY(b, billing_of(r));
        return entry_body{compaction{std::move(summary), entry_seq{first_kept}, tokens, b.usage,
                                     std::move(b.model), b.cost}};
    }
    if (type == "interruption") {
        WUHU_TRY(reason, r.text("reason", stored_text_max));
        WUHU_TRY(kind, r.str("kind"));
        if (kind != "aborted" && kind != "owner_lost") {
            return fail(errc::invalid_entry, r.path("kind"));
        }
        interruption i{std::move(reason), kind == "aborted" ? interruption_kind::aborted
                                                            : interruption_kind::owner_lost};
        WUHU_TRY(stopped, r.opt_str("stopped"));
        if (stopped) {
            const auto stage = stage_named(*stopped);
            if (!stage || *stage == abort_stage::none) {
                return fail(errc::invalid_entry, r.path("stopped"));
            }
            i.stopped = *stage;
        }
        WUHU_TRY(abort_id, r.opt_str("abort_id"));
        if (abort_id) {
            if (!queue_item_id::valid(*abort_id)) {
                return fail(errc::invalid_entry, r.path("abort_id"));
            }
            i.abort_id = std::string(*abort_id);
        }
        return entry_body{std::move(i)};
    }
    if (type == "diagnostic") {
        WUHU_TRY(code, r.str("code"));
        WUHU_TRY(message, r.text("message", stored_text_max));
        WUHU_TRY(b, billing_of(r));
        return entry_body{
            diagnostic{std::string(code), std::move(message), b.usage, std::move(b.model), b.cost}};
    }
    if (type == "approval_requested") {
        WUHU_TRY(call, id_field<tool_call_id>(r, "call"));
        WUHU_TRY(tool, r.str("tool"));
        WUHU_TRY(arguments, r.text("arguments", stored_text_max));
        WUHU_TRY(deadline, r.opt_i64("deadline"));
        WUHU_TRY(on, decision_field(r, "on_deadline"));
        if (on == decision::respond) {
            return fail(errc::invalid_entry, r.path("on_deadline"));
        }
        return entry_body{approval_requested{std::move(call), std::string(tool),
                                             std::move(arguments), unix_ms{deadline.value_or(0)},
                                             on}};
    }
    if (type == "approval_decided") {
        WUHU_TRY(call, id_field<tool_call_id>(r, "call"));
        WUHU_TRY(tool, r.str("tool"));
        WUHU_TRY(what, decision_field(r, "decision"));
        approval_decided d{
            std::move(call), std::string(tool), what, unknown_author{}, {}, {}, false};
        WUHU_TRY(by, r.val("by"));
        WUHU_TRY(who, author_at(*by, r.path("by")));
        d.by = std::move(who);
        WUHU_TRY(text,
                 r.text(what == decision::approve ? "arguments" : "message", stored_text_max));
        (what == decision::approve ? d.arguments : d.message) = std::move(text);
        WUHU_TRY(by_deadline, r.opt_boolean("by_deadline"));
        d.by_deadline = by_deadline.value_or(false);
        return entry_body{std::move(d)};
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
    if (const auto* b = r.opt_val("budget")) {  // absent before issue 33
        WUHU_TRY(limits, budget_from_json(*b, r.path("budget")));
        s.limits = limits;
    }
    if (const auto* a = r.opt_val("approval")) {  // absent before issue 33
        WUHU_TRY(approval, approval_from_json(*a, r.path("approval")));
        s.approval = std::move(approval);
    }
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

// Dollars as nano-dollars: a decimal string ("1.5", at most nine decimals) or a number, from 0
// to a billion.
decoded<std::uint64_t> dollars_at(const json::value& v, const std::string& path) {
    if (v.is_string()) {
        const std::string_view s = v.get_string();
        const auto dot = s.find('.');
        const auto whole = s.substr(0, dot);
        const auto frac = dot == std::string_view::npos ? std::string_view{} : s.substr(dot + 1);
        auto digits = [](std::string_view d) {
            return std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
        };
        if (whole.empty() || whole.size() > 10 || frac.size() > 9 || !digits(whole) ||
            !digits(frac) || (dot != std::string_view::npos && frac.empty())) {
            return fail(errc::invalid_settings, path);
        }
        std::uint64_t nano = std::stoull(std::string(whole)) * 1'000'000'000;
        std::string f(frac);
        f.append(9 - f.size(), '0');
        nano += std::stoull(f);
        if (nano > 1'000'000'000'000'000'000ULL) {
            return fail(errc::invalid_settings, path);
        }
        return nano;
    }
    if (v.is_number()) {
        const double d = v.to_number<double>();
        if (!(d >= 0) || d > 1e9) {
            return fail(errc::invalid_settings, path);
        }
        return static_cast<std::uint64_t>(std::llround(d * 1e9));
    }
    return fail(errc::invalid_type, path);
}

decoded<status> status_at(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    WUHU_TRY(state, r.str("state"));
    WUHU_TRY(paused, r.boolean("paused"));
    WUHU_TRY(has_work, r.boolean("has_work"));
    WUHU_TRY(epoch, r.opt_u64("epoch"));
    WUHU_TRY(seq, r.opt_u64("seq"));
    usage_totals usage;  // absent before issue 33
    if (const auto* u = r.opt_val("usage")) {
        WUHU_TRY(totals, totals_at(*u, r.path("usage")));
        usage = totals;
    }
    WUHU_CHECK(r.finish());
    for (auto ls : {loop_state::idle, loop_state::preparing, loop_state::inferring,
                    loop_state::executing_tools, loop_state::compacting}) {
        if (loop_state_name(ls) == state) {
            return status{ls, paused, has_work, epoch.value_or(0), seq.value_or(0), usage};
        }
    }
    return fail(errc::invalid_type, r.path("state"));
}

}  // namespace

decoded<settings> settings_from_json(const json::value& v) {
    return settings_at(v, "");
}

decoded<approval_settings> approval_from_json(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    approval_settings a;
    if (const auto* t = r.opt_val("tools")) {
        if (!t->is_object()) {
            return fail(errc::invalid_type, r.path("tools"));
        }
        for (const auto& [name, mode] : t->as_object()) {
            const auto at = detail::join(r.path("tools"), name);
            if (!mode.is_string()) {
                return fail(errc::invalid_type, at);
            }
            const auto m = approval_mode_named(mode.get_string());
            if (!m) {
                return fail(errc::invalid_settings, at);
            }
            a.tools[std::string(name)] = *m;
        }
    }
    WUHU_TRY(deadline, r.opt_u64("deadline_ms"));
    a.deadline_ms = deadline.value_or(0);
    WUHU_TRY(on, r.opt_str("on_deadline"));
    if (on) {
        const auto d = decision_named(*on);
        if (!d || *d == decision::respond) {
            return fail(errc::invalid_settings, r.path("on_deadline"));
        }
        a.on_deadline = *d;
    }
    WUHU_CHECK(r.finish());
    return a;
}

decoded<budget> budget_from_json(const json::value& v, const std::string& path) {
    WUHU_TRY(r, object_reader::open(v, path));
    budget b;
    WUHU_TRY(tokens, r.opt_u64("tokens"));
    b.tokens = tokens.value_or(0);
    if (const auto* c = r.opt_val("cost_usd")) {
        WUHU_TRY(cost, dollars_at(*c, r.path("cost_usd")));
        b.cost = cost;
    }
    WUHU_TRY(turns, r.opt_u64("turns"));
    b.turns = turns.value_or(0);
    WUHU_TRY(calls, r.opt_u64("tool_calls"));
    b.tool_calls = calls.value_or(0);
    WUHU_TRY(soft, r.opt_u64("soft_percent"));
    if (soft && *soft > 100) {
        return fail(errc::invalid_settings, r.path("soft_percent"));
    }
    b.soft_percent = static_cast<std::uint32_t>(soft.value_or(0));
    WUHU_CHECK(r.finish());
    return b;
}
decoded<status> status_from_json(const json::value& v) {
    return status_at(v, "");
}
decoded<usage_totals> usage_totals_from_json(const json::value& v) {
    return totals_at(v, "");
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
