// The C++ client of a Wuhu fleet: every command of the NATS contract, and a gap-free watch.
//
//   nats::connection nats("nats://127.0.0.1:4222", "my-app");
//   client::client c(nats);
//   auto id = c.enqueue("demo", "followUp", "hello", {.id = "u1", .name = "Ann"});
//   client::watch w(c, "demo");                     // events first, then the backfill
//   while (w.next(deadline, handlers).value()) {}   // patches chained, deltas in order
//
// Every call returns an outcome: the value, or a failure with the service's error `code` and
// `message` ("no_reply" when no worker answered in time). A request refused with
// `owner_changed` or `worker_stopping` (nothing changed; the session is moving to another
// worker), `overloaded` or `rate_limited` (nothing changed; after the reply's retry hint) is
// sent again until `timeout`, and so is one of those `options::attempt_timeout` names when its
// reply is late. An enqueue, a system message or an abort without an id gets one made here
// (call() too), so that every copy is the same request. A session id that is not 1-64 of
// [A-Za-z0-9_-] fails with "invalid_session_id" before anything is sent (it would otherwise
// change the subject). Subscribe replies that come in chunks are reassembled.
//
// Thread-safety: a client may be shared; a watch is used by one thread.
#pragma once

#include "nats/connection.hpp"
#include "protocol/replies.hpp"

#include <boost/json.hpp>
#include <boost/system/result.hpp>

#include <condition_variable>
#include <deque>
#include <mutex>

namespace wuhu::client {

namespace json = boost::json;

// An error reply's code and message; "no_reply", "bad_reply", "invalid_session_id" or (call()
// with a verb the contract does not have) "unknown_command" from the client itself.
using failure = protocol::reply_error;

template <class T>
using outcome = boost::system::result<T, failure>;

struct author {
    std::string id = "client";
    std::string name;
    std::string email;
    std::string kind = "human";  // or "bot"
};

// 1-64 characters of [A-Za-z0-9_-] (the service's rule).
bool valid_session_id(std::string_view sid);

struct options {
    std::string prefix = "wuhu";
    std::chrono::milliseconds timeout{10000};
    // A tenant's sessions seen from the fleet's own account (an operator, docs/security.md):
    // its subjects are <prefix>.<tenant>.session.…, .events.… and .admin.sessions. A tenant's
    // own clients leave it empty: nats-server adds their tenant.
    std::string tenant;
    // An enqueue, system message, abort, cancel or subscribe without a reply this long (at
    // least 100 ms) is sent again, as the same request, until `timeout`: a request lost with a
    // worker that died or froze after taking it costs this, not the whole timeout. Configure,
    // pause, resume and delete are sent once (a late copy could undo a later command).
    std::chrono::milliseconds attempt_timeout{2000};
};

class client {
  public:
    // std::invalid_argument for a prefix or tenant that is no subject token.
    explicit client(nats::connection& nats, options o = {});

    // Returns the item id once durable: the given one, or one the client made (a UUIDv7) so
    // that the copies it sends again are the same request. Without an author the message's
    // author is {"kind":"unknown"}.
    outcome<std::string> enqueue(const std::string& sid, std::string_view lane,
                                 std::string_view content,
                                 const std::optional<author>& from = std::nullopt,
                                 std::optional<std::string> id = {});
    outcome<std::string> system(const std::string& sid, std::string_view source,
                                std::string_view content, std::optional<std::string> id = {});
    // True if canceled, false if already materialized.
    outcome<bool> cancel(const std::string& sid, std::string_view lane, std::string_view id);
    // The session's settings after the change.
    outcome<json::object> configure(const std::string& sid, json::object settings);
    // Stops the turn in progress; the reply once its interruption is durable: {stopped,
    // entry?, duplicate?} (`stopped`: inference, backoff, compaction, tool, step or nothing).
    // A retry (with the id given, or the one the client made) gets the first request's answer
    // and stops nothing more.
    outcome<json::object> abort(const std::string& sid, std::optional<std::string> reason = {},
                                std::optional<std::string> id = {});
    outcome<void> pause(const std::string& sid);
    outcome<void> resume(const std::string& sid);
    outcome<void> remove(const std::string& sid);
    // {patch, status, settings, inflight?}: the stable patch since `since` (everything when
    // absent) to the current version. A long one comes in pages (`more`), asked for one after
    // another and returned as one.
    outcome<json::object> subscribe(const std::string& sid,
                                    const std::optional<json::value>& since = {});
    // A page of the fleet's sessions: {sessions: [{id, owner?, state, has_work, lanes?, ...}],
    // next?}. `query`: {state?, has_work?, owner?, limit?, after?}.
    outcome<json::object> sessions(const json::object& query = {});
    // Any request; the whole reply when it is ok.
    outcome<json::object> call(const std::string& sid, std::string_view verb,
                               const json::object& body);

