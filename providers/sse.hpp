// Server-sent events (the HTML Living Standard's `text/event-stream`), parsed as the bytes
// arrive: feed() takes the body in whatever pieces the connection delivers (a line, an event,
// even a CRLF, may be split across pieces) and hands each complete event to a callback.
//
// What the standard says, and this follows: lines end with CRLF, LF or CR; a line starting
// with ':' is a comment (providers send them as keep-alives); `field: value` (one space after
// the colon is dropped; a line without a colon is a field with an empty value); `data` lines
// accumulate, joined by LF; `event` names the event (default "message"); `id` and `retry` are
// kept but not used here; other fields are ignored; a blank line dispatches the event (not if
// it has no data); a UTF-8 byte order mark at the very start is skipped. An event cut off by
// the end of the stream is not dispatched (pending() tells the caller it was cut).
//
// Pure: no IO. An event larger than the limit is an error, so that a server cannot make the
// worker buffer without bound.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace wuhu::providers {

struct sse_event {
    std::string event = "message";
    std::string data;
    std::string id;
    bool operator==(const sse_event&) const = default;
};

class sse_parser {
  public:
    using handler = std::function<void(const sse_event&)>;

    explicit sse_parser(std::size_t max_event_bytes = 8 << 20) : max_(max_event_bytes) {}

    // Parses `bytes`, calling `on_event` for each event they complete. False once an event
    // (or a line) grew past the limit: the stream is unusable from then on, and error() says
    // why.
    bool feed(std::string_view bytes, const handler& on_event);

    // Whether the stream so far ends inside an event (data received but no blank line yet).
    bool pending() const { return !line_.empty() || !data_.empty() || has_fields_; }
    const std::string& error() const { return error_; }

  private:
    void line(const handler& on_event);

    std::size_t max_;
    std::string line_;   // the line being read
    std::string event_;  // the event being built
    std::string data_;
    std::string last_id_;
    bool has_fields_ = false;  // a field of the event being built was read
    bool after_cr_ = false;    // the last byte was a CR (an LF right after it ends nothing)
    bool started_ = false;     // past the optional byte order mark
    std::string error_;
};

}  // namespace wuhu::providers
