#include "nats/connection.hpp"

#include "nats/identity.hpp"
#include "nats/socket_loop.hpp"
#include "runtime/secrets.hpp"

#include <nats/nats.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

namespace wuhu::nats {

namespace {

// Whether the C string at `text` is followed directly by the part at `next` (its terminator is
// the only byte between them), or by a header block ("NATS/1.0" then a space or CR).
bool ends_at(const char* text, const char* next) {
    const std::size_t n = std::strlen(text);
    if (text + n + 1 == next) {
        return true;
    }
    const char* h = text + n + 1;
    return std::strncmp(h, "NATS/1.0", 8) == 0 && (h[8] == ' ' || h[8] == '\r');
}

// libnats 3.4.1 hands out the subject and the reply as C strings, but keeps every byte it
// received: a message is one block, "subject\0[reply\0][headers\0]data". A subject or reply
// with a NUL inside is longer than strlen() says, and must never be read as its prefix
// (`wuhu.session.victim.enqueue\0zz` is not `wuhu.session.victim.enqueue`). So the subject is
// taken with all its bytes (the request is then refused as malformed), and a reply subject
// with hidden bytes is refused: the answer would go to someone else's inbox.
message read_message(natsMsg* msg) {
    message m;
    const char* subject = natsMsg_GetSubject(msg);
    const char* reply = natsMsg_GetReply(msg);
    const char* data = natsMsg_GetData(msg);
    if (reply != nullptr) {
        m.subject.assign(subject, static_cast<std::size_t>(reply - subject - 1));
        m.reply = reply;
        m.bad_reply = !ends_at(reply, data);
    } else if (ends_at(subject, data)) {
        m.subject = subject;
    } else {
        m.subject = subject;
        m.subject.push_back('\0');  // more bytes follow: at least this one
    }
    m.data.assign(data, static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
    const char** keys = nullptr;
    int count = 0;
    if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK) {
        for (int i = 0; i < count; ++i) {
            const char* value = nullptr;
            if (natsMsgHeader_Get(msg, keys[i], &value) == NATS_OK) {
                m.headers.emplace_back(keys[i], value != nullptr ? value : "");
            }
        }
        std::free(static_cast<void*>(keys));
    }
    return m;
}

void on_message(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    message m = read_message(msg);
    natsMsg_Destroy(msg);
    (*static_cast<connection::handler*>(closure))(std::move(m));
}

// What closing an asynchronous subscription waits for: libnats's completion callback, which
// comes once the subscription's message handler has returned for the last time (nats.h,
// natsSubscription_SetOnCompleteCB). `then`: the callback of a drain under way, which it
// replaces (and so runs).
struct closing {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::function<void()>* then = nullptr;
};

void on_closed(void* closure) {
    auto* c = static_cast<closing*>(closure);
    if (c->then != nullptr) {
        (*c->then)();
    }
    std::lock_guard lock(c->mu);
    c->done = true;
    c->cv.notify_all();  // under the lock: the waiter frees `c` once it has it
}

// Unsubscribes and destroys `sub` once its handler can no longer run: a handler that runs on a
// libnats thread while the connection is destroyed would use a freed closure. Waits at most
// 5 s (a handler blocked longer is left with its closure: leaked, never freed under it).
void close_subscription(natsSubscription* sub, std::function<void()>* then) {
    auto* c = new closing;
    c->then = then;
    if (natsSubscription_SetOnCompleteCB(sub, on_closed, c) != NATS_OK) {
        delete c;  // closed already: its handler has run for the last time
        natsSubscription_Unsubscribe(sub);
        natsSubscription_Destroy(sub);
        return;
    }
    natsSubscription_Unsubscribe(sub);
    bool done = false;
    {
        std::unique_lock lock(c->mu);
        done = c->cv.wait_for(lock, std::chrono::seconds(5), [c] { return c->done; });
    }
    if (done) {
        delete c;
    }
    natsSubscription_Destroy(sub);
}

void check(natsStatus s, const char* what) {
    if (s != NATS_OK) {
        throw std::runtime_error(std::string(what) + ": " + natsStatus_GetText(s));
    }
}

// A byte a PUB line can carry in a subject: not a control byte, a space or DEL.
bool subject_byte(char c) {
    const auto b = static_cast<unsigned char>(c);
    return b > ' ' && b != 0x7f;
}

bool header_name_ok(std::string_view n) {
    if (n.empty()) {
        return false;
    }
    for (char c : n) {
        if (c <= ' ' || c > '~' || c == ':') {
            return false;
        }
    }
    return true;
}

bool header_value_ok(std::string_view v) {
    return v.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

bool headers_ok(const header_list& headers) {
    for (const auto& [name, value] : headers) {
        if (!header_name_ok(name) || !header_value_ok(value)) {
            return false;
        }
    }
    return true;
}

}  // namespace

struct connection::events {
    std::mutex mu;
    std::condition_variable cv;
    bool muted = false;   // the client is closing: no more callbacks to the user
    bool closed = false;  // libnats's closed callback ran: nothing more will come
    std::function<void(std::string_view, std::string_view)> on_connection;

