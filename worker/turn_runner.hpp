// One turn's inference and the compactions around it. The context is projected and checked
// against the context window (compacted once if it does not fit, else an input_too_large
// diagnostic); the provider streams the response, whose deltas observers get as they arrive
// (the inflight message); the assistant message is recorded, or a failed attempt goes to the
// policy (session::on_inference_error: retry after a backoff, compact then retry, or give up
// with a diagnostic); an abort records an interruption. Writes only through the
// session_writer.
#pragma once

#include "providers/provider.hpp"
#include "tools/tools.hpp"
#include "worker/events.hpp"
#include "worker/loop_options.hpp"
#include "worker/writer.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace wuhu::worker {

namespace asio = boost::asio;

using std::chrono::milliseconds;

class turn_runner {
  public:
    // `rng`: the retry jitter's state, the loop's (a loop makes a runner for each turn, and
    // its jitter goes on from the last one's: seed() once a loop).
    turn_runner(session_writer& w, providers::provider& p, const tools::tool_registry& tools,
                runtime::clock& clk, const loop_options& opts, abort_signal& abort, event_hub& hub,
                std::uint64_t& rng);
    // A loop's first jitter state: loop_options::jitter_seed, or the process's random base
    // and a count (each loop a sequence of its own, without reading the system's entropy once
    // a session).
    static std::uint64_t seed(const loop_options& opts);
    ~turn_runner();
    turn_runner(const turn_runner&) = delete;
    turn_runner& operator=(const turn_runner&) = delete;

    // Infers until the turn has its response, an interruption or a diagnostic.
    asio::awaitable<void> infer();
    using compacted = session::compaction_result;
    // Plans over the entries up to `upto` (0: all), summarizes, records the compaction.
    asio::awaitable<compacted> compact(session::entry_seq upto);
    // The message being streamed, if any.
    const std::optional<inflight_message>& inflight() const { return inflight_; }

  private:
    struct attempt;
    class sink;

    // Projects the context (kept for the next request) and checks it fits the context limit.
    bool fits();
    // Whether the session's budget is spent (a summary or a billed attempt may spend it within
    // a turn: no inference runs after that).
    bool spent() const;
    asio::awaitable<attempt> infer_once();
    // True when aborted (or the session failed) before `d` passed.
    asio::awaitable<bool> abortable_sleep(milliseconds d);
    void on_text(std::string_view delta);
    void on_tool_call(const providers::tool_call_delta& d);
    // The usage the stream (or summary) reported so far: billed even if no answer comes.
    void on_usage(const providers::reported_usage& u) { billed_ = u; }
    // The usage the last stream reported, as the entry that records it when no answer does
    // (session::billed_attempt), taken: none when it reported none.
    std::optional<session::diagnostic> take_billed(std::string_view why);
    // Counts what the attempt streamed; past the entry limit, stops it.
    void count_streamed(std::size_t bytes);
    // Bytes of the answer (or summary) streaming now arrived.
    void on_alive() { last_byte_ = clock_.now(); }
    // Starts watching a stream: it began now, and no byte came yet.
    void began_stream();
    // Completes when the stream began by began_stream() passes one of `lim`'s limits: its
    // first byte, the next one, or its whole length; `why` says which, for the attempt's error.
    // One watchdog for the three: it wakes at the nearest deadline and reads when the last byte
    // came (a delta costs a clock read, not a timer).
    asio::awaitable<void> past_limits(stream_limits lim, std::string* why);
    double jitter();

    session_writer& writer_;
    providers::provider& provider_;
    const tools::tool_registry& tools_;
    runtime::clock& clock_;
    const loop_options& opts_;
    abort_signal& abort_;
    event_hub& hub_;
    std::unique_ptr<sink> sink_;
    std::optional<inflight_message> inflight_;
    std::optional<providers::reported_usage> billed_;  // of the stream watched now
    // The attempt streaming now: what it streamed (bytes of text and tool calls), and its
    // signal to stop past loop_options::max_entry_bytes.
    std::size_t streamed_ = 0;
    runtime::async_event* cut_ = nullptr;
    session::unix_ms stream_began_{};
    std::optional<session::unix_ms> last_byte_;  // of the stream watched now
    std::vector<session::llm_message> context_;  // projection built by fits(), if still current
    session::version_vector context_version_;
    // The retry jitter's generator (splitmix64), the loop's: 8 bytes a session, where a
    // Mersenne twister held 2.5 KB in every loaded session.
    std::uint64_t& rng_;
};

}  // namespace wuhu::worker
