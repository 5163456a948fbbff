// OpenAI Chat Completions, streamed: the request body of an inference, and the decoder of the
// response's server-sent events into stream deltas and the assistant message. What OpenAI,
// llama.cpp's server, vLLM and Ollama speak (docs/providers.md).
//
// Request: `model`, `messages`, `tools` (functions with the tools' JSON schemas), `stream:
// true` and `stream_options.include_usage`. The prompt is a `system` message; system-lane
// content (a `developer` message of the projected context) takes the endpoint's role for it
// (`developer` by default; `user` or `system` for servers without it); an assistant message
// carries its `tool_calls`; a tool result is a `tool` message with its call id.
//
// Response: each `data:` is a chunk {choices:[{delta:{content, tool_calls:[{index, id,
// function:{name, arguments}}]}, finish_reason}], usage?}; a tool call arrives in pieces
// keyed by `index` (the id and name first, then the arguments in fragments), several calls
// interleaved or not; usage comes in a last chunk with no choices; `data: [DONE]` ends the
// stream. An `{"error":{...}}` chunk is an error (provider_errors.hpp). A chunk that is not
// that JSON is a malformed stream: a transient error.
//
// Pure: no IO.
#pragma once

#include "providers/provider.hpp"
#include "providers/sse.hpp"
#include "providers/stream_decoder.hpp"

#include <optional>
#include <string>

namespace wuhu::providers {

struct openai_request_options {
    std::string model;                                                  // as the endpoint names it
    session::llm_role system_lane_role = session::llm_role::developer;  // or user, system
    std::optional<std::uint64_t> max_tokens;  // max_completion_tokens, when set
};

std::string openai_request_body(const inference_request& req, const openai_request_options& o);

class openai_stream final : public stream_decoder {
  public:
    // `redact`: the endpoint's API key, kept out of every error message. A call the stream
    // gives no usable id (llama.cpp's server, Ollama) is named `<id_prefix><index>`.
    openai_stream(stream_sink& sink, std::string model, std::string redact = {},
                  std::string id_prefix = "call_")
        : stream_decoder(sink, std::move(model), std::move(redact), std::move(id_prefix)) {}

    // One event of the stream. Deltas go to the sink as they come; `[DONE]` ends it.
    void on_event(const sse_event& e);
};

}  // namespace wuhu::providers
