#include "session/patch.hpp"

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
        std::set<std::string> enqueued;
        std::set<std::string> done;
        for (const auto& j : facts) {
            if (std::holds_alternative<enqueued_fact>(j.fact)) {
                enqueued.insert(j.item_id().str());
            } else {
                done.insert(j.item_id().str());
            }
        }
        std::erase_if(facts, [&](const journal_entry& j) {
            const auto& id = j.item_id().str();
            return enqueued.contains(id) && done.contains(id);
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
    p.state = status{loop, s.paused, s.has_work};
    coalesce(p);
    return p;
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
        p.state = status{loop, after.paused, after.has_work};
    }
    coalesce(p);
    return p;
}

patch status_patch(const session_state& s, loop_state loop) {
    patch p;
    p.from = s.version();
    p.to = p.from;
    p.state = status{loop, s.paused, s.has_work};
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
