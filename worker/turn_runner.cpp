#include "worker/turn_runner.hpp"

#include "session/compaction.hpp"
#include "session/ledger.hpp"
#include "session/loop_policy.hpp"
#include "session/text.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <algorithm>
#include <atomic>
#include <random>

namespace wuhu::worker {

using namespace boost::asio::experimental::awaitable_operators;
namespace s = wuhu::session;

std::uint64_t turn_runner::seed(const loop_options& opts) {
    if (opts.jitter_seed != 0) {
        return opts.jitter_seed;
    }
    static const std::uint64_t base =
        (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    static std::atomic<std::uint64_t> made{0};
    return base + 0x632be59bd9b4e019ULL * (made.fetch_add(1, std::memory_order_relaxed) + 1);
}

namespace {

// How long the stream watchdog sleeps when no limit applies (every limit 0): ten years.
constexpr std::int64_t never = 10LL * 365 * 24 * 3600 * 1000;

// Wrappers that turn a throwing provider into an error value (named coroutines with by-value
// parameters, never lambdas, inside co_await expressions: see the g++ 12 row of
// docs/decisions.md).
// g++ 12 also mis-handles `co_return T{co_await f()}`: the result referred to f's freed frame
// (ASan caught it). Await into a named local first, then return it.
// The outcomes are wrapped in structs because the awaitable operators flatten variants.
struct inferred {
    providers::inference_outcome outcome;
};
struct summarized {
    providers::summary_outcome outcome;
};

asio::awaitable<inferred> guarded_infer(providers::provider& p, providers::inference_request req,
                                        providers::stream_sink& sink) {
    try {
        providers::inference_outcome out = co_await p.infer(std::move(req), sink);
        co_return inferred{std::move(out)};
    } catch (const std::exception& e) {
        co_return inferred{
            providers::provider_error{providers::provider_error_kind::fatal, e.what()}};
    }
}

asio::awaitable<summarized> guarded_summarize(providers::provider& p,
                                              providers::summary_request req) {
    try {
        auto summarizing = p.summarize(std::move(req));
        providers::summary_outcome out = co_await std::move(summarizing);
        co_return summarized{std::move(out)};
    } catch (const std::exception& e) {
        co_return summarized{
            providers::provider_error{providers::provider_error_kind::fatal, e.what()}};
    }
}

}  // namespace

class turn_runner::sink final : public providers::stream_sink {
  public:
    explicit sink(turn_runner& r) : runner_(r) {}
    void text(std::string_view delta) override { runner_.on_text(delta); }
    void tool_call(const providers::tool_call_delta& d) override { runner_.on_tool_call(d); }
    void alive() override { runner_.on_alive(); }
    void usage(const providers::reported_usage& u) override { runner_.on_usage(u); }

  private:
    turn_runner& runner_;
};

struct turn_runner::attempt {
    enum kind_t { ok, error, aborted } kind = error;
    s::assistant_message message;
    providers::provider_error err;
    std::optional<s::diagnostic> billed;  // what the provider billed for no answer (error, aborted)
};

turn_runner::turn_runner(session_writer& w, providers::provider& p,
                         const tools::tool_registry& tools, runtime::clock& clk,
                         const loop_options& opts, abort_signal& abort, event_hub& hub,
                         std::uint64_t& rng)
    : writer_(w),
      provider_(p),
      tools_(tools),
      clock_(clk),
      opts_(opts),
      abort_(abort),
      hub_(hub),
      sink_(std::make_unique<sink>(*this)),
      rng_(rng) {}

turn_runner::~turn_runner() = default;

asio::awaitable<void> turn_runner::infer() {
    // Eager draining's hard error: input that cannot fit even after compaction is reported,
    // never staged.
    if (!fits()) {
        const auto how = co_await compact(s::entry_seq{});
        if (abort_.pending()) {
            auto task = writer_.stop_turn({}, std::nullopt);
            co_await std::move(task);
            co_return;
        }
        if (how == compacted::done && spent()) {
            co_return;  // the summary spent the budget: the loop's next step records it
        }
        if (!fits()) {
            auto task = writer_.record(s::input_too_large(how));
            co_await std::move(task);
            co_return;
        }
    }
    s::inference_attempts attempts;
    for (;;) {
        writer_.set_loop(s::loop_state::inferring);
        attempt a = co_await infer_once();
        if (writer_.failed()) {
            co_return;  // closed while inferring: nothing of this attempt is ours to write
        }
        if (a.kind == attempt::aborted) {
            std::vector<s::entry_body> billed;
            if (a.billed) {
                billed.emplace_back(std::move(*a.billed));
            }
            auto task = writer_.stop_turn(std::move(billed), std::nullopt);
            co_await std::move(task);
            co_return;
        }
        if (a.kind == attempt::ok) {
            // One commit: the response, the tool_started markers of the calls that will run
            // (all of them start before the first runs), and the mark_idle after a final
            // answer (docs/agent-loop.md, "Fused commits").
            // A call that needs a person's approval is asked instead (in the same commit). None
            // starts past the budget (with this answer counted), and no more than its tool_calls
            // limit allows: the loop stops before the others (a raise lets them start).
            std::vector<s::tool_call_id> starting;
            std::vector<s::approval_requested> asking;
            const auto& st = writer_.state();
            const auto tenant = tools_.tenant_of(writer_.sid());
            s::session_state after;
            after.usage = st.usage;
            s::count(after.usage, a.message);
            std::size_t room =
                s::calls_within(after, writer_.limits(), a.message.tool_calls.size());
            for (const auto& c : a.message.tool_calls) {
                if (room == 0) {
                    break;  // this one and the ones after it start later, in order
                }
                if (tools_.find(c.name, st.config.tools, tenant) == nullptr) {
                    continue;
                }
                if (auto terms = tools_.approval_for(c.name, st.config.approval, tenant)) {
                    asking.push_back(s::request_of(c, *terms, clock_.now()));
                } else {
                    starting.push_back(c.id);
                    --room;
                }
            }
            auto task = writer_.record(
                s::response{std::move(a.message), std::move(starting), true, std::move(asking)});
            if (co_await std::move(task)) {
                const std::uint64_t step = inflight_ ? inflight_->step : writer_.step();
                inflight_.reset();
                hub_.emit(stream_ended_event{step, writer_.epoch().value, true});
            }
            co_return;  // compaction, if due, is the loop's next step
        }
        const std::function<double()> unit = [this] { return jitter(); };
        auto decision = s::on_inference_error(a.err, attempts, opts_.retry, unit);
        if (a.billed) {
            // Persisted before anything else: the retry, or the report that ends the turn.
            auto task = writer_.record(std::move(*a.billed));
            if (!co_await std::move(task)) {
                co_return;
            }
            if (!std::holds_alternative<s::give_up>(decision) && spent()) {
                co_return;  // no retry past the budget: the loop's next step records it spent
            }
        }
        if (const auto* wait = std::get_if<s::retry_after>(&decision)) {
            if (co_await abortable_sleep(wait->wait)) {
                auto task = writer_.stop_turn({}, std::nullopt);
                co_await std::move(task);
                co_return;
            }
            continue;
        }
        if (std::holds_alternative<s::compact_then_retry>(decision)) {
            const auto how = co_await compact(s::entry_seq{});
            if (abort_.pending()) {
                auto task = writer_.stop_turn({}, std::nullopt);
                co_await std::move(task);
                co_return;
            }
            if (how == compacted::done) {
                if (spent()) {
                    co_return;  // as above
                }
                continue;
            }
            // Not compacted: the report says why, not "even after compaction".
            decision = s::give_up{s::overflow_not_compacted(how, a.err.message)};
        }
        auto task = writer_.record(std::get<s::give_up>(std::move(decision)).report);
        co_await std::move(task);
        co_return;
    }
}

bool turn_runner::spent() const {
    return s::exhausted(writer_.state().usage, writer_.limits()).has_value();
}

bool turn_runner::fits() {
    // The projection is kept for the request that follows, so it is built once per attempt.
    const auto& st = writer_.state();
    context_ = s::project_context(st, opts_.roles);
    context_version_ = st.version();
    return s::check_fits(context_, st.config).has_value();
}

asio::awaitable<turn_runner::attempt> turn_runner::infer_once() {
    abort_.arm(s::abort_stage::inference);
    std::optional<providers::inference_slots::slot> held;
    if (opts_.inferences != nullptr) {
        // The worker's (and the tenant's) share of the provider: an abort also ends the wait.
        auto waiting = opts_.inferences->acquire(std::string(writer_.sid().tenant()));
        auto got = co_await (std::move(waiting) || abort_.wait());
        if (got.index() == 1 || writer_.failed()) {
            abort_.disarm();
            abort_.stopped(s::abort_stage::inference);
            attempt a;
            a.kind = attempt::aborted;
            co_return a;
        }
        held.emplace(std::get<0>(std::move(got)));
    }
    // After the wait: what arrived meanwhile (a steer) is in this attempt's context.
    const auto& st = writer_.state();
    if (context_version_ != st.version() || context_.empty()) {
        context_ = s::project_context(st, opts_.roles);
    }
    const std::uint64_t step = writer_.step();
    providers::inference_request req{std::move(context_),
                                     tools_.specs(st.config.tools, tools_.tenant_of(writer_.sid())),
                                     st.config.model, step, writer_.sid().str()};
    context_.clear();
    inflight_ = inflight_message{step, writer_.epoch().value, {}, {}, 0};
    billed_.reset();
    hub_.emit(stream_began_event{step, inflight_->epoch});
    // An answer that streams past the entry limit (or without end) is stopped there.
    runtime::async_event cut;
    cut_ = &cut;
    streamed_ = 0;
    began_stream();
    std::string over_limit;
    auto r = co_await (guarded_infer(provider_, std::move(req), *sink_) || abort_.wait() ||
                       cut.wait_or_cancelled() || past_limits(opts_.inference, &over_limit));
    cut_ = nullptr;
    abort_.disarm();
    attempt a;
    if (writer_.failed()) {
        co_return a;  // the caller returns
    }
    switch (r.index()) {
        case 0: {
            auto& out = std::get<0>(r).outcome;
            if (auto* m = std::get_if<s::assistant_message>(&out)) {
                a.kind = attempt::ok;  // inflight_ stays until the entry is committed
                a.message = std::move(*m);
                billed_.reset();
                co_return a;
            }
            a.err = std::get<providers::provider_error>(out);
            a.billed = take_billed(a.err.message);
            break;
        }
        case 1:
            a.kind = attempt::aborted;
            abort_.stopped(s::abort_stage::inference);
            a.billed = take_billed("aborted");
            break;
        case 2:
            // Stored cut, with the note, as a final answer: its calls (perhaps cut too) are
            // dropped, and the turn ends. It records what the stream reported it used.
            a.kind = attempt::ok;
            a.message.text = s::cut_to(inflight_->text, opts_.max_entry_bytes, "answer", true);
            a.message.model = writer_.state().config.model;
            if (billed_) {
                a.message.usage = billed_->usage;
                a.message.cost = billed_->cost;
                if (!billed_->model.empty()) {
                    a.message.model = billed_->model;
                }
                billed_.reset();
            }
            co_return a;
        default:
            a.err = {providers::provider_error_kind::transient, over_limit};
            a.billed = take_billed(over_limit);
            break;
    }
    const std::uint64_t streamed = inflight_->step;
    inflight_.reset();
    hub_.emit(stream_ended_event{streamed, writer_.epoch().value, false});
    co_return a;
}

asio::awaitable<bool> turn_runner::abortable_sleep(milliseconds d) {
    abort_.arm(s::abort_stage::backoff);
    auto r = co_await (clock_.timeout(d) || abort_.wait());
    abort_.disarm();
    if (r.index() == 1) {
        abort_.stopped(s::abort_stage::backoff);
    }
    co_return r.index() == 1 || writer_.failed();
}

asio::awaitable<turn_runner::compacted> turn_runner::compact(s::entry_seq upto) {
    auto plan = s::plan_compaction(writer_.state(), opts_.roles, upto);
    if (!plan) {
        co_return compacted::nothing_to_compact;
    }
    writer_.set_loop(s::loop_state::compacting);
    providers::summary_request req{
        plan->segment,          writer_.state().config.model,
        writer_.step(),         writer_.sid().str(),
        [this] { on_alive(); }, [this](const providers::reported_usage& u) { on_usage(u); }};
    billed_.reset();
    began_stream();
    std::string over_limit;
    auto summarizing = guarded_summarize(provider_, std::move(req));
    // An abort abandons the summary (nothing of it is written); the turn stops after it.
    abort_.arm(s::abort_stage::compaction);
    auto r = co_await (std::move(summarizing) || past_limits(opts_.summary, &over_limit) ||
                       abort_.wait());
    abort_.disarm();
    if (r.index() == 2) {
        abort_.stopped(s::abort_stage::compaction);
    }
    if (r.index() != 0 ||
        std::holds_alternative<providers::provider_error>(std::get<0>(r).outcome)) {
        // What the provider billed for the summary it did not give is recorded first.
        const std::string why =
            r.index() == 2 ? std::string("a summary, aborted")
            : r.index() == 1
                ? "a summary: " + over_limit
                : "a summary: " +
                      std::get<providers::provider_error>(std::get<0>(r).outcome).message;
        if (auto billed = take_billed(why)) {
            auto task = writer_.record(std::move(*billed));
            co_await std::move(task);
        }
        co_return compacted::failed;  // the next response triggers compaction again
    }
    auto& sum = std::get<providers::summary_answer>(std::get<0>(r).outcome);
    billed_.reset();
    s::compaction c{std::move(sum.text),
                    plan->first_kept,
                    plan->tokens_before,
                    sum.usage,
                    sum.model.empty() ? writer_.state().config.model : std::move(sum.model),
                    sum.cost};
    auto task = writer_.record(std::move(c));
    const bool ok = co_await std::move(task);
    co_return ok ? compacted::done : compacted::failed;
}

void turn_runner::began_stream() {
    stream_began_ = clock_.now();
    last_byte_.reset();
}

asio::awaitable<void> turn_runner::past_limits(stream_limits lim, std::string* why) {
    const std::int64_t first_byte = lim.first_byte.count();
    const std::int64_t idle = lim.idle.count();
    const std::int64_t total = lim.total.count();
    for (;;) {
        const std::int64_t now = clock_.now().value;
        std::int64_t wait = never;
        if (total > 0) {
            wait = stream_began_.value + total - now;
            if (wait <= 0) {
                *why = "the answer took longer than " + std::to_string(total) +
                       " ms in all (--inference-timeout, --summary-timeout)";
                co_return;
            }
        }
        if (!last_byte_) {
            if (first_byte > 0) {
                const std::int64_t left = stream_began_.value + first_byte - now;
                if (left <= 0) {
                    *why = "no first byte from the model within " + std::to_string(first_byte) +
                           " ms (--inference-first-byte-timeout, --summary-first-byte-timeout)";
                    co_return;
                }
                wait = std::min(wait, left);
            }
            if (idle > 0) {
                wait = std::min(wait, idle);  // a first byte now would be due again by then
            }
        } else if (idle > 0) {
            const std::int64_t left = last_byte_->value + idle - now;
            if (left <= 0) {
                *why = "no data from the model for " + std::to_string(idle) +
                       " ms (--inference-idle-timeout, --summary-idle-timeout)";
                co_return;
            }
            wait = std::min(wait, left);
        }
        if (!co_await clock_.elapsed(milliseconds(wait))) {
            co_return;  // the race is over
        }
    }
}

void turn_runner::on_text(std::string_view delta) {
    if (!inflight_) {
        return;  // late delta of a cancelled attempt
    }
    on_alive();
    inflight_->text.append(delta);
    hub_.emit(stream_delta_event{inflight_->step, inflight_->epoch, ++inflight_->deltas,
                                 std::string(delta), std::nullopt});
    count_streamed(delta.size());
}

void turn_runner::count_streamed(std::size_t bytes) {
    streamed_ += bytes;
    if (opts_.max_entry_bytes > 0 && streamed_ > opts_.max_entry_bytes && cut_ != nullptr) {
        cut_->notify();
    }
}

void turn_runner::on_tool_call(const providers::tool_call_delta& d) {
    if (!inflight_) {
        return;
    }
    on_alive();
    inflight_->tool_calls.push_back(d);
    hub_.emit(stream_delta_event{inflight_->step, inflight_->epoch, ++inflight_->deltas, {}, d});
    count_streamed(d.id.size() + d.name.size() + d.arguments.size());
}

std::optional<s::diagnostic> turn_runner::take_billed(std::string_view why) {
    if (!billed_ || (billed_->usage == s::token_usage{} && billed_->cost == 0)) {
        billed_.reset();
        return std::nullopt;
    }
    auto d = s::billed_attempt(
        billed_->usage,
        billed_->model.empty() ? writer_.state().config.model : std::move(billed_->model),
        billed_->cost, s::cut_to(std::string(why), 300, "reason", false));
    billed_.reset();
    return d;
}

double turn_runner::jitter() {
    std::uint64_t z = (rng_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;  // [0, 1)
}

}  // namespace wuhu::worker
