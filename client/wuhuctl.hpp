// wuhuctl's parts (client/wuhuctl.cpp, the commands; client/wuhuctl_views.cpp, what it prints
// of a session, the fleet view and the calls waiting for approval).
#pragma once

#include "client/client.hpp"
#include "nats/connection.hpp"

#include <boost/json.hpp>

#include <cstdint>
#include <string>

namespace wuhu::ctl {

namespace json = boost::json;

struct options {
    std::string nats = "nats://127.0.0.1:4222";
    std::string prefix = "wuhu";
    std::string tenant;
    wuhu::nats::credentials auth;
    std::string inbox_prefix = "_INBOX";
    bool as_json = false;
};

// Prints a failure; the exit code for it (3: no reply, 1: the service refused).
int report(const client::failure& f, const options& o);
// A time in ms since the epoch, as "2026-11-26 14:50:07 UTC".
std::string utc(std::int64_t ms);
// A string field of an object ("" when absent or not a string).
std::string str(const json::value& v, const char* key);
// A status's ledger for people.
std::string usage_line(const json::value& u);
// The live transcript of `sid`, streaming text as it arrives (exit code: 4 on timeout with
// `until_idle`).
int watch(client::client& c, const options& o, const std::string& sid, bool until_idle,
          int timeout_s);
// One line per session of a fleet view page.
void print_sessions(const json::object& page);
// The calls waiting for approval: of `sid`, or of every session the fleet view says awaits.
int list_approvals(nats::connection& nc, const client::options& copts, client::client& c,
                   const options& o, const std::string& sid);

}  // namespace wuhu::ctl
