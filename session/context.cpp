#include "session/context.hpp"

#include "session/assert.hpp"
#include "session/overloaded.hpp"
#include "session/text.hpp"

#include <algorithm>

namespace wuhu::session {

std::string_view role_name(llm_role r) {
    switch (r) {
        case llm_role::system:
            return "system";
        case llm_role::developer:
            return "developer";
        case llm_role::user:
            return "user";
        case llm_role::assistant:
            return "assistant";
        case llm_role::tool:
            return "tool";
    }
    return "user";
}

llm_message to_llm_message(const entry& e, const role_mapping& roles, int utc_offset_minutes) {
    llm_message m;
    m.source = e.id;
    std::visit(
        overloaded{
            [&](const party_message& p) {
                m.role = roles.party;
                std::string name = "unknown";
                std::string email;
                if (const auto* who = std::get_if<participant>(&p.from)) {
                    name = who->name;
                    email = who->email;
                }
                // When the party sent it, not when it joined the transcript (a steer sent
                // during a long tool joins after the tool: docs/decisions.md).
                const unix_ms sent = p.sent_at.value != 0 ? p.sent_at : e.at;
                m.content =
                    with_header(format_header(name, email, sent, utc_offset_minutes), p.content);
            },
            [&](const system_message& x) {
                m.role = roles.system_lane;
                m.content = with_header(
                    format_header(system_header_name, {}, e.at, utc_offset_minutes), x.content);
            },
            [&](const assistant_message& a) {
                m.role = llm_role::assistant;
                m.content = a.text;
                m.tool_calls = a.tool_calls;
            },
            [&](const tool_result& r) {
                m.role = llm_role::tool;
                m.content = r.output;
                m.tool_call_id = r.call.str();
                m.tool_name = r.tool;
                m.is_error = r.is_error;
            },
            [](const auto&) { WUHU_ASSERT(false, "only message entries are projected"); },
        },
        e.body);
    return m;
}

namespace {
llm_message text_message(llm_role role, std::string content) {
    llm_message m;
    m.role = role;
    m.content = std::move(content);
    return m;
}
}  // namespace

std::vector<llm_message> project_context(const session_state& s, const role_mapping& roles) {
    std::vector<llm_message> out;
    if (!s.config.system_prompt.empty()) {
        out.push_back(text_message(llm_role::system, s.config.system_prompt));
    }
    std::uint64_t first_kept = 1;
    for (const entry& e : s.transcript) {
        if (const auto* c = std::get_if<compaction>(&e.body)) {
            out.push_back(text_message(roles.party, std::string(summary_preamble) + c->summary));
            first_kept = c->first_kept.value;
        }
    }
    for (std::uint64_t id = first_kept; id <= s.transcript.size(); ++id) {
        const entry& e = s.transcript[id - 1];
        if (is_message(e.body)) {
            out.push_back(to_llm_message(e, roles, s.config.utc_offset_minutes));
        }
    }
    in_call_order(out);
    return out;
}

void in_call_order(std::vector<llm_message>& ms) {
    // A call that waited for a person gets its result after the calls run meanwhile: each
    // response's results go to the model in the order of its calls.
    for (std::size_t i = 0; i < ms.size(); ++i) {
        const auto& calls = ms[i].tool_calls;
        if (ms[i].role != llm_role::assistant || calls.size() < 2) {
            continue;
        }
        std::size_t end = i + 1;
        while (end < ms.size() && ms[end].role == llm_role::tool) {
            ++end;
        }
        auto rank = [&](const llm_message& m) {
            std::size_t k = 0;
            while (k < calls.size() && calls[k].id.str() != m.tool_call_id) {
                ++k;
            }
            return k;
        };
        std::stable_sort(
            ms.begin() + static_cast<std::ptrdiff_t>(i + 1),
            ms.begin() + static_cast<std::ptrdiff_t>(end),
            [&](const llm_message& a, const llm_message& b) { return rank(a) < rank(b); });
        i = end - 1;
    }
}

std::uint64_t estimate_tokens(const llm_message& m) {
    std::uint64_t n = estimate_tokens(m.content) + 4;
    for (const auto& c : m.tool_calls) {
        n += estimate_tokens(c.name) + estimate_tokens(c.arguments) + 4;
    }
    return n;
}

std::uint64_t estimate_tokens(const std::vector<llm_message>& ms) {
    std::uint64_t n = 0;
    for (const auto& m : ms) {
        n += estimate_tokens(m);
    }
    return n;
}

}  // namespace wuhu::session
