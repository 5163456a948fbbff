// The worker's inference slots (providers/inference_slots.hpp): at most so many inferences at
// once, per worker and per tenant, and a freed slot goes to the waiting tenant with the fewest
// running, so one busy tenant cannot starve the others.
#include "providers/inference_slots.hpp"

#include <gtest/gtest.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <list>
#include <optional>
#include <vector>

namespace wuhu::testing {

namespace asio = boost::asio;
using providers::inference_slots;

namespace {

// Inferences that take a slot, in the order they got one; each holds it until let go.
struct runner {
    asio::io_context io;
    inference_slots slots;
    std::vector<std::string> order;  // "<tenant><n>" as each got its slot
    std::list<std::optional<inference_slots::slot>> held;

    explicit runner(inference_slots::limits l) : slots(l) {}

    // A named coroutine taking its arguments by value (a lambda's captures would dangle).
    static asio::awaitable<void> take(runner* self, std::string name) {
        auto s = co_await self->slots.acquire(name.substr(0, 1));
        self->order.push_back(name);
        self->held.emplace_back(std::move(s));
    }
    void ask(const std::string& name, asio::cancellation_signal* cancel = nullptr) {
        if (cancel != nullptr) {
            asio::co_spawn(io, take(this, name),
                           asio::bind_cancellation_slot(cancel->slot(), asio::detached));
        } else {
            asio::co_spawn(io, take(this, name), asio::detached);
        }
        io.restart();
        io.poll();
    }
    // Gives back the slot of the n-th that got one.
    void finish(std::size_t n) {
        auto it = held.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(n));
        it->reset();
        io.restart();
        io.poll();
    }
};

}  // namespace

TEST(InferenceSlots, AFreedSlotGoesToTheWaitingTenantWithTheFewestRunning) {
    runner r({2, 0});
    r.ask("a1");
    r.ask("a2");
    r.ask("a3");
    r.ask("a4");
    r.ask("b1");
    EXPECT_EQ(r.order, (std::vector<std::string>{"a1", "a2"})) << "two at once";
    EXPECT_EQ(r.slots.waiting(), 3u);
    r.finish(0);  // a1 done: a has one running, b none
    EXPECT_EQ(r.order.back(), "b1") << "b was waiting behind a's line, and goes first";
    r.finish(1);  // a2 done: a has none running
    EXPECT_EQ(r.order.back(), "a3");
    r.finish(2);
    EXPECT_EQ(r.order.back(), "a4");
    EXPECT_EQ(r.slots.running(), 2u);
}

TEST(InferenceSlots, ATenantRunsAtMostItsShareWhileOthersRunTheirs) {
    runner r({0, 1});
    r.ask("a1");
    r.ask("a2");
    r.ask("b1");
    r.ask("c1");
    EXPECT_EQ(r.order, (std::vector<std::string>{"a1", "b1", "c1"}));
    EXPECT_EQ(r.slots.running("a"), 1u);
    r.finish(0);
    EXPECT_EQ(r.order.back(), "a2");
}

TEST(InferenceSlots, AWaiterThatIsCancelledLeavesTheLineAndNoSlotIsLost) {
    runner r({1, 0});
    r.ask("a1");
    asio::cancellation_signal cancel;
    r.ask("b1", &cancel);
    r.ask("c1");
    cancel.emit(asio::cancellation_type::terminal);  // b's session was aborted or unloaded
    r.io.restart();
    r.io.poll();
    EXPECT_EQ(r.slots.waiting(), 1u);
    r.finish(0);
    EXPECT_EQ(r.order, (std::vector<std::string>{"a1", "c1"}));
    r.finish(1);
    EXPECT_EQ(r.slots.running(), 0u);
    r.ask("d1");
    EXPECT_EQ(r.order.back(), "d1") << "every slot came back";
}

}  // namespace wuhu::testing
