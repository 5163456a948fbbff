// `<prefix>.admin.sessions`: a page of the fleet's sessions with owner, loop state, lane depths
// and last activity. Any worker answers: it reads the store's catalog and the live leases,
// asks each owner for the summaries of the sessions it has loaded
// (`<prefix>.worker.<id>.admin.local`), and joins them. These are the pure parts.
#pragma once

#include "ownership/lease.hpp"
#include "session/requests.hpp"
#include "storage/store.hpp"
#include "worker/agent_loop.hpp"

#include <boost/json.hpp>

#include <map>

namespace wuhu::broker {

// {id, state, has_work, paused, lanes: {system, steer, followUp}, last_activity} of a loaded
// session (pending items per lane; last_activity: unix ms of its latest entry or journal fact).
boost::json::object session_summary(const worker::agent_loop& loop);

// {"ok":true,"sessions":[...],"next"?: id}: the catalog after `q.after`, in id order, joined
// with the leases (owner, epoch) and the owners' summaries (by id), filtered by `q`, at most
// `q.limit` rows; `next` is set when more may follow. A session without a live owner is
// "unowned" and reports only has_work.
std::string sessions_page(const session::sessions_query& q,
                          const std::vector<storage::catalog_entry>& catalog,
                          const std::vector<ownership::lease>& leases,
                          const std::map<std::string, boost::json::object>& summaries);

}  // namespace wuhu::broker
