// What the providers' stream decoders (openai.hpp, anthropic.hpp) share: the sink, the
// message being assembled (text, tool calls keyed by the stream's index, usage, model), its
// end, its first error; and reading the JSON fields of a stream's events.
#pragma once

#include "providers/provider.hpp"

#include <boost/json/value.hpp>

#include <map>
#include <optional>
#include <string>

namespace wuhu::providers {

class stream_decoder {
  public:
    // The stream reached its end marker, or failed: then no more events are read.
    bool done() const { return done_ || error_.has_value(); }
    const std::optional<provider_error>& error() const { return error_; }
    // The assistant message streamed so far (complete once done() without error()): its tool
    // calls in the stream's order, a call without a usable id named `<id_prefix><index>`.
    session::assistant_message message() const;

  protected:
    // `redact`: the endpoint's API key, kept out of every error message.
    stream_decoder(stream_sink& sink, std::string model, std::string redact, std::string id_prefix)
        : sink_(sink),
          model_(std::move(model)),
          redact_(std::move(redact)),
          id_prefix_(std::move(id_prefix)) {}
    // Tells the sink the usage so far (after the stream reported some).
    void reported() { sink_.usage(reported_usage{usage_, model_, 0}); }
    // The first failure is kept; the stream is done.
    void fail(provider_error e) {
        if (!error_) {
            error_ = std::move(e);
        }
    }

    struct partial_call {
        std::string id;
        std::string name;
        std::string arguments;  // JSON text, as it arrived
    };

    stream_sink& sink_;
    std::string model_;
    std::string redact_;
    std::string text_;
    std::map<std::int64_t, partial_call> calls_;  // by the stream's index
    session::token_usage usage_;
    bool done_ = false;

  private:
    std::string id_prefix_;
    std::optional<provider_error> error_;
};

// Fields of a stream event's JSON, read leniently: a field that is missing or of another
// type is absent.
namespace event_json {
std::string_view text_of(const boost::json::value* v);
std::optional<std::uint64_t> count_of(const boost::json::object& o, std::string_view key);
const boost::json::object* object_at(const boost::json::object& o, std::string_view key);
}  // namespace event_json

}  // namespace wuhu::providers
