// The subscribe reply of a loaded session (server.hpp): a page copied from the loop's state on
// the executor, serialized there when small and on the replies thread when large.
#include "broker/server.hpp"

#include "session/patch.hpp"

namespace wuhu::broker {

namespace s = wuhu::session;

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

std::variant<server::subscribe_page, std::string> server::subscribe(
    worker::agent_loop& loop, const protocol::subscribe_request& req) {
    const auto& st = loop.state();
    if (!req.since.le(st.version())) {
        return protocol::error_reply(make_error_code(s::errc::invalid_version));
    }
    // A page at a time: what one reply holds (and what the executor copies for it) is bounded.
    const auto to = s::page_end(st, req.since, options_.subscribe_page_items,
                                options_.subscribe_page_bytes);
    subscribe_page page;
    page.more = to != st.version();
    auto p = s::between(st, req.since, to, loop.current());
    if (!p) {
        return protocol::error_reply(p.error());
    }
    page.patch = std::move(*p);
    page.patch.state = loop.status_now();
    page.step = s::assistant_count(st);
    if (page.more) {
        page.step = 0;  // the assistant messages up to the page's end
        for (std::uint64_t i = 0; i < to.transcript; ++i) {
            page.step += std::holds_alternative<s::assistant_message>(st.transcript[i].body) ? 1 : 0;
        }
    } else if (const auto& m = loop.inflight()) {
        page.streaming = protocol::inflight{m->step, m->epoch, m->text, m->deltas, {}};
        for (const auto& c : m->tool_calls) {
            page.streaming->tool_calls.push_back({c.id, c.name, c.arguments});
        }
    }
    return page;
}

}  // namespace wuhu::broker
