// The calls of a session that wait for a person's approval, read from a subscribe reply (a
// backfill from scratch): its approval_requested entries that no decision or result followed.
// What `wuhuctl approvals` lists, and what a client that decides needs (docs/protocol.md
// "Approvals").
#pragma once

#include <boost/json.hpp>

namespace wuhu::client {

// The pending approval_requested entries of `reply`'s transcript, oldest first: each as
// recorded ({id, at, type, call, tool, arguments, deadline?, on_deadline}).
boost::json::array pending_approvals(const boost::json::object& reply);

}  // namespace wuhu::client
