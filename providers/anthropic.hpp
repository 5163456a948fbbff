// Anthropic Messages API, streamed: the request body of an inference, and the decoder of the
// response's server-sent events into stream deltas and the assistant message.
//
// Request: `model`, `max_tokens` (required by the API), `system` (the prompt: the context's
// system messages, which the projection puts at the top only), `messages`, `tools` (name,
// description, input_schema), `stream: true`. Lane content (user and the system lane's
// `developer` messages) is `user`; an assistant message is text and `tool_use` blocks; tool
// results are `tool_result` blocks of a `user` message. Consecutive messages of one role are
// merged into one (the API requires the roles to alternate), and empty text blocks are left
// out (the API refuses them).
//
// Response events: `message_start` (the model, input usage: input, cache reads, cache
// writes), `content_block_start` (a text block, or a `tool_use` block with its id and name),
// `content_block_delta` (`text_delta`, or `input_json_delta` with a piece of a tool call's
// arguments), `content_block_stop`, `message_delta` (stop reason, output tokens so far),
// `message_stop` (the end), `ping`, and `error` (classified by provider_errors.hpp). Other
// block and delta types (thinking) are skipped. Data that is not the JSON of its event is a
// malformed stream: a transient error.
//
// Pure: no IO.
#pragma once

#include "providers/provider.hpp"
#include "providers/sse.hpp"
#include "providers/stream_decoder.hpp"

#include <optional>
#include <string>

namespace wuhu::providers {

struct anthropic_request_options {
    std::string model;  // as the endpoint names it
    std::uint64_t max_tokens = 4096;
};

std::string anthropic_request_body(const inference_request& req,
                                   const anthropic_request_options& o);

class anthropic_stream final : public stream_decoder {
  public:
    // `redact`: the endpoint's API key, kept out of every error message. A call the stream
    // gives no usable id is named `<id_prefix><index>`.
    anthropic_stream(stream_sink& sink, std::string model, std::string redact = {},
                     std::string id_prefix = "toolu_")
        : stream_decoder(sink, std::move(model), std::move(redact), std::move(id_prefix)) {}

    // One event of the stream. Deltas go to the sink as they come; `message_stop` ends it.
    void on_event(const sse_event& e);
};

}  // namespace wuhu::providers
