// Tools: what the model can call. A tool has a name, a JSON schema for its arguments, an
// `idempotent` flag (may it run again after a crash interrupted it?) and an execute coroutine.
// Execution happens outside the session's serialized section; abort and the per-tool timeout
// cancel it through the awaiting coroutine's cancellation slot.
#pragma once

#include "runtime/clock.hpp"
#include "session/approval.hpp"
#include "session/state.hpp"
#include "session/tool_spec.hpp"

#include <boost/asio/awaitable.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace wuhu::tools {

namespace asio = boost::asio;

using std::chrono::milliseconds;

struct tool_output {
    std::string text;
    bool is_error = false;
};

// What a running tool may use besides its arguments.
class tool_services {
  public:
    virtual ~tool_services() = default;
    virtual runtime::clock& time() = 0;
    // Persists a durable timer for this session (idempotent by timer id). False when the
    // session has stopped and nothing was persisted.
    virtual asio::awaitable<bool> schedule_timer(session::timer t) = 0;
};

struct tool_call_context {
    session::session_id session;
    session::tool_call_id call;
    // When the runner stops waiting (wall-clock time): the call then gets a timeout result.
    session::unix_ms deadline;
    tool_services& services;
};

class tool {
  public:
    virtual ~tool() = default;
    virtual const session::tool_spec& spec() const = 0;
    virtual bool idempotent() const = 0;
    // How long a call may run; none: the loop's `tool_timeout`.
    virtual std::optional<milliseconds> timeout() const { return std::nullopt; }
    virtual asio::awaitable<tool_output> execute(std::string arguments, tool_call_context ctx) = 0;
};

// The tools sessions may call. A tool is the fleet's (every session may call it: built-ins,
// NATS tool services, the fleet's MCP servers) or one tenant's own (a tenant's MCP servers:
// only that tenant's sessions see it, and it goes before a fleet tool of its name). `tenant`
// below is the session's (tenant_of); "" is the fleet.
class tool_registry {
  public:
    // False (and nothing changes) when a tool of that name is registered already.
    bool add(std::shared_ptr<tool> t);
    // Registers `t`, in place of a tool of its name (an MCP server's tools as they change:
    // mcp/tools.hpp), and removes one. On the sessions' executor only. A tool replaced or
    // removed is kept (retired): a call in flight holds it by pointer.
    void put(std::shared_ptr<tool> t, const std::string& tenant = {});
    void remove(const std::string& name, const std::string& tenant = {});
    // Sources of tools still making their first offer (MCP servers listed at start): a session
    // loop waits for them before its first step (worker/agent_loop.cpp), so that a call of a
    // tool they offer is not taken for a call of an unknown tool.
    void expect_offer() { ++expected_; }
    void offered() { expected_ -= expected_ > 0 ? 1 : 0; }
    bool settled() const { return expected_ == 0; }
    // With tenancy, the tenant of the sessions kept without one (protocol::tenancy).
    void set_default_tenant(std::string t) { default_tenant_ = std::move(t); }
    // The tenant whose tools session `sid` may call besides the fleet's ("" none).
    std::string_view tenant_of(const session::session_id& sid) const;
    // The tool a session of `tenant` calls by `name`, if registered and enabled by `enabled`
    // (empty: every registered tool).
    tool* find(const std::string& name, const std::vector<std::string>& enabled,
               std::string_view tenant = {}) const;
    // The tool registered as `tenant`'s own (the fleet's: ""), whatever a session enables.
    tool* own(const std::string& name, std::string_view tenant) const;
    // The tools a session of `tenant` is offered (by name).
    std::vector<session::tool_spec> specs(const std::vector<std::string>& enabled,
                                          std::string_view tenant = {}) const;

    // The tools file's approval terms of a tool (session/approval.hpp; never by default).
    void set_approval(const std::string& name, session::tool_approval terms,
                      const std::string& tenant = {});
    // The terms of a call of `name` by a session of `tenant` under the session's rules `s`:
    // nullopt when it needs no approval.
    std::optional<session::tool_approval> approval_for(const std::string& name,
                                                       const session::approval_settings& s,
                                                       std::string_view tenant = {}) const;

  private:
    using scope = std::map<std::string, std::shared_ptr<tool>, std::less<>>;
    // The scope whose tool `name` a session of `tenant` calls (its own, else the fleet's).
    std::string_view scope_of(const std::string& name, std::string_view tenant) const;

    std::map<std::string, scope, std::less<>> scopes_;  // by tenant; "" the fleet's
    std::vector<std::shared_ptr<tool>> retired_;
    std::size_t expected_ = 0;
    std::string default_tenant_;
    std::map<std::pair<std::string, std::string>, session::tool_approval, std::less<>>
        approvals_;  // by (tenant, name)
};

// Calls `t` with `arguments`, the one way a tool is called: arguments that are not JSON, or
// that the tool's schema refuses (tools/json_schema.hpp), never reach the tool, and a tool that
// throws; each gives an error result saying why (the model may try again). Timeouts and aborts
// are the caller's (worker/tool_runner.hpp). A named coroutine taking its arguments by value,
// so it may stand inside a co_await expression (the g++ 12 note in docs/decisions.md).
asio::awaitable<tool_output> call(tool& t, std::string arguments, tool_call_context ctx);
// Arguments that are not JSON, or that the tool's schema refuses: why (nullopt: acceptable).
std::optional<std::string> invalid_arguments(const tool& t, const std::string& arguments);

// echo {text} -> text; clock {} -> the current UTC time; sleep {ms} -> sleeps;
// schedule_callback {delay_ms, content} -> a durable timer that later enters the system lane.
void add_builtin_tools(tool_registry& r);
// Their names (a tools file may set their approval: tools/nats_tools.hpp).
bool is_builtin_tool(std::string_view name);

}  // namespace wuhu::tools
