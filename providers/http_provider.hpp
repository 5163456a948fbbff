// The `openai` and `anthropic` providers: one endpoint (a base URL, a key, a default model),
// its HTTP client (connections reused across the sessions that use it), and the codec of its
// API (providers/openai.hpp, providers/anthropic.hpp).
//
// An inference is one streamed request. A 200 with an event stream is decoded as it arrives
// (text and tool-call deltas reach the sink at once); the stream must reach its end marker
// (`[DONE]`, `message_stop`), or the inference is a transient error and what was streamed is
// not committed (the loop retries the turn). Any other status is sorted by
// provider_errors.hpp, with the server's Retry-After. A transport failure (connect, timeout,
// reset) is transient. Cancellation (abort, the loop's timeout) closes the connection at once.
// The API key goes in one header and nowhere else: never in an error or a log line.
//
// Summaries for compaction are inferences too: the segment, then an instruction to
// summarize it, no tools; the text is the summary.
#pragma once

#include "providers/http_client.hpp"
#include "providers/provider.hpp"
#include "runtime/clock.hpp"

#include <memory>
#include <string>

namespace wuhu::providers {

namespace asio = boost::asio;

enum class api_kind { openai, anthropic, replay };

struct endpoint_config {
    std::string name;  // what a session's model names: "<name>/<model>"
    api_kind api = api_kind::openai;
    http::base_url base;
    std::string api_key;  // empty: no key is sent (a local server)
    std::string default_model;
    // openai: the role system-lane content takes (developer, or user/system for servers that
    // lack developer).
    session::llm_role system_lane_role = session::llm_role::developer;
    std::uint64_t max_tokens = 0;  // 0: not sent (openai), 4096 (anthropic, which requires it)
    http::header_list headers;     // more headers for every request
    http::client_options http;
    std::string replay_file;  // replay: the recording played back
    std::string record_to;    // openai, anthropic: record what the endpoint answers here
};

class http_provider final : public provider {
  public:
    // Throws std::invalid_argument if the endpoint's CA certificates cannot be loaded.
    http_provider(asio::any_io_executor ex, endpoint_config config, runtime::clock& clk);

    // `req.model` is the model as the endpoint names it (empty: the endpoint's default).
    asio::awaitable<inference_outcome> infer(inference_request req, stream_sink& sink) override;
    asio::awaitable<summary_outcome> summarize(summary_request req) override;

    const endpoint_config& config() const { return config_; }
    const http::client& client() const { return client_; }

  private:
    http::request request_for(const inference_request& req) const;
    asio::awaitable<inference_outcome> attempt(inference_request req, stream_sink& sink);

    endpoint_config config_;
    runtime::clock& clock_;
    http::client client_;
};

}  // namespace wuhu::providers