    nats::connection& nats() { return nats_; }
    const options& opts() const { return options_; }
    // The subjects this client uses (the prefix, and the tenant when given).
    const protocol::subject_layout& subjects() const { return layout_; }

  private:
    // One request whose reply may come in chunks (reassembled).
    outcome<json::object> chunked_request(const std::string& subject, const std::string& request);

    nats::connection& nats_;
    options options_;
    protocol::subject_layout layout_;
};

// The pure part of a watch: given the backfill and then the events in arrival order, decides
// what to deliver and when the view has a gap. Patches are delivered in chain order, each
// once; deltas in sequence, each once; an event that does not follow is a gap, and the watch
// asks for the backfill since its version again, which resync() then turns into the missing
// patch and the missing text. Statuses are delivered newest last: one older than the last
// delivered (by its epoch and seq) is dropped, so the last status a watcher holds is the one
// the session has.
class watch_cursor {
  public:
    struct delivery {
        std::vector<json::object> patches;
        std::vector<json::object> deltas;
        bool gap = false;  // ask for the backfill since version() and pass it to resync()
    };

    // The first subscribe reply.
    delivery start(const json::object& reply);
    delivery patch(const json::object& p);
    delivery delta(const json::object& d);
    // A subscribe reply since version(), after a gap.
    delivery resync(const json::object& reply);

    const json::value& version() const { return version_; }

  private:
    void take_patch(const json::object& p, delivery& out);
    void take_inflight(const json::object& reply, delivery& out);
    // Starts delivering the message of `step` streamed by the owner of `epoch` (discarding the
    // one being streamed, if any).
    void begin(std::uint64_t step, std::uint64_t epoch, delivery& out);
    void note_status(const json::object& holder);

    json::value version_;
    std::pair<std::uint64_t, std::uint64_t> status_rev_{0, 0};  // of the newest status delivered
    bool streaming_ = false;                                    // a message is being streamed
    std::uint64_t step_ = 0;
    std::uint64_t epoch_ = 0;         // of the owner streaming it
    std::uint64_t seq_ = 0;           // the last delta delivered of this message
    std::size_t text_delivered_ = 0;  // bytes of its text delivered
    std::size_t calls_delivered_ = 0; // its tool-call deltas delivered
    std::uint64_t next_step_ = 0;     // assistant messages delivered: lower steps are done
};

// A live, gap-free view of one session: subscribes to `<prefix>.events.<sid>.>` first, then
// requests the backfill, drops what the backfill already covers, and re-requests the backfill
// when an event shows a gap.
class watch {
  public:
    struct handlers {
        // Committed patches, chained (the backfill first, with `status` and `settings`).
        std::function<void(const json::object&)> on_patch;
        // Stream events in order: message.start, text.delta, tool_call.delta, message.discard.
        std::function<void(const json::object&)> on_delta;
        // The session was deleted ({"type":"session.deleted","epoch"}): the watch ends (next()
        // returns false from then on).
        std::function<void(const json::object&)> on_deleted;
    };

    // Fails (no_reply, or the service's error) when the backfill cannot be had.
    static outcome<std::unique_ptr<watch>> open(client& c, const std::string& sid,
                                                const std::optional<json::value>& since = {});
    ~watch();
    watch(const watch&) = delete;
    watch& operator=(const watch&) = delete;

    // Delivers what is pending (the backfill first); waits until `deadline` for an event.
    // True when something was delivered, false on timeout (or once the session was deleted).
    outcome<bool> next(std::chrono::steady_clock::time_point deadline, const handlers& h);

    const json::value& version() const { return cursor_.version(); }
    std::size_t resyncs() const { return resyncs_; }
    bool deleted() const { return deleted_; }

  private:
    struct inbox {
        std::mutex mu;
        std::condition_variable cv;
        std::deque<nats::message> queue;
    };
    watch(client& c, std::string sid);
    outcome<bool> deliver(watch_cursor::delivery d, const handlers& h);

    client& client_;
    std::string sid_;
    std::shared_ptr<inbox> inbox_;
    std::size_t token_ = 0;
    watch_cursor cursor_;
    std::optional<watch_cursor::delivery> backfill_;
    std::size_t resyncs_ = 0;
    bool deleted_ = false;
};

}  // namespace wuhu::client
