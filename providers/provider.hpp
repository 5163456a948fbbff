// The inference provider interface.
//
// A provider streams one response for a context: text deltas and tool-call deltas go to the
// sink as they arrive (on the caller's executor), and the call completes with the whole
// assistant message, or with an error the loop sorts by kind: transient (retry with backoff),
// context_overflow (compact, then retry once), fatal (report). Cancellation (abort, timeout)
// arrives through the awaiting coroutine's cancellation slot.
#pragma once

#include "session/context.hpp"
#include "session/loop_policy.hpp"
#include "session/tool_spec.hpp"

#include <boost/asio/awaitable.hpp>

#include <functional>
#include <string>
#include <variant>
#include <vector>

namespace wuhu::providers {

namespace asio = boost::asio;

struct inference_request {
    std::vector<session::llm_message> context;
    std::vector<session::tool_spec> tools;
    std::string model;
    // How many assistant messages the transcript holds before this one: identifies the turn
    // (the scripted provider answers by it, so a re-run after a crash gets the same answer).
    std::uint64_t step = 0;
    std::string session;  // the session's id (the replay provider keys its records by it)
};

struct tool_call_delta {
    std::string id;
    std::string name;
    std::string arguments;  // a fragment of the JSON arguments
};

// What the provider reported of an inference's usage as it streamed (Anthropic reports the
// input's when the stream begins, then the output's; OpenAI all of it at the end), with the
// model it reported and the cost (set by the routing provider's price table). The provider
// bills it whether or not the answer completes: the loop records it when no answer does (a
// failure, a cut, an abort: session::billed_attempt).
struct reported_usage {
    session::token_usage usage;
    std::string model;
    std::uint64_t cost = 0;
    bool operator==(const reported_usage&) const = default;
};

class stream_sink {
  public:
    virtual ~stream_sink() = default;
    virtual void text(std::string_view delta) = 0;
    virtual void tool_call(const tool_call_delta& delta) = 0;
    // Bytes of the answer arrived (its headers, a keep-alive, an event with no delta): the
    // stream is alive (loop_options::stream_limits).
    virtual void alive() {}
    // The usage so far, each time the stream reports it (each report has all of it so far).
    virtual void usage(const reported_usage&) {}
};

// The loop's policy sorts a failed inference by kind (session/loop_policy.hpp).
using provider_error_kind = session::inference_error_kind;
using provider_error = session::inference_error;
using session::kind_name;

// A compaction's summary: the segment to summarize, with the session's model.
struct summary_request {
    std::vector<session::llm_message> segment;
    std::string model;
    std::uint64_t step = 0;
    std::string session;
    std::function<void()> alive;                       // as stream_sink::alive, when set
    std::function<void(const reported_usage&)> usage;  // as stream_sink::usage, when set
};

// A summary, with what its inference used: as an answer's usage, reported model and cost.
struct summary_answer {
    std::string text;
    session::token_usage usage;
    std::string model;
    std::uint64_t cost = 0;
    bool operator==(const summary_answer&) const = default;
};

using inference_outcome = std::variant<session::assistant_message, provider_error>;
using summary_outcome = std::variant<summary_answer, provider_error>;

class provider {
  public:
    virtual ~provider() = default;
    virtual asio::awaitable<inference_outcome> infer(inference_request req, stream_sink& sink) = 0;
    // Summarizes a segment of the context for compaction.
    virtual asio::awaitable<summary_outcome> summarize(summary_request req) = 0;
};

}  // namespace wuhu::providers
