// The NATS contract's payloads (DESIGN.md "NATS contract"), without any IO: subjects, request
// bodies to loop commands, replies, and event payloads. docs/protocol.md shows each one.
#pragma once

#include "session/requests.hpp"
#include "worker/agent_loop.hpp"

#include <boost/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wuhu::broker {

enum class verb { enqueue, cancel, system, subscribe, configure, abort, pause, resume, remove };
std::string_view verb_name(verb v);  // "enqueue", ..., "delete"

struct route {
    session::session_id sid;
    verb what;
};

// `<prefix>.session.<sid>.<verb>`, read by its length. A subject that does not parse (a
// session id with a dot, `*`, `>`, too many or too few tokens, or any byte outside
// [A-Za-z0-9_-.] after the prefix, a NUL included) is invalid_session_id; an unknown verb
// unknown_command.
session::result<route> parse_subject(std::string_view subject, std::string_view prefix);

std::string request_subject(std::string_view prefix, const session::session_id& sid, verb v);
std::string patch_subject(std::string_view prefix, const session::session_id& sid);
std::string delta_subject(std::string_view prefix, const session::session_id& sid);

// {"ok":false,"error":{"code":"...","message":"..."}}
std::string error_reply(std::string_view code, std::string_view message);
std::string error_reply(const boost::system::error_code& ec);
std::string error_reply(const session::decode_error& e);

// The command a request body asks for (enqueue, cancel, system, configure, abort, pause,
// resume). `new_id` gives an id to items that come without one (a UUIDv7).
session::decoded<worker::command> decode_command(verb v, const boost::json::value& body,
                                                 const session::request_limits& limits,
                                                 const session::queue_item_id& new_id);

// {"ok":true, ...}: id for enqueue/system, canceled for cancel, settings for configure.
std::string ok_reply(verb v, const worker::command_reply& r);

// The subscribe reply: {ok, patch, status, settings, step, inflight?}. `step` is the number of
// assistant messages up to the patch's `to`: the step of the next streamed message (a client
// drops stream events of lower steps, whose messages the patch already holds).
std::string subscribe_reply(const session::patch& p, const session::status& st, std::uint64_t step,
                            const std::optional<worker::inflight_message>& inflight);

// A reply no larger than `max_bytes` as is; a larger one as ordered chunks, each within
// `max_bytes`: {"ok":true,"chunk":i,"chunks":n,"part":"..."} where the parts, concatenated in
// order, are the reply's JSON text (cut between UTF-8 characters). broker/client.hpp
// reassembles them.
std::vector<std::string> chunked(std::string reply, std::size_t max_bytes);
// Event payloads. Patches go to `<prefix>.events.<sid>.patch`; stream events to `.delta`:
// {"type":"message.start","step":n}, {"type":"text.delta","seq":n,"text":"..."},
// {"type":"tool_call.delta","seq":n,"id","name","arguments"},
// {"type":"message.discard","step":n} (the attempt failed or was aborted: drop the inflight).
std::string patch_event(const session::patch& p);
std::optional<std::string> delta_event(const worker::loop_event& e);

}  // namespace wuhu::broker
