// `<prefix>.admin.sessions`: a page of the fleet's sessions with owner, epoch, loop state, lane
// depths, timers and last activity. Any worker answers, a page at a time:
//
//   * What the store knows comes from its index (storage::catalog_query), one chunk of ids at
//     a time, joined with the live leases of those ids (or, with an `owner` filter, the other
//     way round: that owner's leases, then their index rows). Only the sessions of the chunk
//     that have a live lease are then asked of their owners
//     (`<prefix>.worker.<id>.admin.local` with `{"ids": [...]}`), all owners at once: a loaded
//     session's row is its owner's live view; a leased one its owner does not have loaded is
//     "unloaded"; one whose owner did not answer is "unreachable"; one without a live lease is
//     "unowned".
//   * A loop state filter ("idle", "inferring", ...) matches loaded sessions only: every live
//     owner is asked for a page of its loaded sessions in that state, and the pages are merged.
//
// These are the pure parts; broker/fleet_view.cpp does the IO.
#pragma once

#include "ownership/lease.hpp"
#include "protocol/requests.hpp"
#include "storage/store.hpp"
#include "worker/agent_loop.hpp"

#include <boost/json.hpp>

#include <map>
#include <optional>

namespace wuhu::broker {

// {id, state, owner, epoch, has_work, paused, lanes: {system, steer, followUp}, timers,
// next_timer?, last_activity} of a session loaded by `owner` (last_activity and next_timer in
// unix ms).
boost::json::object loaded_row(const worker::agent_loop& loop, std::string_view owner);

// The same row from the store's index and the session's live lease (nullptr: none): state
// "unowned" without a lease, else "unloaded" until its owner says more.
boost::json::object index_row(const storage::catalog_entry& e, const ownership::lease* held);

// Whether a row passes the query's state, owner and has_work filters.
bool row_matches(const protocol::sessions_query& q, const boost::json::object& row);

// The loop states: the rows only owners know.
bool is_loop_state(std::string_view state);

// What an owner answered: its rows by id, which are all it has, or (`until`) all it has up to
// that id (its answer was cut: "" when it holds no row at all).
struct owner_page {
    std::map<std::string, boost::json::object> rows;
    std::optional<std::string> until;
};

// The owner's answer to admin.local, {"ok":true,"sessions":[...],"complete":bool}: `loaded`
// are its rows in id order that match the query (at most q.limit + 1: one more tells the page
// is cut), at most q.limit of them and `max_bytes` of JSON.
std::string local_page(const protocol::sessions_query& q,
                       const std::vector<boost::json::object>& loaded, std::size_t max_bytes);
// Reads an owner's answer; nullopt if it is not one.
std::optional<owner_page> read_owner_page(std::string_view reply);
// The admin.local request body for `q`: {"limit", "after"?, "state"?, "has_work"?, "tenant"?,
// "ids"?}, sessions named by their keys.
std::string local_query(const protocol::sessions_query& q);

// One chunk of the index joined: each entry's index row, with its owner's answer over it when
// it has a live lease (pages by owner; nullopt: that owner did not answer). In id order, one
// row per entry up to the first entry an owner's cut answer leaves undecided (past the last
// `until` of its page): the rows stop there, and the next chunk starts after the last
// one. The first entry is never left out (undecided, it shows "unreachable").
std::vector<boost::json::object> join_rows(
    const std::vector<storage::catalog_entry>& entries,
    const std::vector<ownership::lease>& leases,
    const std::map<std::string, std::optional<owner_page>>& pages);

// A page of loaded sessions from the owners' pages (by owner; nullopt: did not answer):
// {"ok":true,"sessions":[...],"next"?,"unreachable"?:[owners]}. The page stops where the
// first cut owner page stopped, so that no row of another owner is skipped.
std::string merge_owner_pages(const protocol::sessions_query& q,
                              const std::map<std::string, std::optional<owner_page>>& pages);

}  // namespace wuhu::broker
