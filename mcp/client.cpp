#include "mcp/client.hpp"

#include "session/text.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

namespace wuhu::mcp {

namespace json = boost::json;

namespace {

constexpr std::string_view version = "1";
// A server's tools the client takes (the rest are left out, and said).
constexpr std::size_t max_tools = 1000;
// Answers to a server's own requests (ping) in flight at most.
constexpr std::size_t max_answering = 8;
// What the answer to a notification (202) or an error status is read up to.
constexpr std::size_t max_error_body = 4096;

}  // namespace

namespace {

http::client_options listening(http::client_options o) {
    o.first_byte_timeout = std::chrono::hours(24 * 365);
    o.idle_timeout = std::chrono::hours(24 * 365);
    return o;
}

}  // namespace

client::client(asio::any_io_executor ex, endpoint e)
    : ex_(ex),
      endpoint_(std::move(e)),
      http_(ex, endpoint_.url, endpoint_.http),
      listener_(ex, endpoint_.url, listening(endpoint_.http)) {}

http::request client::request_for(std::string body, bool with_session) const {
    http::request r;
    r.method = body.empty() ? "GET" : "POST";          // a GET opens the event stream
    r.target = endpoint_.url.path.empty() ? "/" : "";  // the endpoint is the URL's path
    r.headers = endpoint_.headers;
    if (r.method == "POST") {
        r.headers.emplace_back("Content-Type", "application/json");
        r.headers.emplace_back("Accept", "application/json, text/event-stream");
    } else {
        r.headers.emplace_back("Accept", "text/event-stream");
    }
    r.body = std::move(body);
    if (with_session && !session_.empty()) {
        r.headers.emplace_back("Mcp-Session-Id", session_);
    }
    if (with_session && !protocol_version_.empty()) {
        r.headers.emplace_back("MCP-Protocol-Version", protocol_version_);
    }
    return r;
}

std::string client::scrubbed(std::string text) const {
    for (const auto& [name, value] : endpoint_.headers) {
        if (value.size() < 4) {
            continue;  // too short to be a secret, and would scrub ordinary words
        }
        for (auto at = text.find(value); at != std::string::npos; at = text.find(value, at)) {
            text.replace(at, value.size(), "[redacted]");
        }
    }
    return session::sanitized(text);
}

void client::answer_later(const json::value& id, const std::string& method) {
    if (answering_ >= max_answering) {
        return;  // a server that floods the client with requests gets no more answers
    }
    ++answering_;
    asio::co_spawn(ex_, answer(shared_from_this(), answer_to_server_request(id, method)),
                   asio::detached);
}

asio::awaitable<outcome> client::post(std::string body, std::optional<std::int64_t> id,
                                      std::string token, std::function<void()> on_progress) {
    const std::string carried = session_;
    bool forgotten = false;
    auto first = post_once(body, id, token, on_progress, &forgotten);
    auto out = co_await std::move(first);
    if (!forgotten) {
        co_return out;
    }
    // The server forgot the session (it restarted): a new one (unless another request made it
    // meanwhile), and the message once more.
    if (session_ == carried) {
        auto again = initialize();
        auto init = co_await std::move(again);
        if (!init) {
            co_return outcome{outcome::failed, {}, "initializing again: " + init.error()};
        }
    }
    bool twice = false;
    auto second = post_once(std::move(body), id, std::move(token), std::move(on_progress), &twice);
    co_return co_await std::move(second);
}

asio::awaitable<outcome> client::post_once(std::string body, std::optional<std::int64_t> id,
                                           std::string token, std::function<void()> on_progress,
                                           bool* forgotten, bool initializing) {
    auto req = request_for(std::move(body), !initializing);
    const bool sent_session = !initializing && !session_.empty();
    int status = 0;
    bool event_stream = false;
    std::string error_body;
    std::optional<reader> rd;
    outcome out;
    bool answered = false;
    auto on_head = [&](const http::response_head& h) {
        status = h.status;
        event_stream = h.header("content-type").starts_with("text/event-stream");
        if (status == 200) {
            rd.emplace(event_stream);
            if (initializing) {
                // The new session's id: every message after initialize carries it.
                session_ = session::sanitized(h.header("mcp-session-id").substr(0, 256));
            }
        }
    };
    auto on_message = [&](message m) {
        if (answered) {
            return;
        }
        if (m.kind == message::response) {
            if (id && m.id.is_int64() && m.id.as_int64() == *id) {
                answered = true;
                if (m.error_code) {
                    out = outcome{outcome::server_error,
                                  {},
                                  "the server's error " + std::to_string(*m.error_code) + ": " +
                                      scrubbed(m.error_message.substr(0, 1000))};
                } else {
                    out = outcome{outcome::ok, std::move(m.result), {}};
                }
            }
            return;
        }
        if (m.kind == message::request) {
            answer_later(m.id, m.method);
            return;
        }
        if (m.method == "notifications/progress") {
            if (auto p = parse_progress(m.params); p && p->token == token && on_progress) {
                on_progress();
            }
        } else if (notified_) {
            notified_(m.method);
        }
    };
    auto on_body = [&](std::string_view piece) {
        if (!rd) {
            error_body.append(piece.substr(0, max_error_body - error_body.size()));
            return error_body.size() < max_error_body;
        }
        if (!rd->feed(piece, on_message)) {
            return false;
        }
        return !answered;  // the response came: the stream is not read further
    };
    std::string detail;
    auto sending = http_.send(std::move(req), on_head, on_body, &detail);
    const auto ec = co_await std::move(sending);
    if (ec == asio::error::operation_aborted) {
        if (id && !initializing) {
            // The request was cut short (an abort, a timeout): the server stops its work. (An
            // initialize is never cancelled: the protocol says so.)
            asio::co_spawn(ex_, send_cancelled(shared_from_this(), *id), asio::detached);
        }
        co_return outcome{outcome::cancelled, {}, "cancelled"};
    }
    if (answered) {
        co_return out;
    }
    if (ec) {
        co_return outcome{outcome::failed,
                          {},
                          endpoint_.name + ": " + ec.message() +
                              (detail.empty() ? "" : " (" + scrubbed(detail) + ")")};
    }
    if (status == 404 && sent_session && forgotten != nullptr) {
        *forgotten = true;
        co_return outcome{outcome::failed, {}, "the server forgot the session"};
    }
    if (!id && (status == 202 || status == 200)) {
        co_return outcome{outcome::ok, {}, {}};  // a notification, accepted
    }
    if (status != 200) {
        co_return outcome{outcome::failed,
                          {},
                          endpoint_.name + " answered HTTP " + std::to_string(status) + ": " +
                              scrubbed(error_body.substr(0, 300))};
    }
    if (!rd->finish(on_message)) {
        co_return outcome{outcome::failed, {}, endpoint_.name + ": " + rd->error()};
    }
    if (answered) {
        co_return out;
    }
    co_return outcome{
        outcome::failed, {}, endpoint_.name + ": the answer ended without the response"};
}

asio::awaitable<boost::system::result<server_info, std::string>> client::initialize() {
    if (initializing_) {
        // Another request is initializing a new session (the server forgot the old one): its
        // outcome is this one's too.
        asio::steady_timer poll(ex_);
        while (initializing_) {
            poll.expires_after(std::chrono::milliseconds(10));
            co_await poll.async_wait(asio::use_awaitable);
        }
        if (session_.empty() || protocol_version_.empty()) {
            co_return std::string("initializing failed");
        }
        co_return info_;
    }
    initializing_ = true;
    struct done {
        bool& flag;
        ~done() { flag = false; }
    } guard{initializing_};
    const auto id = next_id_++;
    auto posting = post_once(initialize_request(id, version), id, "", {}, nullptr, true);
    auto out = co_await std::move(posting);
    if (out.kind != outcome::ok) {
        protocol_version_.clear();
        co_return out.error;
    }
    auto info = parse_initialize(out.result);
    if (!info) {
        protocol_version_.clear();
        co_return info.error();
    }
    protocol_version_ = info->protocol_version;
    info_ = *info;
    auto notifying = post_once(initialized_notification(), std::nullopt, "", {}, nullptr);
    auto done_ = co_await std::move(notifying);
    if (done_.kind != outcome::ok) {
        protocol_version_.clear();
        co_return "notifications/initialized: " + done_.error;
    }
    co_return *info;
}

asio::awaitable<boost::system::result<std::vector<tool_info>, std::string>> client::list_tools(
    std::vector<std::string>* skipped) {
    std::vector<tool_info> all;
    std::string cursor;
    for (int page = 0; page < 100; ++page) {
        const auto id = next_id_++;
        auto posting = post(tools_list_request(id, cursor), id, "", {});
        auto out = co_await std::move(posting);
        if (out.kind != outcome::ok) {
            co_return "tools/list: " + out.error;
        }
        auto p = parse_tools_page(out.result, skipped);
        if (!p) {
            co_return p.error();
        }
        for (auto& t : p->tools) {
            if (all.size() == max_tools) {
                if (skipped != nullptr) {
                    skipped->push_back("the tools past the first " + std::to_string(max_tools));
                }
                co_return all;
            }
            all.push_back(std::move(t));
        }
        if (p->next_cursor.empty() || p->next_cursor == cursor) {
            co_return all;
        }
        cursor = std::move(p->next_cursor);
    }
    co_return std::string("tools/list: more than 100 pages");
}

asio::awaitable<outcome> client::call(std::string tool, json::value arguments,
                                      std::function<void()> on_progress) {
    const auto id = next_id_++;
    const std::string token = "wuhu-" + std::to_string(id);
    auto posting =
        post(tools_call_request(id, tool, arguments, token), id, token, std::move(on_progress));
    co_return co_await std::move(posting);
}

asio::awaitable<client::heard> client::listen(std::string* why) {
    auto req = request_for("");
    int status = 0;
    std::optional<reader> rd;
    bool changed = false;
    auto on_head = [&](const http::response_head& h) {
        status = h.status;
        if (status == 200 && h.header("content-type").starts_with("text/event-stream")) {
            rd.emplace(true);
        }
    };
    auto on_message = [&](message m) {
        if (m.kind == message::request) {
            answer_later(m.id, m.method);
        } else if (m.kind == message::notification) {
            if (m.method == "notifications/tools/list_changed") {
                changed = true;
            } else if (notified_) {
                notified_(m.method);
            }
        }
    };
    auto on_body = [&](std::string_view piece) {
        if (!rd) {
            return false;
        }
        return rd->feed(piece, on_message) && !changed;
    };
    // The stream may stay quiet for as long as the server has nothing to say.
    std::string detail;
    auto sending = listener_.send(std::move(req), on_head, on_body, &detail);
    const auto ec = co_await std::move(sending);
    if (changed) {
        co_return heard::changed;
    }
    if (ec) {
        *why = ec.message() + (detail.empty() ? "" : " (" + scrubbed(detail) + ")");
        co_return heard::ended;
    }
    if (status == 404) {
        *why = "the server forgot the session";
        co_return heard::ended;
    }
    if (!rd) {
        *why = "HTTP " + std::to_string(status) + " to its GET";
        co_return heard::unsupported;
    }
    *why = rd->error().empty() ? "the server ended it" : rd->error();
    co_return heard::ended;
}

asio::awaitable<void> client::send_cancelled(std::shared_ptr<client> self, std::int64_t id) {
    auto posting = self->post_once(cancelled_notification(id, "the call was cut short"),
                                   std::nullopt, "", {}, nullptr);
    co_await std::move(posting);
}

asio::awaitable<void> client::answer(std::shared_ptr<client> self, std::string body) {
    struct done {
        std::size_t& n;
        ~done() { --n; }
    } guard{self->answering_};
    auto posting = self->post_once(std::move(body), std::nullopt, "", {}, nullptr);
    co_await std::move(posting);
}

}  // namespace wuhu::mcp
