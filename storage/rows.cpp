#include "storage/rows.hpp"

#include "session/codec.hpp"
#include "session/reducer.hpp"

#include <charconv>

namespace wuhu::storage {

namespace s = wuhu::session;
namespace json = boost::json;

void state_builder::corrupt(std::string why) {
    if (error_.empty()) {
        error_ = std::move(why);
    }
}

void state_builder::entry(std::string_view text) {
    entry(parse_row(text));
}

void state_builder::entry(const json::value& v) {
    if (!error_.empty()) {
        return;
    }
    auto e = s::entry_from_json(v);
    if (!e || e->id.value != state_.transcript.size() + 1) {
        return corrupt("transcript entry " + std::to_string(state_.transcript.size() + 1));
    }
    s::apply_actions(s::action{s::entry_appended{std::move(*e)}}, state_);
}

void state_builder::fact(s::lane l, std::string_view text) {
    fact(l, parse_row(text));
}

void state_builder::fact(s::lane l, const json::value& v) {
    if (!error_.empty()) {
        return;
    }
    auto j = s::journal_entry_from_json(v);
    const auto& lane = state_.in(l);
    if (!j || j->seq.value != lane.journal.size() + 1) {
        return corrupt("journal fact " + std::to_string(lane.journal.size() + 1));
    }
    // The reducer asserts these; stored data is checked instead.
    const s::item_record* rec = state_.find_item(j->item_id().str());
    const bool enqueue = std::holds_alternative<s::enqueued_fact>(j->fact);
    const auto* ended = std::get_if<s::unscheduled_fact>(&j->fact);
    const bool timer = ended != nullptr || std::holds_alternative<s::scheduled_fact>(j->fact);
    // A timer's facts: scheduled, and canceled, with no item of its id; fired, after its item.
    const bool has_item = ended != nullptr && ended->fired;
    if (timer ? ((rec != nullptr) != has_item || l != s::lane::system)
        : enqueue
            ? (rec != nullptr || std::get<s::enqueued_fact>(j->fact).item.in != l)
            : (rec == nullptr || rec->status != s::item_status::pending || rec->in != l)) {
        return corrupt("journal fact " + std::to_string(j->seq.value) + " of an unknown item");
    }
    s::apply_actions(s::action{s::journal_recorded{l, std::move(*j)}}, state_);
}

void state_builder::timer(std::string_view text) {
    if (!error_.empty()) {
        return;
    }
    auto t = s::timer_from_json(parse_row(text));
    // (Timer rows load after the journal: an id that is an item is known by now.)
    if (!t || state_.timers.contains(t->id.str()) || state_.find_item(t->id.str()) != nullptr) {
        return corrupt("timer");
    }
    s::apply_actions(s::action{s::timer_scheduled{std::move(*t)}}, state_);
}

void state_builder::registers(std::string_view settings_json, bool paused, bool has_work) {
    if (!error_.empty()) {
        return;
    }
    if (!settings_json.empty()) {
        auto cfg = s::settings_from_json(parse_row(settings_json));
        if (!cfg) {
            return corrupt("settings");
        }
        state_.config = std::move(*cfg);
    }
    state_.paused = paused;
    state_.has_work = has_work;
}

boost::system::result<s::session_state> state_builder::finish() {
    if (!error_.empty()) {
        return errc::corrupt;
    }
    return std::move(state_);
}

boost::system::result<s::patch> patch_from_rows(const s::version_vector& from,
                                                const s::version_vector& to,
                                                const patch_rows& rows) {
    if (!from.le(to)) {
        return s::errc::invalid_version;
    }
    s::patch p;
    p.from = from;
    p.to = to;
    for (const auto& v : rows.entries) {
        auto e = s::entry_from_json(v);
        if (!e) {
            return errc::corrupt;
        }
        p.transcript.push_back(std::move(*e));
    }
    for (s::lane l : s::all_lanes) {
        for (const auto& v : rows.facts[s::index_of(l)]) {
            auto j = s::journal_entry_from_json(v);
            if (!j) {
                return errc::corrupt;
            }
            p.journal[s::index_of(l)].push_back(std::move(*j));
        }
    }
    s::settings cfg;
    if (!rows.settings_json.empty()) {
        auto d = s::settings_from_json(parse_row(rows.settings_json));
        if (!d) {
            return errc::corrupt;
        }
        cfg = std::move(*d);
    }
    p.config = std::move(cfg);
    s::usage_totals usage;
    if (!rows.usage_json.empty()) {
        auto d = s::usage_totals_from_json(parse_row(rows.usage_json));
        if (!d) {
            return errc::corrupt;
        }
        usage = *d;
    }
    p.state = s::status{s::loop_state::idle, rows.paused, rows.has_work, 0, 0, usage};
    s::coalesce(p);
    return p;
}

json::value parse_row(std::string_view text) {
    auto v = s::parse_json(text);
    return v ? std::move(*v) : json::value{};
}

std::string encode_version(const s::version_vector& v) {
    return std::to_string(v.transcript) + "," + std::to_string(v.system) + "," +
           std::to_string(v.steer) + "," + std::to_string(v.follow_up);
}

boost::system::result<s::version_vector> decode_version(std::string_view text) {
    std::uint64_t parts[4] = {};
    const char* p = text.data();
    const char* end = text.data() + text.size();
    for (int i = 0; i < 4; ++i) {
        auto [next, ec] = std::from_chars(p, end, parts[i]);
        if (ec != std::errc{} || (i < 3 && (next == end || *next != ',')) ||
            (i == 3 && next != end)) {
            return errc::corrupt;
        }
        p = next + 1;
    }
    return s::version_vector{parts[0], parts[1], parts[2], parts[3]};
}

std::string encode_settings(const s::settings& cfg) {
    return json::serialize(s::to_json(cfg));
}

}  // namespace wuhu::storage
