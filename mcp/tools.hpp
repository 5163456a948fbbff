// The tools of MCP servers (docs/tools.md "MCP servers"): the tools file's `mcp_servers`, and
// the tools each server offers, registered as tools the model can call.
//
//   {"tools": {...},
//    "mcp_servers": {
//      "files": {"url": "http://127.0.0.1:8931/mcp",
//                "headers": {"X-Team": "blue"},
//                "headers_file": "/run/secrets/files-mcp.json",
//                "timeout_ms": 600000, "idle_timeout_ms": 60000,
//                "allow": ["read_file", "search"],
//                "rename": {"read_file": "files_read"},
//                "overrides": {"files_read": {"idempotent": true, "approval": "always"}},
//                "tenant": "acme"}}}
//
// `url`: the server's Streamable HTTP endpoint (http or https). `headers` go with every
// request; `headers_file` holds more of them (a JSON object), for secrets kept out of the
// tools file: their values are never logged. `timeout_ms`: a call in all (default 10 minutes);
// `idle_timeout_ms`: how long a call may go without a progress notification (default 60 s);
// each one the server sends starts it again. `allow`: the server's tools the model is offered
// (default all); `rename`: the name the model sees (unique among all tools); `overrides`, by
// that name: `idempotent` (default: the tool's idempotentHint or readOnlyHint annotation), and
// the approval terms of a tools file's entry (tools/nats_tools.hpp). `tenant`, with tenancy
// only and then required: the tenant whose sessions alone are offered the server's tools (its
// own go before the fleet's tools of their names), or "*" for a server every session may call.
//
// At start the worker initializes each server and lists its tools (every page); a server that
// does not answer is tried again with backoff (1 s doubling to 60 s), and its tools are offered
// once it answers. When the server says its tools changed (notifications/tools/list_changed on
// its event stream), they are listed again and the registry follows.
#pragma once

#include "mcp/client.hpp"
#include "runtime/clock.hpp"
#include "tools/tools.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/system/result.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace wuhu::mcp {

using std::chrono::milliseconds;

struct server_config {
    endpoint where;                 // name, URL, headers
    std::string url;                // as written, for logs
    milliseconds timeout{600'000};  // a call in all
    milliseconds idle_timeout{60'000};
    std::vector<std::string> allow;                          // empty: every tool
    std::map<std::string, std::string> rename;               // the server's name -> the model's
    std::map<std::string, bool> idempotent;                  // by the model's name
    std::map<std::string, session::tool_approval> approval;  // by the model's name
    std::string tenant;  // whose sessions call it ("" every session)
};

// The `mcp_servers` of a tools file (none when it has none), or a message naming what is
// wrong. Reads each `headers_file`. `tenancy`: whether the fleet has tenants (then each server
// names its tenant).
boost::system::result<std::vector<server_config>, std::string> parse_servers(
    std::string_view tools_file_json, bool tenancy = false);

// How each call of a server's tool ended (metrics): the server, the result (ok, error,
// server_error, failed, cut_off, cancelled), how long it took.
using call_observer = std::function<void(const std::string&, std::string_view, double)>;

// A tool of an MCP server: a call is a tools/call on its server, with a progress token; it ends
// with the server's result, at `idle_timeout` without progress, or at the call's deadline
// (then the server gets a cancellation, as it does when the call is aborted).
class mcp_tool final : public tools::tool {
  public:
    mcp_tool(std::shared_ptr<client> c, std::string server_tool, session::tool_spec spec,
             bool idempotent, milliseconds timeout, milliseconds idle_timeout,
             call_observer observe = {})
        : client_(std::move(c)),
          server_tool_(std::move(server_tool)),
          spec_(std::move(spec)),
          idempotent_(idempotent),
          timeout_(timeout),
          idle_timeout_(idle_timeout),
          observe_(std::move(observe)) {}
    const session::tool_spec& spec() const override { return spec_; }
    bool idempotent() const override { return idempotent_; }
    std::optional<milliseconds> timeout() const override { return timeout_; }
    asio::awaitable<tools::tool_output> execute(std::string arguments,
                                                tools::tool_call_context ctx) override;

  private:
    std::shared_ptr<client> client_;
    std::string server_tool_;
    session::tool_spec spec_;
    bool idempotent_;
    milliseconds timeout_;
    milliseconds idle_timeout_;
    call_observer observe_;
};

// What a server's tools become: the allowed ones, renamed, with their idempotence.
std::vector<std::shared_ptr<mcp_tool>> tools_of(const std::shared_ptr<client>& c,
                                                const server_config& cfg,
                                                const std::vector<tool_info>& listed,
                                                const call_observer& observe = {});

// Keeps a server's tools in `registry` (see the top of this file) until cancelled. `log`
// receives one line per change (never a header's value).
asio::awaitable<void> serve(std::shared_ptr<client> c, server_config cfg,
                            tools::tool_registry& registry, runtime::clock& clk,
                            std::function<void(std::string)> log, call_observer observe = {});

}  // namespace wuhu::mcp
