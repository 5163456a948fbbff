#include "nats/socket_loop.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <utility>

namespace wuhu::nats {

namespace {

// A send queued on the batching thread that has not run after this long, when the loop's
// thread wakes meanwhile (a read), is done by the loop's thread. (Once its executor has stopped,
// what a thread queued is sent by connection::flush() or the connection's destructor.)
constexpr int queued_send_patience_ms = 20;

}  // namespace

thread_local socket_loop* socket_loop::deferring_ = nullptr;
thread_local socket_loop* socket_loop::inside_ = nullptr;

socket_loop::socket_loop() {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) {
        throw std::runtime_error("nats socket loop: eventfd failed");
    }
    thread_ = std::thread([this] { run(); });
}

socket_loop::~socket_loop() {
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    wake();
    thread_.join();
    ::close(wake_fd_);
}

void socket_loop::wake() {
    if (std::this_thread::get_id() == thread_.get_id()) {
        return;  // the loop looks at its state again before it waits
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
}

void socket_loop::batch_sends_here(poster post) {
    {
        std::lock_guard lock(mu_);
        batching_thread_ = post ? std::this_thread::get_id() : std::thread::id();
        post_ = std::move(post);
        send_queued_ = false;
    }
    send_now();  // what a queue that may not run again held
}

natsStatus socket_loop::attach(void** user_data, void* loop, natsConnection* nc, natsSock fd) {
    auto* self = static_cast<socket_loop*>(loop);
    {
        std::lock_guard lock(self->mu_);
        self->nc_ = nc;
        self->fd_ = fd;
        self->want_read_ = true;  // attached: poll for reads (libnats does not ask)
        self->want_write_ = false;
        self->write_blocked_ = false;
    }
    *user_data = self;
    self->wake();
    return NATS_OK;
}

natsStatus socket_loop::read(void* user_data, bool add) {
    auto* self = static_cast<socket_loop*>(user_data);
    {
        std::lock_guard lock(self->mu_);
        if (self->want_read_ == add) {
            return NATS_OK;
        }
        self->want_read_ = add;
    }
    self->wake();
    return NATS_OK;
}

natsStatus socket_loop::write(void* user_data, bool add) {
    auto* self = static_cast<socket_loop*>(user_data);
    bool post = false;
    {
        std::lock_guard lock(self->mu_);
        if (!add) {
            ++self->write_removed_;
            self->want_write_ = false;
            return NATS_OK;  // the loop stops writing when it looks again
        }
        self->want_write_ = true;
        if (deferring_ == self) {
            post = !std::exchange(self->send_queued_, true);
            if (!post) {
                return NATS_OK;
            }
        } else {
            // Anything else (another thread's publish, a PING of a flush on the batching
            // thread, which then waits for the PONG) is sent now, with what was queued.
            self->send_queued_ = false;
        }
    }
    if (post) {
        // Queued behind what the batching thread has ready: all it publishes meanwhile joins.
        self->post_([held = self->weak_from_this()] {
            if (auto loop = held.lock()) {
                {
                    std::lock_guard lock(loop->mu_);
                    loop->send_queued_ = false;
                }
                loop->send_now();
            }
        });
        return NATS_OK;  // no wake-up: the batching thread's queue sends it
    }
    self->wake();
    return NATS_OK;
}

natsStatus socket_loop::detach(void* user_data) {
    auto* self = static_cast<socket_loop*>(user_data);
    std::unique_lock lock(self->mu_);
    self->nc_ = nullptr;
    self->fd_ = -1;
    self->want_read_ = self->want_write_ = false;
    lock.unlock();
    self->wake();
    lock.lock();
    // The connection may be destroyed once this returns: no call into it may be under way,
    // but the one this thread may be in (libnats closes from inside a read, on a server error).
    const int mine = inside_ == self ? 1 : 0;
    self->idle_.wait(lock, [&] { return self->busy_ <= mine; });
    return NATS_OK;
}

void socket_loop::send_now() {
    std::lock_guard one_at_a_time(send_mu_);
    natsConnection* nc = nullptr;
    std::uint64_t removed = 0;
    {
        std::lock_guard lock(mu_);
        if (nc_ == nullptr || !want_write_) {
            return;  // sent already (libnats fails a send of nothing as a closed connection)
        }
        nc = nc_;
        removed = write_removed_;
        ++busy_;
    }
    inside_ = this;
    natsConnection_ProcessWriteEvent(nc);  // libnats withdraws its interest once all is sent
    inside_ = nullptr;
    bool blocked = false;
    {
        std::lock_guard lock(mu_);
        --busy_;
        idle_.notify_all();
        // Still wanted and never withdrawn: the socket took only part of it. The loop's
        // thread sends the rest as the socket drains.
        blocked = want_write_ && write_removed_ == removed && nc_ == nc;
        if (blocked) {
            write_blocked_ = true;
            send_queued_ = false;
        }
    }
    if (blocked) {
        wake();  // the loop's thread waits until the socket takes more
    }
}

void socket_loop::run() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
        natsConnection* nc = nc_;
        const int fd = fd_;
        if (nc != nullptr && want_write_ && !write_blocked_ && !send_queued_) {
            lock.unlock();
            send_now();
            lock.lock();
            continue;
        }
        short events = 0;
        if (nc != nullptr && want_read_) {
            events |= POLLIN;
        }
        if (nc != nullptr && want_write_ && write_blocked_) {
            events |= POLLOUT;
        }
        const int timeout = send_queued_ ? queued_send_patience_ms : -1;
        lock.unlock();
        pollfd p[2] = {{wake_fd_, POLLIN, 0}, {events != 0 ? fd : -1, events, 0}};
        const int n = ::poll(p, 2, timeout);
        if (n < 0 && errno != EINTR) {
            ::usleep(1000);  // not expected (EINVAL, ENOMEM): do not spin
        }
        if ((p[0].revents & POLLIN) != 0) {
            std::uint64_t count = 0;
            [[maybe_unused]] auto r = ::read(wake_fd_, &count, sizeof count);
        }
        lock.lock();
        if (n == 0 && send_queued_) {
            send_queued_ = false;  // its thread has not run it: send from here
            continue;
        }
        if (nc_ != nc || fd_ != fd || nc == nullptr || p[1].revents == 0) {
            continue;  // woken, or detached or reattached meanwhile: look again
        }
        if ((p[1].revents & POLLNVAL) != 0) {
            lock.unlock();
            ::usleep(1000);  // closed under us: libnats withdraws its interest next
            lock.lock();
            continue;
        }
        constexpr short failed = POLLERR | POLLHUP;
        if (want_write_ && (p[1].revents & (POLLOUT | failed)) != 0) {
            write_blocked_ = false;  // sent at the top of the next turn
        }
        if (want_read_ && (p[1].revents & (POLLIN | failed)) != 0) {
            ++busy_;
            lock.unlock();
            inside_ = this;
            natsConnection_ProcessReadEvent(nc);  // one buffer: called again while data remains
            inside_ = nullptr;
            lock.lock();
            --busy_;
            idle_.notify_all();
        }
    }
}

}  // namespace wuhu::nats
