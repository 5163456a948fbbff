// The `replay` provider: records what another provider answered, and plays it back.
//
// Recording wraps a provider: each inference and summary goes to it, and its request (the
// session, the step, the model, how many messages and tools), its streamed deltas with their
// times (milliseconds after the request), and its outcome (the assistant message, the
// summary, or the error with its kind and Retry-After) are appended to a file as one JSON
// line. Playing back reads that file: an inference of session S at step N gets the next
// record of (S, N) in the order they were recorded (a retried turn gets the next attempt's
// outcome), its deltas streamed with the same chunking and timing on the session's clock, and
// its outcome. A recorded session replays to the identical transcript, with no model and no
// network (benchmarks and tests of real conversations). A request the recording does not have
// is a fatal error that says which.
//
// File format (docs/providers.md): JSON lines of
//   {"session":"s","step":0,"kind":"infer","model":"gpt-4o","messages":3,"tools":1,
//    "events":[{"after_ms":12,"text":"Hel"},{"after_ms":15,"tool_call":{"id":"c1",
//              "name":"echo","arguments":"{\"te"}}],
//    "outcome":{"message":{"text":"…","tool_calls":[…],"usage":{…},"model":"…"}}}
// or "outcome":{"error":{"kind":"transient","message":"…","retry_after_ms":7000}}, and for
// summaries "kind":"summary" with "outcome":{"summary":"…","usage":{…},"model":"…"}. The
// usage a stream reported as it went is an event too: {"after_ms":3,"usage":{…},"model":"…"}.
#pragma once

#include "providers/provider.hpp"
#include "runtime/clock.hpp"

#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <tuple>

namespace wuhu::providers {

namespace asio = boost::asio;

using std::chrono::milliseconds;

class replay_provider final : public provider {
  public:
    // Records what `inner` answers, appending to `file`. Throws std::invalid_argument if the
    // file cannot be opened for appending.
    static std::unique_ptr<replay_provider> recording(std::unique_ptr<provider> inner,
                                                      const std::filesystem::path& file,
                                                      runtime::clock& clk);
    // Plays `file` back. Throws std::invalid_argument if it cannot be read or a line is not a
    // record (naming the line).
    static std::unique_ptr<replay_provider> playing(const std::filesystem::path& file,
                                                    runtime::clock& clk);

    asio::awaitable<inference_outcome> infer(inference_request req, stream_sink& sink) override;
    asio::awaitable<summary_outcome> summarize(summary_request req) override;

    struct event {
        std::int64_t after_ms = 0;
        bool is_text = true;
        std::string text;
        tool_call_delta call;
        std::optional<reported_usage> usage;  // set: a usage report (neither text nor call)
    };
    struct record {
        std::vector<event> events;
        std::variant<session::assistant_message, summary_answer, provider_error> outcome;
    };

  private:
    explicit replay_provider(runtime::clock& clk) : clock_(clk) {}
    using key = std::tuple<std::string, std::string, std::uint64_t>;  // session, kind, step

    runtime::clock& clock_;
    std::unique_ptr<provider> inner_;            // recording: what is recorded
    std::ofstream out_;                          // recording: the file
    std::map<key, std::deque<record>> records_;  // playing back: what is left, in order
};

}  // namespace wuhu::providers