    template <const char* Event>
    static void forward(natsConnection* nc, void* closure) {
        auto* self = static_cast<events*>(closure);
        char url[1024] = "";
        natsConnection_GetConnectedUrl(nc, url, sizeof url);
        // libnats gives the URL as connected to, credentials included: never handed on.
        const auto shown = runtime::redacted_url(url);
        std::lock_guard lock(self->mu);
        if (!self->muted) {
            self->on_connection(Event, shown);
        }
    }
    static void on_closed(natsConnection*, void* closure) {
        auto* self = static_cast<events*>(closure);
        std::lock_guard lock(self->mu);
        self->closed = true;
        self->cv.notify_all();
    }
};

struct connection::pending {
    std::mutex mu;
    natsSubscription* sub = nullptr;
    std::string prefix;  // "_INBOX.<unique>.": a request's reply subject is prefix + token
    std::uint64_t next = 1;
    std::map<std::uint64_t, std::function<void(reply)>> waiting;

    // `done` runs under the lock: once cancel_request() returns, it is not running and will
    // not run (it must not block: it hands the reply on).
    static void on_reply(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
        auto* self = static_cast<pending*>(closure);
        const std::string_view subject = natsMsg_GetSubject(msg);
        const std::uint64_t token =
            subject.size() > self->prefix.size()
                ? std::strtoull(std::string(subject.substr(self->prefix.size())).c_str(),
                                nullptr, 10)
                : 0;
        reply r;
        if (natsMsg_IsNoResponders(msg)) {
            r.how = reply::kind::no_responders;
        } else {
            r.data.assign(natsMsg_GetData(msg),
                          static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
        }
        natsMsg_Destroy(msg);
        std::lock_guard lock(self->mu);
        if (auto it = self->waiting.find(token); it != self->waiting.end()) {
            auto done = std::move(it->second);
            self->waiting.erase(it);
            done(std::move(r));
        }
    }
};

namespace {
constexpr char disconnected[] = "disconnected";
constexpr char reconnected[] = "reconnected";
}  // namespace

bool valid_publish_subject(std::string_view subject) {
    if (subject.empty() || subject.size() > 1024) {
        return false;
    }
    for (char c : subject) {
        if (!subject_byte(c)) {
            return false;
        }
    }
    return true;
}

connection::connection(options o) : inbox_prefix_(o.inbox_prefix) {
    natsOptions* opts = identity_options(o);
    natsOptions_SetName(opts, o.name.c_str());
    natsOptions_SetSendAsap(opts, true);
    loop_ = std::make_shared<socket_loop>();
    natsOptions_SetEventLoop(opts, loop_.get(), socket_loop::attach, socket_loop::read,
                             socket_loop::write, socket_loop::detach);
    natsOptions_SetMaxReconnect(opts, -1);
    natsOptions_SetReconnectWait(opts, 250);
    if (o.on_connection) {
        events_ = std::make_unique<events>();
        events_->on_connection = std::move(o.on_connection);
        natsOptions_SetDisconnectedCB(opts, events::forward<disconnected>, events_.get());
        natsOptions_SetReconnectedCB(opts, events::forward<reconnected>, events_.get());
        natsOptions_SetClosedCB(opts, events::on_closed, events_.get());
    }
    natsStatus s = natsConnection_Connect(&nc_, opts);
    natsOptions_Destroy(opts);
    if (s != NATS_OK) {
        // What the server said ("Authorization Violation"), with any secret it may echo out.
        natsStatus last = NATS_OK;
        const char* said = nats_GetLastError(&last);
        std::string why = natsStatus_GetText(s);
        if (said != nullptr && *said != '\0' && why != said) {
            why += std::string(" (") + said + ")";
        }
        throw std::runtime_error("nats connect to " + runtime::redacted_url(o.url) + ": " +
                                 runtime::scrubbed(why, o.url));
    }
}

connection::~connection() {
    // Before the handlers and their closures go: no libnats thread may still be in one.
    if (pending_ && pending_->sub != nullptr) {
        close_subscription(pending_->sub, nullptr);
    }
    for (std::size_t token = 0; token < subs_.size(); ++token) {
        if (subs_[token] != nullptr) {
            auto drain = drained_.find(token);
            close_subscription(subs_[token],
                               drain != drained_.end() ? drain->second.get() : nullptr);
        }
    }
    if (nc_ != nullptr) {
        if (events_) {
            std::lock_guard lock(events_->mu);
            events_->muted = true;
        }
        // Closing drops what libnats still buffers: send it, and wait until the server has it.
        loop_->send_now();
        if (connected()) {
            natsConnection_FlushTimeout(nc_, 1000);
        }
        natsConnection_Close(nc_);
        if (events_) {
            std::unique_lock lock(events_->mu);
            events_->cv.wait_for(lock, std::chrono::seconds(5), [&] { return events_->closed; });
        }
        natsConnection_Destroy(nc_);
    }
}

std::string connection::new_inbox() const {
    natsInbox* inbox = nullptr;
    check(natsInbox_Create(&inbox), "nats inbox");
    std::string unique(inbox);  // "_INBOX.<unique>"
    natsInbox_Destroy(inbox);
    return inbox_prefix_ + unique.substr(unique.find('.'));
}

bool connection::publish(const std::string& subject, std::string_view data) {
    if (!valid_publish_subject(subject)) {
        return false;
    }
    return loop_->publishing([&] {
        return natsConnection_Publish(nc_, subject.c_str(), data.data(),
                                      static_cast<int>(data.size())) == NATS_OK;
    });
}

bool connection::publish_request(const std::string& subject, const std::string& reply,
                                 const header_list& headers, std::string_view data) {
    if (!valid_publish_subject(subject) || (!reply.empty() && !valid_publish_subject(reply)) ||
        !headers_ok(headers)) {
        return false;
    }
    return publish_message(subject, reply.empty() ? nullptr : reply.c_str(), headers, data);
}

bool connection::publish_message(const std::string& subject, const char* reply,
                                 const header_list& headers, std::string_view data) {
    natsMsg* msg = nullptr;
    natsStatus s = natsMsg_Create(&msg, subject.c_str(), reply, data.data(),
                                  static_cast<int>(data.size()));
    for (std::size_t i = 0; s == NATS_OK && i < headers.size(); ++i) {
        s = natsMsgHeader_Set(msg, headers[i].first.c_str(), headers[i].second.c_str());
    }
    if (s == NATS_OK) {
        s = loop_->publishing([&] { return natsConnection_PublishMsg(nc_, msg); });
    }
    natsMsg_Destroy(msg);
    return s == NATS_OK;
}

bool connection::publish_request(const std::string& subject, const std::string& reply,
                                  std::string_view data) {
    if (reply.empty()) {
        return publish(subject, data);
    }
    if (!valid_publish_subject(subject) || !valid_publish_subject(reply)) {
        return false;
    }
    return loop_->publishing([&] {
        return natsConnection_PublishRequest(nc_, subject.c_str(), reply.c_str(), data.data(),
                                             static_cast<int>(data.size())) == NATS_OK;
    });
}

std::size_t connection::subscribe(const std::string& subject, handler h) {
    handlers_.push_back(std::make_unique<handler>(std::move(h)));
    natsSubscription* sub = nullptr;
    check(natsConnection_Subscribe(&sub, nc_, subject.c_str(), on_message, handlers_.back().get()),
          "nats subscribe");
    subs_.push_back(sub);
    return subs_.size() - 1;
}

std::size_t connection::queue_subscribe(const std::string& subject, const std::string& queue,
                                         handler h) {
    handlers_.push_back(std::make_unique<handler>(std::move(h)));
    natsSubscription* sub = nullptr;
    check(natsConnection_QueueSubscribe(&sub, nc_, subject.c_str(), queue.c_str(), on_message,
                                        handlers_.back().get()),
          "nats queue subscribe");
    subs_.push_back(sub);
    return subs_.size() - 1;
}

void connection::drain(std::size_t token, std::function<void()> done) {
    if (token >= subs_.size() || subs_[token] == nullptr) {
        done();
        return;
    }
    auto& slot = drained_[token];
    slot = std::make_unique<std::function<void()>>(std::move(done));
    auto* cb = slot.get();
    auto on_complete = [](void* closure) { (*static_cast<std::function<void()>*>(closure))(); };
    if (natsSubscription_SetOnCompleteCB(subs_[token], on_complete, cb) != NATS_OK) {
        (*cb)();  // closed already: nothing more will be delivered
        return;
    }
    // Without a server nothing more can arrive, and a drain would wait for its PONG until its
    // own timeout: what was delivered is handled, the rest is the clients' to retry (nothing
    // of it was acknowledged).
    if (!connected() || natsSubscription_DrainTimeout(subs_[token], 10000) != NATS_OK) {
        // Not drained (the connection is closed, or the subscription closed meanwhile): stop
        // the deliveries at once; the completion callback still comes.
        natsSubscription_Unsubscribe(subs_[token]);
    }
}

void connection::unsubscribe(std::size_t token) {
    if (token < subs_.size() && subs_[token] != nullptr) {
        auto drain = drained_.find(token);
        close_subscription(subs_[token], drain != drained_.end() ? drain->second.get() : nullptr);
        subs_[token] = nullptr;
    }
}

bool connection::request_many(const std::string& subject, std::string_view data,
                               std::chrono::milliseconds timeout,
                               const std::function<bool(std::string)>& more) {
    if (!valid_publish_subject(subject)) {
        return false;
    }
    const std::string inbox = new_inbox();
    natsSubscription* sub = nullptr;
    natsStatus s = natsConnection_SubscribeSync(&sub, nc_, inbox.c_str());
    if (s == NATS_OK) {
        s = natsConnection_PublishRequest(nc_, subject.c_str(), inbox.c_str(), data.data(),
                                          static_cast<int>(data.size()));
    }
    bool done = false;
    while (s == NATS_OK && !done) {
        natsMsg* msg = nullptr;
        s = natsSubscription_NextMsg(&msg, sub, static_cast<int64_t>(timeout.count()));
        if (s == NATS_OK) {
            std::string m(natsMsg_GetData(msg),
                          static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
            natsMsg_Destroy(msg);
            done = !more(std::move(m));
        }
    }
    if (sub != nullptr) {
        natsSubscription_Unsubscribe(sub);
        natsSubscription_Destroy(sub);
    }
    return done;
}

std::optional<std::string> connection::request(const std::string& subject, std::string_view data,
                                                std::chrono::milliseconds timeout) {
    if (!valid_publish_subject(subject)) {
        return std::nullopt;
    }
    natsMsg* reply = nullptr;
    natsStatus s = natsConnection_Request(&reply, nc_, subject.c_str(), data.data(),
                                          static_cast<int>(data.size()),
                                          static_cast<int64_t>(timeout.count()));
    if (s != NATS_OK) {
        return std::nullopt;
    }
    std::string out(natsMsg_GetData(reply), static_cast<std::size_t>(natsMsg_GetDataLength(reply)));
    natsMsg_Destroy(reply);
    return out;
}

std::vector<std::optional<std::string>> connection::request_all(
    const std::vector<std::string>& subjects, std::string_view data,
    std::chrono::milliseconds timeout) {
    return request_all(subjects, std::vector<std::string>(subjects.size(), std::string(data)),
                       timeout);
}

std::vector<std::optional<std::string>> connection::request_all(
    const std::vector<std::string>& subjects, const std::vector<std::string>& bodies,
    std::chrono::milliseconds timeout) {
    std::vector<std::optional<std::string>> out(subjects.size());
    if (bodies.size() != subjects.size()) {
        throw std::invalid_argument("request_all: one body per subject");
    }
    if (subjects.empty()) {
        return out;
    }
    const std::string prefix = new_inbox() + ".";
    natsSubscription* sub = nullptr;
    natsStatus s = natsConnection_SubscribeSync(&sub, nc_, (prefix + "*").c_str());
    for (std::size_t i = 0; s == NATS_OK && i < subjects.size(); ++i) {
        if (!valid_publish_subject(subjects[i])) {
            continue;  // no answer: nullopt
        }
        s = natsConnection_PublishRequest(nc_, subjects[i].c_str(),
                                          (prefix + std::to_string(i)).c_str(),
                                          bodies[i].data(), static_cast<int>(bodies[i].size()));
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::size_t answered = 0;
    while (s == NATS_OK && answered < subjects.size()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            break;
        }
        natsMsg* msg = nullptr;
        if (natsSubscription_NextMsg(&msg, sub, static_cast<int64_t>(left.count())) != NATS_OK) {
            break;
        }
        const std::string subject = natsMsg_GetSubject(msg);
        const std::size_t i = std::strtoul(subject.c_str() + prefix.size(), nullptr, 10);
        if (subject.size() > prefix.size() && i < out.size() && !out[i]) {
            out[i].emplace(natsMsg_GetData(msg),
                           static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
            ++answered;
        }
        natsMsg_Destroy(msg);
    }
    if (sub != nullptr) {
        natsSubscription_Unsubscribe(sub);
        natsSubscription_Destroy(sub);
    }
    return out;
}

std::uint64_t connection::request_async(const std::string& subject, const header_list& headers,
                                        std::string_view data, std::function<void(reply)> done) {
    if (!headers_ok(headers) || !valid_publish_subject(subject)) {
        return 0;
    }
    std::uint64_t token = 0;
    std::string reply_to;
    {
        std::lock_guard lock(pending_mu_);
        if (!pending_) {
            auto p = std::make_unique<pending>();
            try {
                p->prefix = new_inbox() + ".";
            } catch (const std::runtime_error&) {
                return 0;
            }
            if (natsConnection_Subscribe(&p->sub, nc_, (p->prefix + "*").c_str(),
                                         pending::on_reply, p.get()) != NATS_OK) {
                return 0;
            }
            pending_ = std::move(p);
        }
        std::lock_guard waiting(pending_->mu);
        token = pending_->next++;
        pending_->waiting.emplace(token, std::move(done));
        reply_to = pending_->prefix + std::to_string(token);
    }
    if (!publish_message(subject, reply_to.c_str(), headers, data)) {
        cancel_request(token);
        return 0;
    }
    return token;
}

void connection::cancel_request(std::uint64_t token) {
    std::lock_guard lock(pending_mu_);
    if (pending_) {
        std::lock_guard waiting(pending_->mu);
        pending_->waiting.erase(token);
    }
}

std::size_t connection::requests_waiting() {
    std::lock_guard lock(pending_mu_);
    if (!pending_) {
        return 0;
    }
    std::lock_guard waiting(pending_->mu);
    return pending_->waiting.size();
}

void connection::flush() {
    loop_->send_now();  // what this thread queued a send for (it is busy here)
    if (connected()) {  // else no server answers the PING: libnats keeps what it holds
        natsConnection_FlushTimeout(nc_, 5000);
    }
}

void connection::batch_sends_here(std::function<void(std::function<void()>)> post) {
    loop_->batch_sends_here(std::move(post));
}

std::size_t connection::buffered() const {
    const int n = natsConnection_Buffered(nc_);
    return n > 0 ? static_cast<std::size_t>(n) : 0;
}

bool connection::connected() const {
    return natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED;
}

std::int64_t connection::max_payload() const {
    return natsConnection_GetMaxPayload(nc_);
}

}  // namespace wuhu::nats
