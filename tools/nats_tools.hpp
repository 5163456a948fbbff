// Tools served over NATS (`--tools`, `WUHU_TOOLS`; docs/tools.md): a tools file declares
// external tools, and each call of one is a NATS request to the tool's service.
//
//   {"tools": {
//      "get_weather": {"description": "The weather in a city now",
//                      "schema": {"type": "object", "required": ["city"],
//                                 "properties": {"city": {"type": "string"}}},
//                      "idempotent": true, "timeout_ms": 10000},
//      "start_build": {"description": "Starts a build; its outcome arrives later",
//                      "schema": {"type": "object"}, "subject": "ci.builds.start"}}}
//
// A tool's name is 1-64 of [A-Za-z0-9_-] (what the providers accept), and not a built-in's.
// The request goes to `subject` (default `<prefix>.tools.<name>`; with tenancy, the session's
// tenant's own service, `<prefix>.<tenant>.tools.<name>`, which the fleet's account imports
// from the tenant's: docs/security.md), its body the arguments (a JSON object that passed the
// schema), with the headers
//
//   Wuhu-Session    the session id (within its tenant)
//   Wuhu-Tenant     the session's tenant (with tenancy only)
//   Wuhu-Tool       the tool's name
//   Wuhu-Tool-Call  the call's id: the same for every attempt; with the session (and the
//                   tenant), the service's idempotency key
//   Wuhu-Deadline   when the worker stops waiting for this attempt (Unix milliseconds)
//   Wuhu-Attempt    1, 2, ...
//
// and the service answers {"output": "...", "is_error": false} ("is_error" is optional). When
// nobody serves the subject (no responders), or nobody answers in time, a call gets an error
// result at once; an idempotent one is tried again (after 100 ms, doubling to 1 s, when
// nobody serves it; at once after an attempt timed out) until `timeout_ms` is spent, each
// attempt waiting at most `attempt_timeout_ms` (default a third of `timeout_ms`), and an
// earlier attempt's late answer counts. When the call ends (an answer, the timeout, an abort,
// the session going away) its requests are withdrawn: a later answer is dropped.
//
// An asynchronous tool is an ordinary one whose service answers at once ("started task 7")
// and later sends the outcome to `<prefix>.session.<sid>.system`.
//
// Threads: execute() runs on the session's executor and never blocks it (the answers come on
// a libnats thread and are posted to that executor). The NATS connection must outlive the
// tool registry and every call in flight.
#pragma once

#include "nats/connection.hpp"
#include "protocol/subjects.hpp"
#include "tools/tools.hpp"

#include <boost/json/object.hpp>
#include <boost/system/result.hpp>

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace wuhu::tools {

namespace asio = boost::asio;

struct tool_service {
    session::tool_spec spec;  // name, description, JSON schema
    std::string subject;     // empty: <prefix>.tools.<name>
    bool idempotent = false;
    std::chrono::milliseconds timeout{30000};
    std::chrono::milliseconds attempt_timeout{0};  // idempotent tools; 0: a third of timeout
};

// The tools of a tools file, or a message naming what is wrong (exit 2 at start).
boost::system::result<std::vector<tool_service>, std::string> parse_tools(
    std::string_view json_text);

// The approval terms a tools file gives (docs/tools.md "Approval"): any tool's entry may say
//   "approval": "always" | "never"   (default never)
//   "approval_deadline_ms": 1-2592000000 (30 days; default none)
//   "approval_default": "reject" | "approve"   (what the deadline decides; default reject)
// and a built-in's entry (echo, clock, sleep, schedule_callback) says only these.
boost::system::result<std::map<std::string, session::tool_approval>, std::string> parse_approvals(
    std::string_view json_text);
// The approval terms of one entry (those three fields; the others are the caller's), or a
// message naming what is wrong, `where` first (an MCP server's overrides use it too).
boost::system::result<session::tool_approval, std::string> approval_terms(
    const boost::json::object& entry, const std::string& where);

// Where a tool's calls go, to be shown: its `subject`, or <prefix>.tools.<name> (with
// tenancy <prefix>.<tenant>.tools.<name>, each tenant's own).
std::string subject_of(const tool_service& service, const protocol::subject_layout& subjects);

// A tool whose calls are requests to its service.
class nats_tool final : public tools::tool {
  public:
    // `subjects`: the worker's (the default subject is the session's tools.<name>).
    nats_tool(nats::connection& nc, tool_service service, protocol::subject_layout subjects);

    const session::tool_spec& spec() const override { return service_.spec; }
    bool idempotent() const override { return service_.idempotent; }
    std::optional<std::chrono::milliseconds> timeout() const override { return service_.timeout; }

    asio::awaitable<tools::tool_output> execute(std::string arguments,
                                                 tools::tool_call_context ctx) override;

  private:
    nats::connection& nc_;
    tool_service service_;
    protocol::subject_layout subjects_;
};

// Registers a nats_tool for each service. Throws std::invalid_argument when a name is taken
// (a built-in's).
void add_tool_services(tools::tool_registry& r, nats::connection& nc,
                       const std::vector<tool_service>& services,
                       const protocol::subject_layout& subjects);

}  // namespace wuhu::tools
