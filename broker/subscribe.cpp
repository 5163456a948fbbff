// The subscribe reply (server.hpp): a page copied from the loop's state on the executor (or
// from the state read from the store, for a session nobody owns), serialized there when small
// and on the replies thread when large.
#include "broker/server.hpp"

#include "runtime/offload.hpp"
#include "session/patch.hpp"

namespace wuhu::broker {

namespace s = wuhu::session;

namespace {

// A subscribe page of at least this many entries and facts is serialized off the executor
// (below it, the hop to another thread costs more than the serialization).
constexpr std::size_t off_executor_items = 64;

}  // namespace

std::size_t server::subscribe_page::items() const {
    std::size_t n = patch.transcript.size();
    for (const auto& facts : patch.journal) {
        n += facts.size();
    }
    return n;
}

std::vector<std::string> server::subscribe_page::replies(std::size_t max_reply_bytes) const {
    return protocol::chunked(protocol::subscribe_reply(patch, *patch.state, step, streaming, more),
                             max_reply_bytes);
}

std::variant<server::subscribe_page, answer> server::subscribe(
    worker::agent_loop& loop, const protocol::subscribe_request& req) {
    const auto& m = loop.inflight();
    return page_of(loop.state(), req, loop.current(), loop.status_now(), m ? &*m : nullptr);
}

std::variant<server::subscribe_page, answer> server::subscribe(
    const s::session_state& st, const protocol::subscribe_request& req) {
    // Epoch 0, seq 0: any status an owner publishes later is newer.
    const auto now = s::status_of(st, s::loop_state::idle);
    return page_of(st, req, s::loop_state::idle, now, nullptr);
}

std::variant<server::subscribe_page, answer> server::page_of(
    const s::session_state& st, const protocol::subscribe_request& req, s::loop_state current,
    const s::status& now, const worker::inflight_message* streaming) {
    if (!req.since.le(st.version())) {
        return answer::error(make_error_code(s::errc::invalid_version));
    }
    // A page at a time: what one reply holds (and what the executor copies for it) is bounded.
    const auto to = s::page_end(st, req.since, options_.subscribe_page_items,
                                options_.subscribe_page_bytes);
    subscribe_page page;
    page.more = to != st.version();
    auto p = s::between(st, req.since, to, current);
    if (!p) {
        return answer::error(p.error());
    }
    page.patch = std::move(*p);
    page.patch.state = now;
    page.step = s::assistant_count(st);
    if (page.more) {
        page.step = 0;  // the assistant messages up to the page's end
        for (std::uint64_t i = 0; i < to.transcript; ++i) {
            page.step += std::holds_alternative<s::assistant_message>(st.transcript[i].body) ? 1 : 0;
        }
    } else if (streaming != nullptr) {
        const auto& m = *streaming;
        page.streaming = protocol::inflight{m.step, m.epoch, m.text, m.deltas, {}};
        for (const auto& c : m.tool_calls) {
            page.streaming->tool_calls.push_back({c.id, c.name, c.arguments});
        }
    }
    return page;
}

asio::awaitable<answer> server::serialize(std::variant<subscribe_page, answer> page_or_error) {
    using replies = std::vector<std::string>;
    if (auto* error = std::get_if<answer>(&page_or_error)) {
        co_return std::move(*error);
    }
    auto& page = std::get<subscribe_page>(page_or_error);
    if (page.items() < off_executor_items) {
        co_return answer::ok(page.replies(options_.max_reply_bytes));
    }
    auto serializing =
        runtime::run_on<replies>(replies_.get_executor(),
                                [built = std::move(page), max = options_.max_reply_bytes] {
                                    return built.replies(max);
                                });
    auto serialized = co_await std::move(serializing);
    co_return answer::ok(std::move(serialized));
}

}  // namespace wuhu::broker
