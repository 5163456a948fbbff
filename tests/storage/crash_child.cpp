// The child of the store crash test: appends operations to one session as fast as it can and
// acknowledges each on stdout (one line, flushed) only after its commit returned. The parent
// kills it with SIGKILL at a random moment.
//
//   store_crash_child <store-url> <session-id> <epoch> <item-prefix>
#include "session/reducer.hpp"
#include "tests/storage/store_for.hpp"

#include <cstdio>
#include <iostream>

using namespace wuhu;

int main(int argc, char** argv) {
    if (argc != 5) {
        std::cerr << "usage: store_crash_child <store-url> <session-id> <epoch> <prefix>\n";
        return 2;
    }
    auto store = testing::store_for(argv[1]);
    auto sid = session::session_id::parse(argv[2]).value();
    auto log = store->open(sid, session::lease_epoch{std::stoull(argv[3])});
    if (!log) {
        std::cerr << "open: " << log.error().message() << "\n";
        return 1;
    }
    auto state = (*log)->load();
    if (!state) {
        std::cerr << "load: " << state.error().message() << "\n";
        return 1;
    }
    session::session_state s = std::move(*state);
    const std::string prefix = argv[4];
    for (std::uint64_t n = 0;; ++n) {
        // Alternate the operations a session sees most: enqueue, then drain.
        auto id = session::queue_item_id::parse(prefix + "-" + std::to_string(n)).value();
        auto out =
            (*log)->enqueue(s,
                            session::enqueue_input{
                                session::lane::follow_up, id,
                                session::user_input{session::unknown_author{}, "work " + id.str()}},
                            session::unix_ms{static_cast<std::int64_t>(n)});
        if (!out) {
            std::cerr << "enqueue: " << out.error().message() << "\n";
            return 1;
        }
        session::apply_actions(out->actions, s);
        std::printf("%s\n", id.str().c_str());
        std::fflush(stdout);
        if (n % 3 == 2) {
            auto drained = (*log)->drain(s, session::checkpoint::follow_up,
                                         session::unix_ms{static_cast<std::int64_t>(n)});
            if (!drained) {
                std::cerr << "drain: " << drained.error().message() << "\n";
                return 1;
            }
            session::apply_actions(*drained, s);
        }
    }
}
