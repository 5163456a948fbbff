// The `scripted` provider: deterministic responses from a JSON script, for tests, demos and
// other teams' integration tests. The format is documented in docs/scripted-provider.md.
//
// Response i answers the inference whose request has step == i (the number of assistant
// messages already in the transcript), so a session that is re-run after a crash gets the same
// answers. Failures listed in `fail_first` are returned by the first attempts of that step.
#pragma once

#include "providers/provider.hpp"
#include "runtime/clock.hpp"
#include "session/codec.hpp"

#include <map>
#include <memory>
#include <optional>

namespace wuhu::providers {

namespace asio = boost::asio;

using std::chrono::milliseconds;

struct scripted_call {
    std::string id;  // empty: "call_<step>_<index>"
    std::string name;
    std::string arguments;  // JSON text
};

// A failed attempt, and the usage the provider reported before it failed (billed), if any.
struct scripted_failure {
    provider_error error;
    std::optional<session::token_usage> usage;
};

struct scripted_response {
    std::vector<std::string> chunks;  // streamed text, in pieces
    milliseconds delay{0};            // before the first chunk
    milliseconds chunk_delay{0};      // between chunks
    std::vector<scripted_call> tool_calls;
    std::optional<session::token_usage> usage;  // absent: estimated from the context and text
    // Reported as the stream begins (as Anthropic reports the input's), before the first chunk:
    // what an answer that never completes (aborted, cut, timed out) was billed.
    std::optional<session::token_usage> early_usage;
    std::vector<scripted_failure> fail_first;  // the first attempts of this step fail so
};

struct script {
    std::vector<scripted_response> responses;
    std::vector<std::string> summaries;  // i-th compaction's summary; absent: a generated one
    milliseconds summary_delay{0};       // each summary's wait before it is returned
    std::string model = "scripted";
};

// Parses a script; a decode_error names the offending field.
session::decoded<script> parse_script(std::string_view json_text);

class scripted_provider final : public provider {
  public:
    scripted_provider(script s, runtime::clock& clk)
        : scripted_provider(std::make_shared<const script>(std::move(s)), clk) {}
    // One script for many providers (a worker's sessions each have one: a copy each cost a
    // loaded session ~0.3 KiB).
    scripted_provider(std::shared_ptr<const script> s, runtime::clock& clk)
        : script_(std::move(s)), clock_(clk) {}

    asio::awaitable<inference_outcome> infer(inference_request req, stream_sink& sink) override;
    asio::awaitable<summary_outcome> summarize(summary_request req) override;

    // How many times infer() was called for `step` (retries included).
    int attempts(std::uint64_t step) const;
    std::uint64_t calls() const { return calls_; }
    // Every request received, in order (for tests: what the model saw). Off by default: the
    // copies grow with the session.
    void record_requests(bool on) { record_ = on; }
    const std::vector<inference_request>& requests() const { return requests_; }

  private:
    std::shared_ptr<const script> script_;
    runtime::clock& clock_;
    std::map<std::uint64_t, int> attempts_;
    std::vector<inference_request> requests_;
    bool record_ = false;
    std::uint64_t calls_ = 0;
    std::size_t summaries_ = 0;
};

}  // namespace wuhu::providers
