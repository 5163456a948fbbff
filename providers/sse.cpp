#include "providers/sse.hpp"

namespace wuhu::providers {

bool sse_parser::feed(std::string_view bytes, const handler& on_event) {
    if (!error_.empty()) {
        return false;
    }
    while (!bytes.empty()) {
        if (after_cr_) {
            after_cr_ = false;
            if (bytes.front() == '\n') {  // the LF of a CRLF split across pieces
                bytes.remove_prefix(1);
                continue;
            }
        }
        const auto at = bytes.find_first_of("\r\n");
        const auto part = bytes.substr(0, at);
        if (line_.size() + part.size() + data_.size() > max_) {
            error_ = "an event of more than " + std::to_string(max_) + " bytes";
            return false;
        }
        line_.append(part);
        if (at == std::string_view::npos) {
            break;
        }
        after_cr_ = bytes[at] == '\r';
        bytes.remove_prefix(at + 1);
        line(on_event);
    }
    return true;
}

void sse_parser::line(const handler& on_event) {
    std::string_view l = line_;
    if (!started_) {
        started_ = true;
        if (l.starts_with("\xEF\xBB\xBF")) {
            l.remove_prefix(3);
        }
    }
    if (l.empty()) {
        if (!data_.empty()) {
            data_.pop_back();  // the LF after the last data line
            sse_event e;
            if (!event_.empty()) {
                e.event = std::move(event_);
            }
            e.data = std::move(data_);
            e.id = last_id_;
            on_event(e);
        }
        event_.clear();
        data_.clear();
        has_fields_ = false;
    } else if (l.front() != ':') {  // not a comment
        const auto colon = l.find(':');
        const auto field = l.substr(0, colon);
        std::string_view value;
        if (colon != std::string_view::npos) {
            value = l.substr(colon + 1);
            if (value.starts_with(' ')) {
                value.remove_prefix(1);
            }
        }
        has_fields_ = true;
        if (field == "data") {
            data_.append(value);
            data_.push_back('\n');
        } else if (field == "event") {
            event_.assign(value);
        } else if (field == "id" && value.find('\0') == std::string_view::npos) {
            last_id_.assign(value);
        }  // `retry` and unknown fields: nothing to do here
    }
    line_.clear();
}

}  // namespace wuhu::providers
