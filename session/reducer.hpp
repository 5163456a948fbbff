// The pure reducer: apply_actions(actions, state) -> state.
//
// Applying never moves a cursor backwards: an entry must carry the next transcript id and a
// journal fact the next lane cursor. A violation is a bug in a store or in this module and
// aborts the process (it is an assertion, not an error code).
#pragma once

#include "session/action.hpp"
#include "session/state.hpp"

namespace wuhu::session {

void apply_actions(const action& a, session_state& s);
void apply_actions(const action_list& actions, session_state& s);
session_state applied(const action_list& actions, session_state s);

}  // namespace wuhu::session
