// Secrets kept out of everything printed: log lines, replies, events, metrics, error messages.
//
// The one place that knows what a secret looks like in a URL or a connection string. Every
// path that prints a URL (NATS servers on connect, reconnect and error; PostgreSQL on every
// error; provider endpoints) prints `redacted_url(url)`, and every error text that may echo a
// URL or a key passes through `scrubbed` (or `redacted`, for one secret) first.
//
// Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace wuhu::runtime {

// A URL, a comma-separated list of URLs, or a libpq keyword string, with every credential
// replaced by "***":
//
//   nats://ann:s3cret@host:4222             -> nats://***@host:4222
//   nats://tok3n@a:4222,tls://b:4222        -> nats://***@a:4222,tls://b:4222
//   postgresql://u:p@db/wuhu?password=x     -> postgresql://***@db/wuhu?password=***
//   host=db user=wuhu password='p w'        -> host=db user=wuhu password=***
//
// Query parameters and keywords that carry secrets: password, sslpassword, passfile, token,
// secret, key, api_key, sslkey (case-insensitive).
std::string redacted_url(std::string_view url);

// The secrets inside a URL, a list of URLs or a keyword string, as `redacted_url` finds them
// (user information, and the values of the secret parameters); each at least one byte long.
std::vector<std::string> url_secrets(std::string_view url);

// `text` with each occurrence of `secret` replaced by "***" (an empty secret: nothing), and
// its end hidden too when it ends with the first four or more bytes of the secret (a text cut
// in the middle of it); then cut to at most `max` bytes (never inside a UTF-8 sequence), with
// "…" added when cut.
std::string redacted(std::string_view text, std::string_view secret, std::size_t max = 2000);

// `text` with every secret of `url` (url_secrets), and the URL itself, replaced: what an
// error message that may echo a connection string may print.
std::string scrubbed(std::string_view text, std::string_view url);

}  // namespace wuhu::runtime
