// A small C++ face on libnats: connect, publish, subscribe (optionally in a queue group) and
// request. Message callbacks run on libnats threads: they get a copy of the message and must
// not block (post the work to an executor).
//
// The connection sends without libnats's flusher delay (replies take ~0.2 ms instead of ~1 ms),
// in batches: its socket IO runs on a thread of its own (socket_loop.hpp), which sends all that
// has accumulated at once, and a thread that publishes much (a worker's executor) can send its
// own batches (batch_sends_here). It reconnects forever, replaying its subscriptions.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct __natsConnection;
struct __natsSubscription;

namespace wuhu::nats {

class socket_loop;

// NATS headers of a request: names are printable ASCII without ':', values have no CR, LF or
// NUL.
using header_list = std::vector<std::pair<std::string, std::string>>;

struct message {
    std::string subject;  // every byte received (a NUL included)
    std::string reply;
    std::string data;
    // The reply subject had bytes a C string hides (a NUL): it cannot be answered safely.
    bool bad_reply = false;
    header_list headers;  // in the order received (the first value of each name)
};

// The answer to request_async().
struct reply {
    enum class kind {
        answered,       // `data` is the reply
        no_responders,  // nobody subscribes to the subject (the server says so at once)
    };
    kind how = kind::answered;
    std::string data;
};

// How a connection proves who it is (DESIGN.md "Tenancy and access control"). At most one
// of a user and password, a token, a credentials file (a JWT and its seed) or an NKey seed
// file; credentials in the URL (nats://user:password@host, nats://token@host) work too.
struct credentials {
    std::string user;
    std::string password;
    std::string token;
    std::string credentials_file;  // a .creds file (JWT and seed)
    std::string nkey_seed_file;    // a file holding an NKey seed (SU...); its public key is the user
};

struct options {
    // The server, or a comma-separated list of servers (each tried, and reconnected to).
    std::string url = "nats://127.0.0.1:4222";
    std::string name;  // shown by the server (connz)
    // Runs on a libnats thread when the connection is lost ("disconnected") and when it is
    // back ("reconnected", to the server's URL with any credentials redacted); not while the
    // client closes. Must not block.
    std::function<void(std::string_view event, std::string_view url)> on_connection;
    credentials auth;
    // The prefix of this connection's reply subjects (`_INBOX` by default): a user allowed to
    // subscribe only to `_INBOX_<user>.>` sets `_INBOX_<user>`. A subject without wildcards or
    // empty tokens.
    std::string inbox_prefix = "_INBOX";
};

// Whether `subject` can be written into a PUB line: 1-1,024 bytes, none a control byte, a
// space or DEL. Checked by every publish, request and forwarded request, for the subject and
// the reply subject (a last guard: what a worker builds is built and checked whole in
// protocol/): libnats writes subjects into the protocol verbatim, so a CR or LF would end the
// PUB line and start another command, and a NUL would cut the subject short. (A wildcard or
// an empty token is no command: nats-server refuses to route it, and clients may send one.)
bool valid_publish_subject(std::string_view subject);

class connection {
  public:
    using handler = std::function<void(message)>;

