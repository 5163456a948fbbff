// A connection's socket IO, through libnats's external event loop API
// (natsOptions_SetEventLoop), so that what is published is sent in batches.
//
// With libnats's own threads, every publish of a connection that sends at once
// (natsOptions_SetSendAsap) is a send() on the publishing thread: a worker paid a system call,
// and the server a read, for each of the ~14 messages of a turn. Here a publish appends to
// libnats's buffer, and the buffer is sent whole:
//   * by the thread of this loop, woken when the buffer stops being empty (any thread's
//     publishes, libnats's own PINGs);
//   * or, for a thread that batches (connection::batch_sends_here: a worker's executor), by
//     work that thread queued for itself: everything it publishes until then goes out in one
//     send(), with no hand-off to another thread.
// Replies still leave at once, without libnats's flusher delay.
//
// The loop waits with poll() (level-triggered: libnats reads at most one buffer per event and
// expects to be called again while data remains), on the connection's socket and an eventfd
// that the callbacks use to wake it.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace wuhu::nats {

class socket_loop : public std::enable_shared_from_this<socket_loop> {
  public:
    // Queues a call to run later on the thread that batches (an executor's post).
    using poster = std::function<void(std::function<void()>)>;

    socket_loop();
    ~socket_loop();  // joins the thread (after the connection has detached)
    socket_loop(const socket_loop&) = delete;
    socket_loop& operator=(const socket_loop&) = delete;

    // The libnats callbacks (natsOptions_SetEventLoop, with this object as the loop). They
    // may run on any thread, with the connection's lock held: they never wait for another
    // thread, except detach, which libnats calls without its lock.
    static natsStatus attach(void** user_data, void* loop, natsConnection* nc, natsSock fd);
    static natsStatus read(void* user_data, bool add);
    static natsStatus write(void* user_data, bool add);
    static natsStatus detach(void* user_data);

    // Publishes made on the calling thread from now on are sent by a call queued with `post`
    // (none: no thread batches any more, and what was queued is sent now).
    void batch_sends_here(poster post);
    // Runs `publish` (a libnats publish) so that, on the batching thread, its send is queued
    // there rather than handed to this loop's thread.
    template <class F>
    auto publishing(F&& publish) {
        const bool here = batching_thread_.load() == std::this_thread::get_id();
        if (here) {
            deferring_ = this;
        }
        auto r = publish();
        if (here) {
            deferring_ = nullptr;
        }
        return r;
    }
    // Sends what libnats has buffered, on the calling thread (any); nothing when it has
    // nothing. Leaves to the loop's thread what the socket does not take at once.
    void send_now();

  private:
    void run();
    void wake();

    std::mutex mu_;
    std::condition_variable idle_;
    natsConnection* nc_ = nullptr;  // null when detached
    int fd_ = -1;
    bool want_read_ = false;
    bool want_write_ = false;          // libnats has data to send (from its ADD to its REMOVE)
    bool write_blocked_ = false;       // a send left data behind: wait until the socket takes more
    bool send_queued_ = false;         // a send_now() is queued on the batching thread
    std::uint64_t write_removed_ = 0;  // times libnats withdrew its write interest
    int busy_ = 0;                     // calls into libnats with nc_ under way
    bool stopping_ = false;
    std::atomic<std::thread::id> batching_thread_;  // set once, before publishes start there
    poster post_;
    std::mutex send_mu_;  // one send at a time: libnats must never be asked to send nothing
    int wake_fd_ = -1;
    std::thread thread_;
    static thread_local socket_loop* deferring_;  // the loop whose sends this thread defers
    static thread_local socket_loop* inside_;     // the loop this thread is in libnats for
};

}  // namespace wuhu::nats
