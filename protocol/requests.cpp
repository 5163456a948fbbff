#include "protocol/requests.hpp"

#include "session/json_reader.hpp"

#include <algorithm>

namespace wuhu::protocol {

namespace json = boost::json;
using namespace wuhu::session;
using session::detail::fail;
using session::detail::object_reader;

namespace {

decoded<std::optional<queue_item_id>> opt_item_id(object_reader& r) {
    WUHU_TRY(s, r.opt_str("id"));
    if (!s) {
        return std::optional<queue_item_id>{};
    }
    auto id = queue_item_id::parse(*s);
    if (!id) {
        return fail(errc::invalid_item_id, r.path("id"));
    }
    return std::optional<queue_item_id>{std::move(*id)};
}

}  // namespace

decoded<json::value> parse_body(std::string_view raw, const request_limits& limits) {
    if (raw.size() > limits.max_request_bytes) {
        return fail(errc::content_too_large, "");
    }
    if (raw.find_first_not_of(" \t\r\n") == std::string_view::npos) {
        return json::value(json::object{});
    }
    WUHU_TRY(v, parse_json(raw));
    if (!v.is_object()) {
        return fail(errc::invalid_type, "");
    }
    return v;
}

decoded<enqueue_request> decode_enqueue(const json::value& body, const request_limits& limits) {
    WUHU_TRY(r, object_reader::open(body, ""));
    enqueue_request out;
    WUHU_TRY(l, r.str("lane"));
    auto in = parse_lane(l);
    if (!in || *in == lane::system) {
        return fail(errc::invalid_lane, "lane");
    }
    out.in = *in;
    WUHU_TRY(id, opt_item_id(r));
    out.id = std::move(id);
    if (const json::value* a = r.opt_val("author")) {
        WUHU_TRY(who, author_from_json(*a, "author"));
        if (std::holds_alternative<system_author>(who)) {
            return fail(errc::invalid_author, "author.kind");
        }
        out.from = std::move(who);
    }
    WUHU_TRY(content, r.text("content", limits.max_content_bytes));
    out.content = std::move(content);
    WUHU_CHECK(r.finish());
    return out;
}

decoded<cancel_request> decode_cancel(const json::value& body) {
    WUHU_TRY(r, object_reader::open(body, ""));
    WUHU_TRY(l, r.str("lane"));
    auto in = parse_lane(l);
    if (!in) {
        return fail(errc::invalid_lane, "lane");
    }
    WUHU_TRY(id, opt_item_id(r));
    if (!id) {
        return fail(errc::missing_field, "id");
    }
    WUHU_CHECK(r.finish());
    return cancel_request{*in, std::move(*id)};
}

decoded<system_request> decode_system(const json::value& body, const request_limits& limits) {
    WUHU_TRY(r, object_reader::open(body, ""));
    WUHU_TRY(id, opt_item_id(r));
    WUHU_TRY(src, r.str("source"));
    auto source = system_source::parse(src);
    if (!source) {
        return fail(errc::invalid_source, "source");
    }
    WUHU_TRY(content, r.text("content", limits.max_content_bytes));
    WUHU_CHECK(r.finish());
    return system_request{std::move(id), std::move(*source), std::move(content)};
}

decoded<subscribe_request> decode_subscribe(const json::value& body) {
    WUHU_TRY(r, object_reader::open(body, ""));
    subscribe_request out;
    if (const json::value* since = r.opt_val("since")) {
        WUHU_TRY(v, version_from_json(*since));
        out.since = v;
    }
    WUHU_CHECK(r.finish());
    return out;
}

decoded<settings_update> decode_configure(const json::value& body, const request_limits& limits) {
    WUHU_TRY(r, object_reader::open(body, ""));
    settings_update out;
    WUHU_TRY(model, r.opt_str("model"));
    if (model) {
        out.model = std::string(*model);
    }
    if (r.opt_val("system_prompt") != nullptr) {
        WUHU_TRY(prompt, r.text("system_prompt", limits.max_content_bytes));
        out.system_prompt = std::move(prompt);
    }
    if (r.opt_val("tools") != nullptr) {
        WUHU_TRY(tools, r.arr("tools"));
        std::vector<std::string> names;
        for (std::size_t i = 0; i < tools->size(); ++i) {
            if (!(*tools)[i].is_string()) {
                return fail(errc::invalid_type, "tools." + std::to_string(i));
            }
            const std::string_view name = (*tools)[i].get_string();
            if (!is_valid_utf8(name)) {
                return fail(errc::invalid_utf8, "tools." + std::to_string(i));
            }
            if (name.find('\0') != std::string_view::npos) {
                return fail(errc::invalid_content, "tools." + std::to_string(i));
            }
            names.emplace_back(name);
        }
        out.tools = std::move(names);
    }
    WUHU_TRY(limit, r.opt_u64("context_limit"));
    out.context_limit = limit;
    WUHU_TRY(buffer, r.opt_u64("compaction_buffer"));
    out.compaction_buffer = buffer;
    WUHU_TRY(keep, r.opt_u64("keep_recent_tokens"));
    out.keep_recent_tokens = keep;
    WUHU_TRY(offset, r.opt_i64("utc_offset_minutes"));
    if (offset) {
        if (*offset < -14 * 60 || *offset > 14 * 60) {
            return fail(errc::invalid_settings, "utc_offset_minutes");
        }
        out.utc_offset_minutes = static_cast<int>(*offset);
    }
    if (const auto* b = r.opt_val("budget")) {
        WUHU_TRY(limits, budget_from_json(*b, "budget"));
        out.limits = limits;
    }
    if (const auto* a = r.opt_val("approval")) {
        WUHU_TRY(approval, approval_from_json(*a, "approval"));
        out.approval = std::move(approval);
    }
    WUHU_CHECK(r.finish());
    return out;
}

decoded<abort_request> decode_abort(const json::value& body) {
    WUHU_TRY(r, object_reader::open(body, ""));
    abort_request out;
    if (r.opt_val("reason") != nullptr) {
        WUHU_TRY(reason, r.text("reason", 4096));
        out.reason = std::move(reason);
    }
    WUHU_TRY(id, opt_item_id(r));
    if (id) {
        out.id = id->str();
    }
    WUHU_CHECK(r.finish());
    return out;
}

decoded<sessions_query> decode_sessions_query(const json::value& body, session_names names) {
    auto name = [names](std::string_view s) {
        return names == session_names::keys ? session_id::parse_key(s) : session_id::parse(s);
    };
    WUHU_TRY(r, object_reader::open(body, ""));
    sessions_query q;
    WUHU_TRY(state, r.opt_str("state"));
    if (state) {
        if (std::find(session_row_states.begin(), session_row_states.end(), *state) ==
            session_row_states.end()) {
            return fail(errc::invalid_query, "state");
        }
        q.state = std::string(*state);
    }
    WUHU_TRY(has_work, r.opt_boolean("has_work"));
    q.has_work = has_work;
    WUHU_TRY(owner, r.opt_str("owner"));
    if (owner) {
        // A worker id: it becomes a token of the subject the owner is asked on.
        if (!valid_worker_id(*owner)) {
            return fail(errc::invalid_query, "owner");
        }
        q.owner = std::string(*owner);
    }
    WUHU_TRY(limit, r.opt_u64("limit"));
    if (limit) {
        if (*limit < 1 || *limit > 1000) {
            return fail(errc::invalid_query, "limit");
        }
        q.limit = static_cast<std::size_t>(*limit);
    }
    WUHU_TRY(after, r.opt_str("after"));
    if (after) {
        auto id = name(*after);
        if (!id) {
            return fail(errc::invalid_session_id, "after");
        }
        q.after = std::move(*id);
    }
    if (const auto* ids = r.opt_val("ids"); ids != nullptr && !ids->is_null()) {
        if (!ids->is_array()) {
            return fail(errc::invalid_type, "ids");
        }
        if (ids->as_array().empty() || ids->as_array().size() > 1000) {
            return fail(errc::invalid_query, "ids");
        }
        q.ids.emplace();
        for (const auto& v : ids->as_array()) {
            auto id = v.is_string() ? name(v.as_string()) : session_id::parse("");
            if (!id) {
                return fail(errc::invalid_session_id, "ids");
            }
            q.ids->push_back(std::move(*id));
        }
    }
    WUHU_TRY(tenant, r.opt_str("tenant"));
    if (tenant) {
        if (!valid_tenant(*tenant)) {
            return fail(errc::invalid_tenant, "tenant");
        }
        q.tenant = std::string(*tenant);
    }
    WUHU_TRY(awaiting, r.opt_boolean("awaiting_approval"));
    q.awaiting_approval = awaiting;
    WUHU_TRY(order, r.opt_str("order"));
    if (order && *order != "id" && *order != "cost") {
        return fail(errc::invalid_query, "order");
    }
    q.by_cost = order && *order == "cost";
    WUHU_TRY(after_cost, r.opt_u64("after_cost"));
    if (after_cost && !q.by_cost) {
        return fail(errc::invalid_query, "after_cost");  // a cursor of the cost order only
    }
    q.after_cost = after_cost;
    if (q.by_cost && (q.owner || (q.state && q.state != "unloaded" && q.state != "unowned" &&
                                  q.state != "unreachable"))) {
        return fail(errc::invalid_query, "order");  // the index's order: no owner's own page
    }
    WUHU_CHECK(r.finish());
    return q;
}

decoded<decide_request> decode_decide(decision what, const json::value& body,
                                      const request_limits& limits) {
    WUHU_TRY(r, object_reader::open(body, ""));
    WUHU_TRY(call, r.str("call"));
    auto id = tool_call_id::parse(call);
    if (!id) {
        return fail(errc::invalid_tool_call_id, "call");
    }
    decide_request out{decision_input{std::move(*id), what, unknown_author{}, std::nullopt, {}}};
    if (const auto* a = r.opt_val("author")) {
        WUHU_TRY(who, author_from_json(*a, "author"));
        if (std::holds_alternative<system_author>(who)) {
            return fail(errc::invalid_author, "author");  // the deadline's, not a client's
        }
        out.in.by = std::move(who);
    }
    switch (what) {
        case decision::approve:
            if (const auto* a = r.opt_val("arguments")) {
                if (!a->is_object()) {
                    return fail(errc::invalid_type, "arguments");
                }
                auto text = json::serialize(*a);
                if (text.size() > limits.max_content_bytes) {
                    return fail(errc::content_too_large, "arguments");
                }
                out.in.arguments = std::move(text);
            }
            break;
        case decision::reject:
            if (r.opt_val("message") != nullptr) {
                WUHU_TRY(message, r.text("message", limits.max_content_bytes));
                out.in.message = std::move(message);
            }
            break;
        case decision::respond: {
            WUHU_TRY(output, r.text("output", limits.max_content_bytes));
            out.in.message = std::move(output);
            break;
        }
    }
    WUHU_CHECK(r.finish());
    return out;
}

decoded<std::map<std::string, budget, std::less<>>> decode_tenant_budgets(const json::value& file) {
    if (!file.is_object()) {
        return fail(errc::invalid_type, "");
    }
    std::map<std::string, budget, std::less<>> out;
    for (const auto& [tenant, b] : file.as_object()) {
        if (!valid_tenant(tenant)) {
            return fail(errc::invalid_tenant, tenant);
        }
        WUHU_TRY(limits, budget_from_json(b, std::string(tenant)));
        out[std::string(tenant)] = limits;
    }
    return out;
}

decoded<void> decode_empty(const json::value& body) {
    WUHU_TRY(r, object_reader::open(body, ""));
    return r.finish();
}

decoded<request> decode_request(std::string_view subject, const subject_layout& layout,
                                std::string_view raw, const request_limits& limits,
                                const std::function<queue_item_id()>& new_id) {
    return decode_request(layout.parse_request(subject), raw, limits, new_id);
}

decoded<request> decode_request(session::result<route> to, std::string_view raw,
                                const request_limits& limits,
                                const std::function<queue_item_id()>& new_id) {
    if (!to) {
        return decode_error{static_cast<errc>(to.error().value()), ""};
    }
    WUHU_TRY(body, parse_body(raw, limits));
    const verb v = to->what;
    auto made = [&](request_body b) { return request{std::move(*to), std::move(b)}; };
    switch (v) {
        case verb::enqueue: {
            WUHU_TRY(r, decode_enqueue(body, limits));
            return made(enqueue_input{r.in, r.id ? std::move(*r.id) : new_id(),
                                      user_input{std::move(r.from), std::move(r.content)}});
        }
        case verb::system: {
            WUHU_TRY(r, decode_system(body, limits));
            return made(enqueue_input{lane::system, r.id ? std::move(*r.id) : new_id(),
                                      system_input{std::move(r.source), std::move(r.content)}});
        }
        case verb::cancel: {
            WUHU_TRY(r, decode_cancel(body));
            return made(std::move(r));
        }
        case verb::configure: {
            WUHU_TRY(r, decode_configure(body, limits));
            return made(std::move(r));
        }
        case verb::abort: {
            WUHU_TRY(r, decode_abort(body));
            return made(std::move(r));
        }
        case verb::subscribe: {
            WUHU_TRY(r, decode_subscribe(body));
            return made(std::move(r));
        }
        case verb::approve:
        case verb::reject:
        case verb::respond: {
            const decision what = v == verb::approve  ? decision::approve
                                  : v == verb::reject ? decision::reject
                                                      : decision::respond;
            WUHU_TRY(r, decode_decide(what, body, limits));
            return made(std::move(r));
        }
        case verb::pause:
        case verb::resume:
        case verb::remove:
            break;
    }
    WUHU_CHECK(decode_empty(body));
    if (v == verb::pause) {
        return made(pause_request{});
    }
    if (v == verb::resume) {
        return made(resume_request{});
    }
    return made(remove_request{});
}

}  // namespace wuhu::protocol
