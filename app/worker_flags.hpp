// wuhu-worker's flags and variables (`wuhu-worker --help`), the files they name, and the
// node's options they make. Every flag has a WUHU_* variable (flags win).
#pragma once

#include "app/backends.hpp"
#include "app/node.hpp"
#include "providers/scripted_provider.hpp"

#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <vector>

namespace wuhu::app {

struct worker_flags {
    std::string nats_url = "nats://127.0.0.1:4222";
    std::string store_url = "sqlite://./wuhu-data";
    std::string script_path;
    std::string prefix = "wuhu";
    std::string worker_id;  // worker-<pid> unless told (add_flags)
    std::size_t pool = 8;
    std::string lease = "auto";
    long lease_ttl_ms = 15000;
    std::size_t store_threads = 4;
    nats::credentials nats_auth;
    std::string inbox_prefix = "_INBOX";
    std::string synchronous = "full";
    std::size_t sqlite_open_files = 512;
    bool tenancy = false;
    std::string default_tenant;
    std::string pg_schema = "wuhu";
    bool force_memory_lease = false;
    long renew_ms = 0;
    long stop_margin_ms = 0;
    long passivate_after_ms = 600000;
    std::size_t max_loaded = 10000;
    std::string providers_path;
    std::string metrics_addr = "127.0.0.1:9464";
    std::size_t metrics_max_connections = 64;
    bool console = true;
    std::string tools_path;
    std::size_t sweep_batch = 64;
    long pg_statement_ms = storage::pg_timeouts{}.statement.count();
    long pg_lock_ms = storage::pg_timeouts{}.lock.count();
    long pg_idle_ms = storage::pg_timeouts{}.idle_in_transaction.count();
    std::size_t max_in_flight = 1024;
    std::size_t max_waiting_commands = 64;
    session::lane_limits lanes;
    std::size_t max_content = session::default_max_content_bytes;
    std::size_t max_entry = 1024 * 1024;
    long retry_after_ms = 100;
    broker::tenant_limits tenants;
    providers::inference_slots::limits inferences;
    long inference_first_byte_ms = worker::loop_options{}.inference.first_byte.count();
    long inference_idle_ms = worker::loop_options{}.inference.idle.count();
    long inference_total_ms = worker::loop_options{}.inference.total.count();
    long summary_first_byte_ms = worker::loop_options{}.summary.first_byte.count();
    long summary_idle_ms = worker::loop_options{}.summary.idle.count();
    long summary_total_ms = worker::loop_options{}.summary.total.count();
    long tool_timeout_ms = worker::loop_options{}.tool_timeout.count();
    long retry_base_ms = worker::loop_options{}.retry.base.count();
    long retry_cap_ms = worker::loop_options{}.retry.cap.count();
    long retry_server_wait_ms = worker::loop_options{}.retry.max_server_wait.count();
    int retry_max_attempts = worker::loop_options{}.retry.max_attempts;
    session::budget budget;
    double budget_cost_usd = 0;
    std::string tenant_budgets_path;
    bool metrics_addr_given = false;  // --metrics-addr or WUHU_METRICS_ADDR (after parsing)
};

// Adds every flag to `app`, bound to `f`'s fields.
void add_flags(CLI::App& app, worker_flags& f);

// What the files the flags name hold, each read once (one version of each file).
struct worker_files {
    providers::script script;
    std::vector<providers::endpoint_config> endpoints;
    providers::price_table prices;
    std::map<std::string, session::budget, std::less<>> tenant_budgets;
    std::vector<tools::tool_service> tool_services;
    std::map<std::string, session::tool_approval> tool_approvals;
    std::vector<mcp::server_config> mcp_servers;
};

// Throws std::invalid_argument, naming the file, for one that cannot be read or parsed.
worker_files read_files(const worker_flags& f);

// The node's options (but `nats_connected`); throws std::invalid_argument for flags that
// cannot work together.
node_options node_options_of(const worker_flags& f, const worker_files& files);

// The PostgreSQL timeouts the flags name.
storage::pg_timeouts pg_timeouts_of(const worker_flags& f);

}  // namespace wuhu::app
