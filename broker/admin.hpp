// `<prefix>.admin.sessions`: a page of the fleet's sessions with owner, loop state, lane depths
// and last activity. Any worker answers: it reads the store's catalog and the live leases, asks
// every owner at once for a page of the sessions it holds (`<prefix>.worker.<id>.admin.local`,
// the same query), and merges them. Every level pages: an owner answers at most `limit` rows
// after `after`, and the merged page stops where an owner's answer stops. These are the pure
// parts.
#pragma once

#include "ownership/lease.hpp"
#include "protocol/requests.hpp"
#include "storage/store.hpp"
#include "worker/agent_loop.hpp"

#include <boost/json.hpp>

#include <map>
#include <optional>

namespace wuhu::broker {

// {id, state, has_work, paused, lanes: {system, steer, followUp}, last_activity} of a loaded
// session (pending items per lane; last_activity: unix ms of its latest entry or journal fact).
boost::json::object session_summary(const worker::agent_loop& loop);

// What an owner answered: its rows by id (after the query's `after`, matching its `state` and
// `has_work`), and whether they are all of them (`complete`) or only up to the last one.
struct owner_page {
    std::map<std::string, boost::json::object> rows;
    bool complete = true;
};

// The owner's answer to admin.local: {"ok":true,"sessions":[...],"complete":bool}. `loaded`:
// summaries of its loaded sessions after q.after in id order (at most q.limit + 1 of them,
// already filtered by state and has_work); `unloaded`: the sessions whose lease it holds
// without having them loaded, in id order ("unloaded" rows). At most q.limit rows and
// `max_bytes` of JSON.
std::string local_page(const protocol::sessions_query& q,
                       const std::vector<boost::json::object>& loaded,
                       const std::vector<session::session_id>& unloaded, std::size_t max_bytes);
// Reads an owner's answer; nullopt if it is not one.
std::optional<owner_page> read_owner_page(std::string_view reply);
// The admin.local request body for `q`: {"limit", "after"?, "state"?, "has_work"?}.
std::string local_query(const protocol::sessions_query& q);

// {"ok":true,"sessions":[...],"next"?: id}: the catalog after `q.after`, in id order, joined
// with the leases (owner, epoch) and the owners' pages (nullopt: the owner did not answer),
// filtered by `q`, at most `q.limit` rows; `next` is set when more may follow. A session
// without a live lease is "unowned"; one whose owner did not answer is "unreachable".
std::string sessions_page(const protocol::sessions_query& q,
                          const std::vector<storage::catalog_entry>& catalog,
                          const std::vector<ownership::lease>& leases,
                          const std::map<std::string, std::optional<owner_page>>& pages);

}  // namespace wuhu::broker