    // Throws std::runtime_error when the server cannot be reached or refuses the credentials
    // (the message names the server with its credentials redacted), std::invalid_argument when
    // the options cannot work (two kinds of credentials, a bad inbox prefix).
    explicit connection(options o);
    connection(const std::string& url, const std::string& name)
        : connection([&] {
              options o;
              o.url = url;
              o.name = name;
              return o;
          }()) {}
    ~connection();
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    // False when the message could not be handed to libnats, or the subject is not one
    // (valid_publish_subject).
    bool publish(const std::string& subject, std::string_view data);
    // Publishes with a reply subject ("": none) and headers (header_list's rules; false when
    // one breaks them).
    bool publish_request(const std::string& subject, const std::string& reply,
                         const header_list& headers, std::string_view data);
    // Publishes with a reply subject; false when either is not a valid subject.
    bool publish_request(const std::string& subject, const std::string& reply,
                         std::string_view data);
    // Subscriptions return a token for unsubscribe(). unsubscribe() (and the destructor)
    // returns once the handler no longer runs and never will (it waits up to 5 s for a call in
    // progress: never call it from the handler itself); the handler object stays alive until
    // the client is destroyed.
    std::size_t subscribe(const std::string& subject, handler h);
    std::size_t queue_subscribe(const std::string& subject, const std::string& queue, handler h);
    void unsubscribe(std::size_t token);
    // Removes interest but still delivers what was already received (asynchronously);
    // `done` is called (on a libnats thread) once the last of it has been handed to the
    // handler and the handler has returned (at once if the subscription is already closed).
    // Without a server (disconnected) nothing more can arrive: it unsubscribes at once.
    void drain(std::size_t token, std::function<void()> done);
    // A request-reply round trip; nullopt on timeout or no responders.
    std::optional<std::string> request(const std::string& subject, std::string_view data,
                                       std::chrono::milliseconds timeout);
    // A request answered by several messages (a chunked reply): `more` gets each reply
    // message and returns whether more are expected. False on timeout (each message within
    // `timeout` of the previous one).
    bool request_many(const std::string& subject, std::string_view data,
                      std::chrono::milliseconds timeout,
                      const std::function<bool(std::string)>& more);
    // One request to each subject at once, each answered by one message: the answers in the
    // order of `subjects` (nullopt: none within `timeout` of the start).
    std::vector<std::optional<std::string>> request_all(const std::vector<std::string>& subjects,
                                                        std::string_view data,
                                                        std::chrono::milliseconds timeout);
    // The same with a body of its own for each subject.
    std::vector<std::optional<std::string>> request_all(const std::vector<std::string>& subjects,
                                                        const std::vector<std::string>& bodies,
                                                        std::chrono::milliseconds timeout);
    // A request with headers that does not block: `done` runs once, on a libnats thread (it
    // must not block), with the reply or with no_responders; nothing runs on a timeout (the
    // caller keeps its own clock, and withdraws the request). All these requests share one
    // inbox subscription. Returns a token for cancel_request(), or 0 when the request was not
    // sent (bad headers, or the connection is closed); `done` then never runs.
    std::uint64_t request_async(const std::string& subject, const header_list& headers,
                                std::string_view data, std::function<void(reply)> done);
    // Withdraws a request: once this returns, its `done` is not running and never will.
    void cancel_request(std::uint64_t token);
    // How many request_async() requests await their replies (for tests and diagnostics).
    std::size_t requests_waiting();
    // Sends what is buffered, then waits (up to 5 s) until the server has processed it; without
    // a server (disconnected) it waits for nothing: libnats keeps what it holds for the next
    // connection.
    void flush();
    // From now on, what the calling thread publishes is sent by a call it queues for itself
    // with `post` (an executor's post: the thread must be the one that runs that queue), so
    // that all it publishes before that call runs goes out in one send(). Other threads'
    // publishes are sent by the connection's socket thread. Once the queue stops running,
    // flush() or the destructor sends what it held; or batch_sends_here(nullptr) on that
    // thread, which ends the batching (before the queue's owner is gone) and sends it.
    void batch_sends_here(std::function<void(std::function<void()>)> post);
    std::int64_t max_payload() const;
    // Bytes published and not sent yet (for tests and diagnostics).
    std::size_t buffered() const;
    // Whether the connection is up now (not reconnecting, not closed).
    bool connected() const;

  private:
    // A new unique reply subject under the inbox prefix.
    std::string new_inbox() const;
    // Publishes a message with headers (and a reply subject, or nullptr), both checked by the
    // caller.
    bool publish_message(const std::string& subject, const char* reply, const header_list& headers,
                         std::string_view data);

    std::string inbox_prefix_;
    // The connection callbacks' closure: it outlives the last callback (the destructor waits
    // for libnats's closed callback, which comes last, on a thread of its own).
    struct events;
    std::unique_ptr<events> events_;
    // The requests of request_async() awaiting their replies, and their inbox subscription.
    struct pending;
    std::mutex pending_mu_;  // guards creating pending_
    std::unique_ptr<pending> pending_;
    std::shared_ptr<socket_loop> loop_;  // the socket's IO (outlives nc_)
    __natsConnection* nc_ = nullptr;
    std::vector<__natsSubscription*> subs_;
    std::vector<std::unique_ptr<handler>> handlers_;
    // drain() callbacks, by subscription token.
    std::map<std::size_t, std::unique_ptr<std::function<void()>>> drained_;
};

}  // namespace wuhu::nats
