// Stable patches: what moves a client from one version vector to another.
//
// A patch carries the transcript entries and the journal facts in the window (from, to], plus
// the settings and status registers (always their latest value). Journal facts of an item that
// was enqueued and then materialized or canceled inside the window are coalesced away: the
// client sees the transcript entry (or nothing), never already-processed work as pending.
#pragma once

#include "session/action.hpp"
#include "session/state.hpp"

#include <array>
#include <optional>
#include <vector>

namespace wuhu::session {

struct patch {
    version_vector from;
    version_vector to;
    std::vector<entry> transcript;
    std::array<std::vector<journal_entry>, 3> journal;  // indexed by lane
    std::optional<settings> config;
    std::optional<status> state;
    bool operator==(const patch&) const = default;

    bool empty() const;  // no entries, no facts, no registers
};

// The stable patch from `from` to the current version: subscribe(since:). `from` must not be
// ahead of the state in any component (invalid_version). Registers carry the state's settings
// and a status whose loop state is `loop`.
result<patch> since(const session_state& s, const version_vector& from,
                    loop_state loop = loop_state::idle);

// Where a page of the stable patch from `from` ends (subscribe pages, DESIGN.md "Bounds"): the
// transcript first, then the lanes' facts, at most `max_items` entries and facts and about
// `max_bytes` of their text (each counted with a small overhead), and at least one, so that
// every page moves on. The current version when the rest fits. REQUIRES: from <= current.
version_vector page_end(const session_state& s, const version_vector& from, std::size_t max_items,
                        std::size_t max_bytes);

// The stable patch between two versions of the history `s` holds (from <= to <= current).
result<patch> between(const session_state& s, const version_vector& from, const version_vector& to,
                      loop_state loop = loop_state::idle);

// The committed patch of one operation: `actions` applied to a state at `from` gave `after`.
// Registers are present only when the actions changed them.
patch patch_of(const version_vector& from, const action_list& actions, const session_state& after,
               loop_state loop = loop_state::idle);

// The status register of `s` with loop state `loop` (not published: epoch and seq 0).
// An idle loop of a session whose calls all wait for a person (and that is not paused)
// reports awaiting_approval.
status status_of(const session_state& s, loop_state loop);

// A patch that changes nothing but the status: from == to == the state's version, and the
// status with loop state `loop` (what a watcher gets when only the loop state changed).
patch status_patch(const session_state& s, loop_state loop);

// The version after `actions` are applied at `from`.
version_vector advance(version_vector from, const action_list& actions);

// a then b, coalesced. REQUIRES: a.to == b.from.
patch compose(const patch& a, const patch& b);

// Drops, per lane, the enqueued fact and the terminal fact of every item that has both in `p`.
void coalesce(patch& p);

}  // namespace wuhu::session
