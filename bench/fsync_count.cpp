// Counts a process's fsync() and fdatasync() calls, for turn_bench (LD_PRELOAD=libfsync_count.so).
//
// The count lives in a shared page: the file WUHU_FSYNC_COUNTER names, mapped by this library
// in the measured process and read by the benchmark at any moment (two atomic counters: the
// calls, and the nanoseconds spent in them). Without the variable the calls are counted where
// nobody reads them.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <ctime>

namespace {

std::atomic<std::uint64_t> unread[2];
std::atomic<std::uint64_t>* counter = nullptr;

__attribute__((constructor)) void map_counter() {
    const char* path = std::getenv("WUHU_FSYNC_COUNTER");
    if (path == nullptr) {
        return;
    }
    const int fd = ::open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) {
        return;
    }
    if (::ftruncate(fd, 4096) == 0) {
        void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (page != MAP_FAILED) {
            counter = static_cast<std::atomic<std::uint64_t>*>(page);
        }
    }
    ::close(fd);
}

std::uint64_t now_ns() {
    timespec t{};
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(t.tv_nsec);
}

template <class F>
int counted(F&& call) {
    auto* c = counter != nullptr ? counter : unread;
    const auto began = now_ns();
    const int r = call();
    c[0].fetch_add(1, std::memory_order_relaxed);
    c[1].fetch_add(now_ns() - began, std::memory_order_relaxed);
    return r;
}

template <class F>
F* real(const char* name) {
    return reinterpret_cast<F*>(::dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int fsync(int fd) {
    static auto* next = real<int(int)>("fsync");
    return counted([&] { return next(fd); });
}

extern "C" int fdatasync(int fd) {
    static auto* next = real<int(int)>("fdatasync");
    return counted([&] { return next(fd); });
}
