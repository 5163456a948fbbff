// The subjects of the NATS contract (DESIGN.md "NATS contract"), built and read without IO.
//
//   <prefix>.session.<sid>.<verb>                  requests (queue group wuhu-workers)
//   <prefix>.worker.<worker-id>.session.<sid>.<verb>  a request forwarded to the session's owner
//   <prefix>.worker.<worker-id>.admin.local        an owner's page of the fleet view
//   <prefix>.admin.sessions                        the fleet view
//   <prefix>.events.<sid>.patch / .delta           committed patches and status / stream events
//
// A session id, a worker id and each token of a prefix follow one rule, the rule of a session
// id (session::is_id_token): 1-64 of [A-Za-z0-9_-], so none can add a token or a wildcard.
#pragma once

#include "session/ids.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace wuhu::protocol {

enum class verb { enqueue, cancel, system, subscribe, configure, abort, pause, resume, remove };
std::string_view verb_name(verb v);  // "enqueue", ..., "delete"
std::optional<verb> verb_named(std::string_view name);
// Whether a request with this verb may create its session (enqueue, system, configure); the
// others read or change only a session that exists.
bool creates_session(verb v);

struct route {
    session::session_id sid;
    verb what;
};

// A worker id: one subject token.
bool valid_worker_id(std::string_view id);
// A subject prefix: tokens separated by dots (`wuhu`, `acme.wuhu`).
bool valid_prefix(std::string_view prefix);

// `<prefix>.session.<sid>.<verb>`, read by its length. A subject that does not parse (a
// session id with a dot, `*`, `>`, too many or too few tokens, or any byte outside
// [A-Za-z0-9_-.] after the prefix, a NUL included) is invalid_session_id; an unknown verb
// unknown_command.
session::result<route> parse_subject(std::string_view subject, std::string_view prefix);

// `<prefix>.session.>`: every request to a session (what workers subscribe to).
std::string session_requests_subject(std::string_view prefix);
std::string request_subject(std::string_view prefix, const session::session_id& sid, verb v);
std::string patch_subject(std::string_view prefix, const session::session_id& sid);
std::string delta_subject(std::string_view prefix, const session::session_id& sid);
// `<prefix>.events.<sid>.>`: both event subjects of a session (a watch subscribes to it).
std::string events_subject(std::string_view prefix, const session::session_id& sid);
std::string sessions_subject(std::string_view prefix);  // <prefix>.admin.sessions
// `<prefix>.worker.<worker-id>`: the prefix of the subjects only that worker takes.
std::string worker_prefix(std::string_view prefix, std::string_view worker_id);
std::string local_sessions_subject(std::string_view prefix, std::string_view worker_id);

}  // namespace wuhu::protocol
