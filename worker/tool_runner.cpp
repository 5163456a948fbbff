#include "worker/tool_runner.hpp"

#include "session/loop_policy.hpp"
#include "session/text.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace wuhu::worker {

using namespace boost::asio::experimental::awaitable_operators;
namespace s = wuhu::session;

namespace {

constexpr milliseconds tool_grace{1000};

}  // namespace

tool_runner::tool_runner(session_writer& w, const tools::tool_registry& tools, runtime::clock& clk,
                         milliseconds timeout, milliseconds linger, std::size_t max_output,
                         abort_signal& abort)
    : writer_(w),
      tools_(tools),
      clock_(clk),
      timeout_(timeout),
      linger_(linger),
      max_output_(max_output),
      abort_(abort) {}

asio::awaitable<bool> tool_runner::schedule_timer(s::timer t) {
    auto task = writer_.record(std::move(t));
    const bool ok = co_await std::move(task);
    co_return ok;
}

asio::awaitable<bool> tool_runner::commit(std::vector<s::entry_body> steps, bool drain) {
    auto task = writer_.record(s::tool_steps{std::move(steps), drain});
    const bool ok = co_await std::move(task);
    co_return ok;
}

asio::awaitable<void> tool_runner::flush_after_linger(std::vector<s::entry_body>* pending) {
    if (!pending->empty()) {
        auto lingering = clock_.elapsed(linger_);
        if (!co_await std::move(lingering)) {
            co_return;  // the call ended first: the runner commits what is pending
        }
        // A copy: cancelled before its commit ran (the call it races ended first), the
        // entries stay pending for the runner to commit; once committed, they go.
        const std::size_t n = pending->size();
        auto task = commit(*pending, false);
        if (co_await std::move(task)) {
            pending->erase(pending->begin(), pending->begin() + static_cast<std::ptrdiff_t>(n));
        }
    }
    asio::steady_timer forever(co_await asio::this_coro::executor,
                               asio::steady_timer::time_point::max());
    co_await forever.async_wait(asio::as_tuple(asio::use_awaitable));  // until cancelled
}

asio::awaitable<void> tool_runner::run() {
    // The newest response's calls, each read as it stands when the runner comes to it (a
    // person's decision may have come meanwhile).
    const std::size_t calls = writer_.state().tool_calls.size();
    // Entries decided and not yet committed, in order.
    std::vector<s::entry_body> pending;
    // A call waits for a person's decision: the steer checkpoint waits for its result too.
    bool waits = false;
    for (std::size_t i = 0; i < calls; ++i) {
        s::tool_call_state tc = writer_.state().tool_calls[i];
        // Started with the response by this owner and not run yet: a call to run, not one
        // that an owner that stopped may have run.
        const bool marked = tc.status == s::tool_status::started && writer_.started_here(tc.call.id);
        if (marked) {
            tc.status = s::tool_status::not_started;
        }
        tools::tool* t = tools_.find(tc.call.name, writer_.state().config.tools,
                                     tools_.tenant_of(writer_.sid()));
        const auto kind = t == nullptr      ? s::tool_kind::unavailable
                          : t->idempotent() ? s::tool_kind::idempotent
                                            : s::tool_kind::not_idempotent;
        const auto action = s::next_tool_action(tc, kind);
        if (action == s::tool_action::skip) {
            continue;
        }
        if (action != s::tool_action::run) {
            // An unknown tool; or recovery of a call that may have run, where running it again
            // could repeat its effect.
            pending.push_back(s::tool_result{tc.call.id, tc.call.name,
                                             action == s::tool_action::unknown
                                                 ? s::unknown_tool_result(tc.call.name)
                                                 : s::interrupted_tool_result(),
                                             true});
            continue;
        }
        if (tc.approval == s::approval_status::pending) {
            waits = true;  // its result comes with a decision; the calls after it run meanwhile
            continue;
        }
        if (tc.status == s::tool_status::not_started && !marked &&
            s::calls_within(writer_.state(), writer_.limits(), 1) == 0) {
            // Past the budget: this call waits for a raise; the calls started before the limit
            // (with the answer) still run, so the loop never comes back here for nothing.
            continue;
        }
        if (tc.approval == s::approval_status::none && tc.status == s::tool_status::not_started &&
            !marked) {
            if (auto terms = tools_.approval_for(tc.call.name, writer_.state().config.approval,
                                                 tools_.tenant_of(writer_.sid()))) {
                // Asked before anything of it runs (with what is pending).
                pending.push_back(s::request_of(tc.call, *terms, clock_.now()));
                waits = true;
                continue;
            }
        }
        if (abort_.pending()) {
            // Aborted between two calls: this one and the ones after it are not run.
            auto task = writer_.stop_turn(std::exchange(pending, {}), std::nullopt);
            co_await std::move(task);
            co_return;
        }
        if (tc.status == s::tool_status::not_started && !marked) {
            // Started durably before it runs (with what is pending).
            pending.push_back(s::tool_started{tc.call.id, tc.call.name});
            auto task = commit(std::exchange(pending, {}), false);
            if (!co_await std::move(task)) {
                co_return;
            }
        }
        abort_.arm(s::abort_stage::tool);
        // A tool with a timeout of its own ends its call by the deadline itself, saying why
        // (which attempts failed, and how): the runner's timer, a second later, is the backstop.
        const auto own = t->timeout();
        const milliseconds limit = own.value_or(timeout_);
        const milliseconds backstop = own ? limit + tool_grace : limit;
        tools::tool_call_context ctx{writer_.sid(), tc.call.id,
                              s::unix_ms{clock_.now().value + limit.count()}, *this};
        const auto began = clock_.now();
        // An approved call runs with the arguments its decision names (perhaps edited).
        std::string arguments =
            tc.approval == s::approval_status::approved ? tc.arguments : tc.call.arguments;
        auto r = co_await (tools::call(*t, std::move(arguments), ctx) || abort_.wait() ||
                           clock_.timeout(backstop) || flush_after_linger(&pending));
        abort_.disarm();
        if (writer_.failed()) {
            co_return;
        }
        if (r.index() == 0 || r.index() == 2) {  // its output, or its timeout
            writer_.tool_ran(tc.call.name, milliseconds(clock_.now().value - began.value));
        }
        if (r.index() == 1) {
            // Abort: this call gets "aborted", the ones after it "not run", then the
            // interruption (with what is pending, in one commit).
            abort_.stopped(s::abort_stage::tool);
            auto task = writer_.stop_turn(std::exchange(pending, {}), tc.call.id);
            co_await std::move(task);
            co_return;
        }
        tools::tool_output out =
            r.index() == 0
                ? std::get<0>(std::move(r))
                : tools::tool_output{"timed out after " + std::to_string(limit.count()) + " ms", true};
        pending.push_back(s::tool_result{tc.call.id, tc.call.name,
                                         s::cut_to(std::move(out.text), max_output_, "tool output"),
                                         out.is_error});
    }
    if (!pending.empty()) {
        // The last results, with the steer checkpoint's drain that follows them (not while a
        // call waits for a person: the checkpoint comes after its result).
        auto task = commit(std::exchange(pending, {}), !waits);
        co_await std::move(task);
    }
}

}  // namespace wuhu::worker
