#include "session/compaction.hpp"

namespace wuhu::session {

bool should_compact(const token_usage& usage, const settings& config) {
    return usage.total() + config.compaction_buffer > config.context_limit;
}

namespace {

bool valid_cut(const entry& e) {
    return std::holds_alternative<party_message>(e.body) ||
           std::holds_alternative<system_message>(e.body) ||
           std::holds_alternative<assistant_message>(e.body);
}

}  // namespace

result<compaction_plan> plan_compaction(const session_state& s, const role_mapping& roles,
                                        entry_seq upto) {
    const std::uint64_t last = upto.value != 0 ? upto.value : s.transcript.size();
    std::uint64_t begin = 1;
    if (const entry* prev = s.last_compaction()) {
        begin = std::get<compaction>(prev->body).first_kept.value;
    }
    // The message entries of the current context, oldest first.
    std::vector<const entry*> live;
    for (std::uint64_t id = begin; id <= last; ++id) {
        if (is_message(s.transcript[id - 1].body)) {
            live.push_back(&s.transcript[id - 1]);
        }
    }
    const int offset = s.config.utc_offset_minutes;
    std::size_t cut = live.size();
    std::uint64_t kept = 0;
    for (std::size_t i = live.size(); i-- > 0;) {
        kept += estimate_tokens(to_llm_message(*live[i], roles, offset));
        if (kept >= s.config.keep_recent_tokens) {
            cut = i;
            break;
        }
    }
    if (cut == live.size()) {
        return errc::nothing_to_compact;  // everything fits in the keep-recent budget
    }
    std::size_t valid = cut;
    while (valid < live.size() && !valid_cut(*live[valid])) {
        ++valid;
    }
    if (valid == live.size()) {
        valid = cut;
        while (valid > 0 && !valid_cut(*live[valid])) {
            --valid;
        }
    }
    if (valid == 0 || !valid_cut(*live[valid])) {
        return errc::nothing_to_compact;
    }
    compaction_plan plan;
    plan.segment_begin = live.front()->id;
    plan.first_kept = live[valid]->id;
    for (const auto& m : project_context(s, roles)) {
        if (m.source.value <= last) {
            plan.tokens_before += estimate_tokens(m);
        }
    }
    for (std::size_t i = 0; i < valid; ++i) {
        plan.segment.push_back(to_llm_message(*live[i], roles, offset));
    }
    return plan;
}

result<void> check_fits(const session_state& s, const role_mapping& roles) {
    return check_fits(project_context(s, roles), s.config);
}

result<void> check_fits(const std::vector<llm_message>& context, const settings& config) {
    if (estimate_tokens(context) > config.context_limit) {
        return errc::input_too_large;
    }
    return {};
}

}  // namespace wuhu::session
