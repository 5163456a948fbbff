#include "session/patch.hpp"

#include "session/approval.hpp"

#include "session/assert.hpp"
#include "session/overloaded.hpp"

#include <set>
#include <string>

namespace wuhu::session {

bool patch::empty() const {
    if (!transcript.empty() || config || state) {
        return false;
    }
    for (const auto& j : journal) {
        if (!j.empty()) {
            return false;
        }
    }
    return true;
}

void coalesce(patch& p) {
    for (auto& facts : p.journal) {
        std::set<std::string> enqueued;     // items enqueued
        std::set<std::string> done;         // items canceled or materialized
        std::set<std::string> scheduled;    // timers scheduled
        std::set<std::string> unscheduled;  // timers that fired or were canceled
        for (const auto& j : facts) {
            const auto& id = j.item_id().str();
            std::visit(overloaded{
                           [&](const enqueued_fact&) { enqueued.insert(id); },
                           [&](const scheduled_fact&) { scheduled.insert(id); },
                           [&](const unscheduled_fact&) { unscheduled.insert(id); },
                           [&](const auto&) { done.insert(id); },
                       },
                       j.fact);
        }
        // An item enqueued and done within the window, and a timer scheduled and ended within
        // it, leave nothing a client needs.
        std::erase_if(facts, [&](const journal_entry& j) {
            const auto& id = j.item_id().str();
            return std::visit(overloaded{
                                  [&](const scheduled_fact&) { return unscheduled.contains(id); },
                                  [&](const unscheduled_fact&) { return scheduled.contains(id); },
                                  [&](const auto&) {
                                      return enqueued.contains(id) && done.contains(id);
                                  },
                              },
                              j.fact);
        });
    }
}

result<patch> between(const session_state& s, const version_vector& from, const version_vector& to,
                      loop_state loop) {
    if (!from.le(to) || !to.le(s.version())) {
        return errc::invalid_version;
    }
    patch p;
    p.from = from;
    p.to = to;
    p.transcript.assign(s.transcript.begin() + static_cast<std::ptrdiff_t>(from.transcript),
                        s.transcript.begin() + static_cast<std::ptrdiff_t>(to.transcript));
    for (lane l : all_lanes) {
        const auto& j = s.in(l).journal;
        p.journal[index_of(l)].assign(j.begin() + static_cast<std::ptrdiff_t>(from.of(l)),
                                      j.begin() + static_cast<std::ptrdiff_t>(to.of(l)));
    }
    p.config = s.config;
    p.state = status_of(s, loop);
    coalesce(p);
    return p;
}

namespace {

// About the bytes an entry or a fact takes on the wire: its texts, and an overhead for the
// rest of its fields.
template <class T>
std::size_t text_bytes(const T& x) {
    std::size_t n = 96;
    if constexpr (requires { x.content; }) {
        n += x.content.size();
    }
    if constexpr (requires { x.text; }) {
        n += x.text.size();
    }
    if constexpr (requires { x.output; }) {
        n += x.output.size();
    }
    if constexpr (requires { x.summary; }) {
        n += x.summary.size();
    }
    if constexpr (requires { x.message; }) {
        n += x.message.size();
    }
    if constexpr (requires { x.tool_calls; }) {
        for (const auto& c : x.tool_calls) {
            n += 64 + c.name.size() + c.arguments.size();
        }
    }
    return n;
}

std::size_t wire_bytes(const entry& e) {
    return std::visit([](const auto& b) { return text_bytes(b); }, e.body);
}

std::size_t wire_bytes(const journal_entry& j) {
    if (const auto* f = std::get_if<enqueued_fact>(&j.fact)) {
        return std::visit([](const auto& p) { return text_bytes(p); }, f->item.payload);
    }
    return 64;
}

}  // namespace

version_vector page_end(const session_state& s, const version_vector& from, std::size_t max_items,
                        std::size_t max_bytes) {
    const version_vector current = s.version();
    version_vector to = from;
    std::size_t items = 0;
    std::size_t bytes = 0;
    auto room = [&] { return items == 0 || (items < max_items && bytes < max_bytes); };
    while (to.transcript < current.transcript && room()) {
        bytes += wire_bytes(s.transcript[to.transcript]);
        ++to.transcript;
        ++items;
    }
    if (to.transcript < current.transcript) {
        return to;  // the lanes come once the transcript is whole
    }
    for (lane l : all_lanes) {
        const auto& journal = s.in(l).journal;
        while (to.of(l) < current.of(l) && room()) {
            bytes += wire_bytes(journal[to.of(l)]);
            ++to.of(l);
            ++items;
        }
    }
    return to;
}

result<patch> since(const session_state& s, const version_vector& from, loop_state loop) {
    return between(s, from, s.version(), loop);
}

patch patch_of(const version_vector& from, const action_list& actions, const session_state& after,
               loop_state loop) {
    patch p;
    p.from = from;
    p.to = from;
    bool status_changed = false;
    for (const auto& a : actions) {
        std::visit(overloaded{
                       [&](const entry_appended& x) {
                           p.transcript.push_back(x.e);
                           p.to.transcript = x.e.id.value;
                           status_changed = status_changed || counts(x.e.body);  // the ledger
                       },
                       [&](const journal_recorded& x) {
                           p.journal[index_of(x.in)].push_back(x.j);
                           p.to.of(x.in) = x.j.seq.value;
                       },
                       [&](const settings_set&) { p.config = after.config; },
                       [&](const has_work_set&) { status_changed = true; },
                       [&](const paused_set&) { status_changed = true; },
                       [](const timer_scheduled&) {},
                       [](const timer_cleared&) {},
                   },
                   a);
    }
    if (status_changed) {
        p.state = status_of(after, loop);
    }
    coalesce(p);
    return p;
}

status status_of(const session_state& s, loop_state loop) {
    // A session nobody runs (idle) whose calls wait for a person says so, loaded or not.
    if (loop == loop_state::idle && !s.paused && awaiting_approval(s)) {
        loop = loop_state::awaiting_approval;
    }
    return status{loop, s.paused, s.has_work, 0, 0, s.usage};
}

patch status_patch(const session_state& s, loop_state loop) {
    patch p;
    p.from = s.version();
    p.to = p.from;
    p.state = status_of(s, loop);
    return p;
}

version_vector advance(version_vector v, const action_list& actions) {
    for (const auto& a : actions) {
        if (const auto* e = std::get_if<entry_appended>(&a)) {
            v.transcript = e->e.id.value;
        } else if (const auto* j = std::get_if<journal_recorded>(&a)) {
            v.of(j->in) = j->j.seq.value;
        }
    }
    return v;
}

patch compose(const patch& a, const patch& b) {
    WUHU_ASSERT(a.to == b.from, "composed patches chain");
    patch p = a;
    p.to = b.to;
    p.transcript.insert(p.transcript.end(), b.transcript.begin(), b.transcript.end());
    for (std::size_t i = 0; i < p.journal.size(); ++i) {
        p.journal[i].insert(p.journal[i].end(), b.journal[i].begin(), b.journal[i].end());
    }
    if (b.config) {
        p.config = b.config;
    }
    if (b.state) {
        p.state = b.state;
    }
    coalesce(p);
    return p;
}

}  // namespace wuhu::session
