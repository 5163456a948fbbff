// The subjects of the NATS contract (DESIGN.md "NATS contract", "Tenancy and access control"),
// built and read without IO, in one place: every token that goes into a subject is checked
// here first, by its length and its bytes (never as a C string), and every subject a server or
// a client reads is parsed here.
//
// Without tenancy:
//
//   <prefix>.session.<sid>.<verb>                       requests (queue group wuhu-workers)
//   <prefix>.admin.sessions                             the fleet view
//   <prefix>.events.<sid>.patch / .delta / .deleted     committed patches, stream events, deletion
//   <prefix>.tools.<name>                               tool services the workers call
//
// With tenancy on, the tenant is the token after the prefix, and nats-server (accounts with
// `account_token_position`, docs/security.md) puts it there and checks it; a tenant's clients
// keep the plain layout above:
//
//   <prefix>.<tenant>.session.<sid>.<verb>
//   <prefix>.<tenant>.admin.sessions                    that tenant's sessions
//   <prefix>.admin.sessions                             every tenant's (the fleet's account only)
//   <prefix>.<tenant>.events.<sid>.patch / .delta / .deleted
//   <prefix>.<tenant>.tools.<name>                      imported from the tenant's own account
//
// And the fleet's own subjects, reachable from the fleet's account only:
//
//   <prefix>.worker.<worker-id>.[<tenant>.]session.<sid>.<verb>  a request forwarded to its owner
//   <prefix>.worker.<worker-id>.admin.local                      an owner's page of the fleet view
//
// A session id, a worker id, a tenant id, a tool name and each token of a prefix follow one
// rule, the rule of a session id (session::is_id_token): 1-64 of [A-Za-z0-9_-], so none can
// add a token, a wildcard or a protocol command. A tenant is also none of the layout's own
// words (session, admin, events, tools, worker), and with tenancy on neither is a worker id.
//
// A session's tenant is part of its identity (session::session_id's key `<tenant>.<id>`). With
// tenancy on, the sessions stored without a tenant (made before tenancy was turned on) belong
// to the default tenant, if one is named, and the default tenant's new sessions are stored the
// same way: its sessions keep their keys, and nothing is migrated.
#pragma once

#include "session/ids.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace wuhu::protocol {

enum class verb {
    enqueue,
    cancel,
    system,
    subscribe,
    configure,
    abort,
    pause,
    resume,
    remove,
    approve,
    reject,
    respond
};
std::string_view verb_name(verb v);  // "enqueue", ..., "delete"
std::optional<verb> verb_named(std::string_view name);
// Whether a request with this verb may create its session (enqueue, system, configure); the
// others read or change only a session that exists.
bool creates_session(verb v);

// A request's session (its key: session_id::str()) and verb.
struct route {
    session::session_id sid;
    verb what;
};

// A worker id: one subject token.
bool valid_worker_id(std::string_view id);
// A subject prefix: tokens separated by dots (`wuhu`, `acme.wuhu`).
bool valid_prefix(std::string_view prefix);
// A tenant id: one subject token that is not a word of the layout.
bool valid_tenant(std::string_view tenant);

struct tenancy {
    bool on = false;
    // With tenancy on: the tenant the sessions stored without one belong to ("" none: they are
    // then served to nobody, and listed in the fleet's own view only).
    std::string default_tenant;
};

class subject_layout {
  public:
    // std::invalid_argument when the prefix or the default tenant is not valid, or a default
    // tenant is named without tenancy.
    explicit subject_layout(std::string prefix = "wuhu", tenancy t = {});

    const std::string& prefix() const { return prefix_; }
    bool tenancy_on() const { return tenancy_.on; }
    const std::string& default_tenant() const { return tenancy_.default_tenant; }
    // A worker id this layout can route to (valid_worker_id, and with tenancy none of the
    // layout's words).
    bool valid_worker(std::string_view worker_id) const;

