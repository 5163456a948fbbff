#include "worker/tool_runner.hpp"

#include "session/loop_policy.hpp"
#include "worker/json_schema.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/json/parse.hpp>

namespace wuhu::worker {

using namespace boost::asio::experimental::awaitable_operators;
namespace s = wuhu::session;

namespace {

constexpr milliseconds tool_grace{1000};

// Arguments that are not JSON, or that the tool's schema refuses, never reach the tool: the
// model gets the reason as the tool's error result (and may try again).
std::optional<std::string> invalid_arguments(const tool& t, const std::string& args) {
    boost::system::error_code ec;
    const auto value = boost::json::parse(args, ec);
    if (ec) {
        return "invalid arguments: not JSON (" + ec.message() + ")";
    }
    const auto schema = boost::json::parse(t.spec().schema, ec);
    if (ec) {
        return std::nullopt;  // a tool without a usable schema takes what it is given
    }
    if (auto why = schema_violation(value, schema)) {
        return "invalid arguments: " + *why;
    }
    return std::nullopt;
}

// A throwing tool becomes an error result (a named coroutine with by-value parameters inside
// the co_await expression: see the g++ 12 note in docs/decisions.md).
asio::awaitable<tool_output> guarded_execute(tool& t, std::string args, tool_call_context ctx) {
    if (auto why = invalid_arguments(t, args)) {
        co_return tool_output{std::move(*why), true};
    }
    try {
        tool_output out = co_await t.execute(std::move(args), ctx);
        co_return out;
    } catch (const std::exception& e) {
        co_return tool_output{std::string("tool failed: ") + e.what(), true};
    }
}

}  // namespace

tool_runner::tool_runner(session_writer& w, const tool_registry& tools, clock& clk,
                         milliseconds timeout, abort_signal& abort)
    : writer_(w), tools_(tools), clock_(clk), timeout_(timeout), abort_(abort) {}

asio::awaitable<bool> tool_runner::schedule_timer(s::timer t) {
    auto task = writer_.record(std::move(t));
    const bool ok = co_await std::move(task);
    co_return ok;
}

asio::awaitable<bool> tool_runner::close_call(s::tool_call call, std::string output) {
    auto task = writer_.record(s::tool_result{call.id, call.name, std::move(output), true});
    const bool ok = co_await std::move(task);
    co_return ok;
}

asio::awaitable<void> tool_runner::run() {
    const auto& calls = writer_.state().tool_calls;  // changes as results are recorded
    for (std::size_t i = 0; i < calls.size(); ++i) {
        const s::tool_call_state tc = calls[i];  // a copy: the state changes below
        tool* t = tools_.find(tc.call.name, writer_.state().config.tools);
        const auto action = s::next_tool_action(tc, t != nullptr, t != nullptr && t->idempotent());
        if (action == s::tool_action::skip) {
            continue;
        }
        if (action != s::tool_action::run) {
            // An unknown tool; or recovery of a call that may have run, where running it again
            // could repeat its effect.
            auto closing = close_call(tc.call, action == s::tool_action::unknown
                                                   ? s::unknown_tool_result(tc.call.name)
                                                   : s::interrupted_tool_result());
            if (!co_await std::move(closing)) {
                co_return;
            }
            continue;
        }
        if (tc.status == s::tool_status::not_started) {
            auto task = writer_.record(tool_started{tc.call.id});
            if (!co_await std::move(task)) {
                co_return;
            }
        }
        abort_.arm();
        // A tool with a timeout of its own ends its call by the deadline itself, saying why
        // (which attempts failed, and how): the runner's timer, a second later, is the backstop.
        const auto own = t->timeout();
        const milliseconds limit = own.value_or(timeout_);
        const milliseconds backstop = own ? limit + tool_grace : limit;
        tool_call_context ctx{writer_.sid(), tc.call.id,
                              s::unix_ms{clock_.now().value + limit.count()}, *this};
        auto r = co_await (guarded_execute(*t, tc.call.arguments, ctx) || abort_.wait() ||
                           clock_.sleep(backstop));
        abort_.disarm();
        if (r.index() == 1) {
            // Abort: this call and the ones after it get error results, then the interruption.
            auto closing = close_call(tc.call, "aborted: " + abort_.reason());
            if (!co_await std::move(closing)) {
                co_return;
            }
            for (std::size_t j = i + 1; j < calls.size(); ++j) {
                auto skipping = close_call(calls[j].call, "not run: the turn was aborted");
                if (!co_await std::move(skipping)) {
                    co_return;
                }
            }
            auto task =
                writer_.record(s::interruption{abort_.reason(), s::interruption_kind::aborted});
            co_await std::move(task);
            co_return;
        }
        tool_output out =
            r.index() == 0
                ? std::get<0>(std::move(r))
                : tool_output{"timed out after " + std::to_string(limit.count()) + " ms", true};
        auto task = writer_.record(
            s::tool_result{tc.call.id, tc.call.name, std::move(out.text), out.is_error});
        if (!co_await std::move(task)) {
            co_return;
        }
    }
}

}  // namespace wuhu::worker
