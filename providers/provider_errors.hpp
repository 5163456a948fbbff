// How a failed provider call is sorted for the loop's policy (session/loop_policy.hpp), the
// same for every HTTP provider: transient (retried with backoff: 408, 409, 429 with its
// Retry-After, 5xx, 529 overloaded, a connection reset, a stream cut before its end, a
// malformed stream), context_overflow (compact, then retry once: each provider's shapes of
// "the prompt is too long"), fatal (reported in the transcript: 400, 401, 403, 404 and the
// rest, with the provider's own message).
//
// Pure: the message is the provider's `error.message` when the body is its JSON error, else
// the start of the body; `redact` (an API key) never appears in it.
#pragma once

#include "providers/provider.hpp"
#include "runtime/secrets.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace wuhu::providers {

// A provider's answer other than 200: its status, body and Retry-After (already parsed).
provider_error classify_http(std::string_view provider, int status, std::string_view body,
                             std::optional<std::chrono::milliseconds> retry_after,
                             std::string_view redact);

// An error object sent inside a stream (OpenAI's `{"error":{...}}` chunk, Anthropic's `error`
// event): sorted by its type/code and message, as the HTTP status would have been.
provider_error classify_stream_error(std::string_view provider, std::string_view type,
                                     std::string_view message, std::string_view redact);

// Whether a provider's error message says the context was too long (OpenAI, vLLM, llama.cpp's
// server, Anthropic, Ollama).
bool says_context_overflow(std::string_view code_or_type, std::string_view message);

// `text` with every occurrence of `secret` replaced by "***", cut to `max` bytes on a UTF-8
// boundary: the one redaction of the runtime (runtime/secrets.hpp).
using runtime::redacted;

// An HTTP Retry-After value: delay-seconds (a decimal number) or an HTTP-date, relative to
// `now_unix_ms`; nullopt if it is neither.
std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view value,
                                                           std::int64_t now_unix_ms);

}  // namespace wuhu::providers