    // ---- what a worker subscribes to
    // Every request to a session: <prefix>.session.> (tenancy: <prefix>.*.session.>).
    std::string requests() const;
    // The fleet view of a tenant, or the whole fleet's without tenancy: <prefix>.admin.sessions
    // (tenancy: <prefix>.*.admin.sessions).
    std::string views() const;
    // With tenancy, the fleet's own view of every tenant: <prefix>.admin.sessions.
    std::optional<std::string> fleet_view() const;
    // The requests forwarded to a worker. REQUIRES: valid_worker(worker_id).
    std::string forwarded_requests(std::string_view worker_id) const;
    // The acknowledgements of the requests a worker forwards: <prefix>.worker.<id>.ack.*.
    // REQUIRES: valid_worker(worker_id).
    std::string forward_acks(std::string_view worker_id) const;
    // The acknowledgement subject of that worker's forward number `n`.
    std::string forward_ack(std::string_view worker_id, std::uint64_t n) const;
    // The forward number of an acknowledgement sent to `worker_id`; nullopt for any other
    // subject.
    std::optional<std::uint64_t> parse_forward_ack(std::string_view subject,
                                                   std::string_view worker_id) const;
    // Whether `subject` is a forward's acknowledgement subject of any worker of the fleet
    // (<prefix>.worker.<valid id>.ack.<1-19 digits>): the only subject an owner acknowledges
    // a forward on, whatever the header says.
    bool is_forward_ack(std::string_view subject) const;
    // Whether `subject` is one only that worker takes (<prefix>.worker.<id>.…).
    bool for_worker(std::string_view subject, std::string_view worker_id) const;
    // Whether `subject` is under the prefix (one of the fleet's subjects).
    bool within_prefix(std::string_view subject) const {
        return subject.size() > prefix_.size() && subject.starts_with(prefix_) &&
               subject[prefix_.size()] == '.';
    }
    // An owner's page of the fleet view: <prefix>.worker.<id>.admin.local; invalid_query when
    // the worker id cannot be routed to.
    session::result<std::string> local_sessions(std::string_view worker_id) const;

    // ---- reading (each subject read whole, by its length)
    // A request: invalid_session_id when the subject does not parse (a session id with a dot,
    // `*`, `>`, too many or too few tokens, any byte outside [A-Za-z0-9_-.] after the prefix,
    // a NUL included), invalid_tenant for a tenant that is not one, unknown_command for an
    // unknown verb or a subject outside the layout.
    session::result<route> parse_request(std::string_view subject) const;
    // A request forwarded to `worker_id`: <prefix>.worker.<id>. then the request's subject
    // after its prefix.
    session::result<route> parse_forwarded(std::string_view subject,
                                           std::string_view worker_id) const;
    // A fleet view's subject: the tenant whose sessions it lists, or nullopt for the whole
    // fleet's (without tenancy, or the fleet's own view); unknown_command for any other.
    session::result<std::optional<std::string>> parse_view(std::string_view subject) const;

    // ---- building (a session's tenant is in every subject of it)
    std::string request(const session::session_id& sid, verb v) const;
    // invalid_query when the worker id cannot be routed to.
    session::result<std::string> forward(std::string_view worker_id,
                                         const session::session_id& sid, verb v) const;
    std::string patch(const session::session_id& sid) const;
    std::string delta(const session::session_id& sid) const;
    std::string deleted(const session::session_id& sid) const;
    // <prefix>[.<tenant>].events.<sid>.>: both event subjects of a session.
    std::string events(const session::session_id& sid) const;
    // <prefix>[.<tenant>].tools.<name>; invalid_query when the name is no token.
    session::result<std::string> tool(const session::session_id& sid,
                                      std::string_view name) const;

    // ---- a session's tenant
    // The tenant a session's subjects name: its key's, or with tenancy the default tenant for
    // a session stored without one ("" when there is none, or without tenancy).
    std::string_view tenant_of(const session::session_id& sid) const;
    // Whether a session is `tenant`'s (tenant_of).
    bool belongs_to(const session::session_id& sid, std::string_view tenant) const {
        return tenant_of(sid) == tenant;
    }
    // The session `local` of `tenant` as it is kept (the default tenant's without a tenant).
    session::result<session::session_id> session_of(std::string_view tenant,
                                                    std::string_view local) const;
    // The store's scope of a tenant's sessions (storage::catalog_query::tenant): its name, or
    // "" for the default tenant (kept without one).
    std::string scope_of(std::string_view tenant) const;

  private:
    // <prefix>.[<tenant>.]<kind>.<sid>.<last>
    std::string of_session(const session::session_id& sid, std::string_view kind,
                           std::string_view last) const;
    // What follows "<prefix>." (or "<prefix>.worker.<id>."): [<tenant>.]session.<sid>.<verb>.
    session::result<route> parse_rest(std::string_view rest) const;

    std::string prefix_;
    tenancy tenancy_;
};

}  // namespace wuhu::protocol
