// The event payloads of the NATS contract. Patches (committed changes and status changes) go to
// `<prefix>.events.<sid>.patch`; stream events to `.delta`:
//   {"type":"message.start","step":n,"epoch":e}
//   {"type":"text.delta","step":n,"epoch":e,"seq":n,"text":"..."}
//   {"type":"tool_call.delta","step":n,"epoch":e,"seq":n,"id","name","arguments"}
//   {"type":"message.discard","step":n,"epoch":e}   the attempt failed or was aborted: drop it
// `.deleted`: {"type":"session.deleted","epoch":e}, once the session's deletion is durable (the
// epoch of the owner that deleted it). A session made again under the same id starts anew.
// A committed message has no event of its own: the patch with its entry ends it. `epoch` is the
// lease epoch of the owner streaming the message: a new owner streams the message of the same
// step again, from seq 1, under a higher epoch (docs/protocol.md "Stream events").
#pragma once

#include "session/patch.hpp"

#include <boost/json.hpp>

#include <string>
#include <string_view>

namespace wuhu::protocol {

std::string patch_event(const session::patch& p);

boost::json::object message_start(std::uint64_t step, std::uint64_t epoch);
boost::json::object text_delta(std::uint64_t step, std::uint64_t epoch, std::uint64_t seq,
                               std::string_view text);
boost::json::object tool_call_delta(std::uint64_t step, std::uint64_t epoch, std::uint64_t seq,
                                    std::string_view id, std::string_view name,
                                    std::string_view arguments);
boost::json::object message_discard(std::uint64_t step, std::uint64_t epoch);
boost::json::object session_deleted(std::uint64_t epoch);

// A non-negative integer field of an event or a reply (a step, a seq, a count), or 0: anyone
// may publish on an events subject, so a malformed value must not throw.
std::uint64_t read_count(const boost::json::object& o, std::string_view key);

}  // namespace wuhu::protocol
