// The spec rules of lanes, cancelation, checkpoints, tool calls and has_work, each a test.
#include "session/rules.hpp"
#include "session/codec.hpp"
#include "session/patch.hpp"
#include "session/reducer.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace {

std::vector<std::string> ids(const std::vector<queue_item>& items) {
    std::vector<std::string> out;
    for (const auto& q : items) {
        out.push_back(q.id.str());
    }
    return out;
}

session_state drained(session_state s, checkpoint c, std::int64_t at = 100) {
    apply_actions(plan_drain(s, c, unix_ms{at}), s);
    return s;
}

}  // namespace

TEST(Enqueue, RecordsAnEnqueuedFactAndSetsHasWorkInTheSameOperation) {
    session_state s;
    auto out = plan_enqueue(s, user_in(lane::steer, "a", "hi"), unix_ms{5});
    ASSERT_TRUE(out.has_value());
    EXPECT_FALSE(out->duplicate);
    EXPECT_EQ(out->id.str(), "a");
    ASSERT_EQ(out->actions.size(), 2u);
    EXPECT_TRUE(std::holds_alternative<journal_recorded>(out->actions[0]));
    EXPECT_EQ(out->actions[1], action{has_work_set{true}});
    apply_actions(out->actions, s);
    EXPECT_TRUE(s.has_work);
    EXPECT_EQ(s.in(lane::steer).pending.size(), 1u);
    EXPECT_EQ(s.version(), (version_vector{0, 0, 1, 0}));
    // has_work is only written when it changes
    auto again = plan_enqueue(s, user_in(lane::steer, "b", "hi"), unix_ms{6});
    EXPECT_EQ(again->actions.size(), 1u);
}

TEST(Enqueue, AnExistingIdReturnsTheSameResultAndChangesNothing) {
    session_state s = enqueued({}, user_in(lane::follow_up, "k1", "first"), 1);
    auto out = plan_enqueue(s, user_in(lane::follow_up, "k1", "retry"), unix_ms{2});
    ASSERT_TRUE(out.has_value());
    EXPECT_TRUE(out->duplicate);
    EXPECT_EQ(out->id.str(), "k1");
    EXPECT_TRUE(out->actions.empty());
    // Also after materialization, and across lanes: ids are unique per session.
    s = drained(s, checkpoint::follow_up);
    EXPECT_TRUE(plan_enqueue(s, user_in(lane::steer, "k1", "x"), unix_ms{3})->duplicate);
}

TEST(Enqueue, ALaneIsFullPastItsLimitOfItemsOrBytesButADuplicateIsNot) {
    session_state s = enqueued({}, user_in(lane::follow_up, "a", "12345"), 1);
    s = enqueued(s, user_in(lane::follow_up, "b", "123"), 2);
    EXPECT_EQ(lane_room(s, user_in(lane::follow_up, "c", "x"), {2, 0}), errc::lane_full);
    EXPECT_EQ(lane_room(s, user_in(lane::follow_up, "c", "x"), {3, 0}), errc::ok);
    EXPECT_EQ(lane_room(s, user_in(lane::follow_up, "a", "x"), {2, 0}), errc::ok)
        << "an id the session has is a duplicate, answered as before";
    EXPECT_EQ(lane_room(s, user_in(lane::steer, "c", "x"), {2, 0}), errc::ok)
        << "each lane has its own limit";
    EXPECT_EQ(lane_room(s, user_in(lane::follow_up, "c", "12"), {0, 10}), errc::ok);
    EXPECT_EQ(lane_room(s, user_in(lane::follow_up, "c", "123"), {0, 10}), errc::lane_full);
    EXPECT_EQ(lane_room(s, system_in("c", std::string(100, 'x')), {0, 10}), errc::lane_full)
        << "the system lane too, for what clients send";
    s = drained(s, checkpoint::follow_up);
    EXPECT_EQ(lane_room(s, user_in(lane::follow_up, "c", "x"), {1, 1}), errc::ok)
        << "materialized items are no longer pending";
}

TEST(Enqueue, SystemLaneTakesSourcesAndUserLanesTakeAuthors) {
    session_state s;
    auto wrong = system_in("s", "x");
    wrong.in = lane::steer;
    EXPECT_EQ(plan_enqueue(s, wrong, unix_ms{1}).error(), make_error_code(errc::invalid_lane));
    auto wrong2 = user_in(lane::steer, "u", "x");
    wrong2.in = lane::system;
    EXPECT_EQ(plan_enqueue(s, wrong2, unix_ms{1}).error(), make_error_code(errc::invalid_lane));
    EXPECT_EQ(plan_enqueue(s, user_in(lane::steer, "u", "x", system_author{}), unix_ms{1}).error(),
              make_error_code(errc::invalid_author));
}

TEST(Cancel, SystemLaneItemsAreNotCancelable) {
    session_state s = enqueued({}, system_in("s1", "callback"), 1);
    EXPECT_EQ(plan_cancel(s, lane::system, item("s1"), unix_ms{2}).error(),
              make_error_code(errc::not_cancelable));
}

TEST(Cancel, PendingSteerAndFollowUpItemsAreCanceled) {
    for (lane l : {lane::steer, lane::follow_up}) {
        session_state s = enqueued({}, user_in(l, "a", "x"), 1);
        auto out = plan_cancel(s, l, item("a"), unix_ms{2});
        ASSERT_TRUE(out.has_value());
        EXPECT_TRUE(out->canceled);
        apply_actions(out->actions, s);
        EXPECT_TRUE(s.in(l).pending.empty());
        EXPECT_EQ(s.find_item("a")->status, item_status::canceled);
        EXPECT_EQ(s.in(l).journal.size(), 2u);
        // Retrying the cancel gives the same reply and records nothing.
        auto again = plan_cancel(s, l, item("a"), unix_ms{3});
        EXPECT_TRUE(again->canceled);
        EXPECT_TRUE(again->actions.empty());
    }
}

TEST(Cancel, MaterializedItemsAreNotCanceled) {
    session_state s = drained(enqueued({}, user_in(lane::steer, "a", "x"), 1), checkpoint::steer);
    auto out = plan_cancel(s, lane::steer, item("a"), unix_ms{3});
    ASSERT_TRUE(out.has_value());
    EXPECT_FALSE(out->canceled);
    EXPECT_TRUE(out->actions.empty());
}

TEST(Cancel, UnknownIdOrWrongLaneIsItemNotFound) {
    session_state s = enqueued({}, user_in(lane::steer, "a", "x"), 1);
    EXPECT_EQ(plan_cancel(s, lane::steer, item("zz"), unix_ms{2}).error(),
              make_error_code(errc::item_not_found));
    EXPECT_EQ(plan_cancel(s, lane::follow_up, item("a"), unix_ms{2}).error(),
              make_error_code(errc::item_not_found));
}

TEST(Checkpoint, SteerCheckpointDrainsSystemAndSteerButNotFollowUp) {
    session_state s;
    s = enqueued(s, user_in(lane::follow_up, "f", "later"), 1);
    s = enqueued(s, user_in(lane::steer, "st", "now"), 2);
    s = enqueued(s, system_in("sy", "cb"), 3);
    EXPECT_EQ(ids(select_checkpoint(s, checkpoint::steer)), (std::vector<std::string>{"st", "sy"}));
    s = drained(s, checkpoint::steer);
    EXPECT_EQ(s.in(lane::follow_up).pending.size(), 1u);
    EXPECT_TRUE(s.in(lane::steer).pending.empty());
    EXPECT_TRUE(s.in(lane::system).pending.empty());
}

TEST(Checkpoint, FollowUpCheckpointPrefersSystemAndSteer) {
    session_state s;
    s = enqueued(s, user_in(lane::follow_up, "f", "later"), 1);
    s = enqueued(s, user_in(lane::steer, "st", "now"), 2);
    EXPECT_EQ(ids(select_checkpoint(s, checkpoint::follow_up)), (std::vector<std::string>{"st"}));
    s = drained(s, checkpoint::follow_up);
    EXPECT_EQ(ids(select_checkpoint(s, checkpoint::follow_up)), (std::vector<std::string>{"f"}));
    EXPECT_TRUE(select_checkpoint(s, checkpoint::steer).empty());
}

TEST(Checkpoint, FollowUpIsDrainedOnlyWhenSystemAndSteerAreEmpty) {
    session_state s;
    s = enqueued(s, user_in(lane::follow_up, "f1", "a"), 1);
    s = enqueued(s, user_in(lane::follow_up, "f2", "b"), 2);
    EXPECT_EQ(ids(select_checkpoint(s, checkpoint::follow_up)),
              (std::vector<std::string>{"f1", "f2"}));  // eager: all of them
}

TEST(Checkpoint, CrossLaneOrderIsByEnqueueTimestamp) {
    session_state s;
    s = enqueued(s, user_in(lane::steer, "st1", "a"), 10);
    s = enqueued(s, system_in("sy1", "b"), 5);  // older than st1
    s = enqueued(s, user_in(lane::steer, "st2", "c"), 20);
    s = enqueued(s, system_in("sy2", "d"), 15);
    EXPECT_EQ(ids(select_checkpoint(s, checkpoint::steer)),
              (std::vector<std::string>{"sy1", "st1", "sy2", "st2"}));
}

TEST(Checkpoint, WithinALaneOrderIsFifoEvenIfTheClockSteppedBack) {
    session_state s;
    s = enqueued(s, user_in(lane::steer, "st1", "a"), 30);
    s = enqueued(s, user_in(lane::steer, "st2", "b"), 10);
    s = enqueued(s, system_in("sy", "c"), 20);
    EXPECT_EQ(ids(select_checkpoint(s, checkpoint::steer)),
              (std::vector<std::string>{"sy", "st1", "st2"}));
}

TEST(Checkpoint, TiesGoToSystemThenSteer) {
    session_state s;
    s = enqueued(s, user_in(lane::steer, "st", "a"), 7);
    s = enqueued(s, system_in("sy", "b"), 7);
    EXPECT_EQ(ids(select_checkpoint(s, checkpoint::steer)), (std::vector<std::string>{"sy", "st"}));
}

TEST(Materialization, LinksTheQueueItemToItsTranscriptEntry) {
    session_state s;
    s = enqueued(s, user_in(lane::steer, "st", "fix it", human("u1", "Ann", "a@x.io")), 1);
    s = enqueued(s, system_in("sy", "task done"), 2);
    s = drained(s, checkpoint::steer, 50);
    ASSERT_EQ(s.transcript.size(), 2u);
    const auto& p = std::get<party_message>(s.transcript[0].body);
    EXPECT_EQ(p.content, "fix it");
    EXPECT_EQ(p.item.str(), "st");
    EXPECT_EQ(p.via, lane::steer);
    EXPECT_EQ(std::get<participant>(p.from).name, "Ann");
    const auto& m = std::get<system_message>(s.transcript[1].body);
    EXPECT_EQ(m.source.str(), "asyncBashCallback");
    EXPECT_EQ(s.find_item("st")->entry, entry_seq{1});
    EXPECT_EQ(s.find_item("sy")->entry, entry_seq{2});
    const auto& j = s.in(lane::steer).journal.back();
    EXPECT_EQ(std::get<materialized_fact>(j.fact).entry, entry_seq{1});
    EXPECT_EQ(j.at, unix_ms{50});
}

TEST(Materialization, EmptyCheckpointRecordsNothing) {
    EXPECT_TRUE(plan_drain({}, checkpoint::follow_up, unix_ms{1}).empty());
}

TEST(HasWork, MarkIdleClearsItOnlyWhenNoLaneHasPendingItems) {
    session_state s = enqueued({}, user_in(lane::follow_up, "f", "x"), 1);
    EXPECT_TRUE(plan_mark_idle(s).empty());  // an item is still queued
    s = drained(s, checkpoint::follow_up);
    auto idle = plan_mark_idle(s);
    ASSERT_EQ(idle.size(), 1u);
    EXPECT_EQ(idle[0], action{has_work_set{false}});
    apply_actions(idle, s);
    EXPECT_TRUE(plan_mark_idle(s).empty());  // already idle: nothing to write
}

TEST(ToolCalls, WillExecuteThenDidExecute) {
    session_state s;
    apply_actions(
        plan_append_assistant(s, reply("", {{"c1", "echo"}, {"c2", "clock"}}), unix_ms{1}).value(),
        s);
    ASSERT_EQ(s.tool_calls.size(), 2u);
    EXPECT_EQ(s.tool_calls[0].status, tool_status::not_started);
    EXPECT_EQ(plan_tool_did_execute(s, result_of("c1", "x"), unix_ms{2}).error(),
              make_error_code(errc::tool_call_not_started));
    // An error result may close a call that never started (aborted, recovered after a crash).
    EXPECT_TRUE(plan_tool_did_execute(s, result_of("c2", "aborted", true), unix_ms{2}));
    apply_actions(plan_tool_will_execute(s, call_id("c1"), unix_ms{2}).value(), s);
    EXPECT_EQ(s.find_tool_call("c1")->status, tool_status::started);
    EXPECT_EQ(std::get<tool_started>(s.transcript.back().body).tool, "echo");
    // A started call (an idempotent re-run after a crash) records nothing more.
    EXPECT_TRUE(plan_tool_will_execute(s, call_id("c1"), unix_ms{3}).value().empty());
    apply_actions(plan_tool_did_execute(s, result_of("c1", "out"), unix_ms{3}).value(), s);
    EXPECT_EQ(s.find_tool_call("c1")->status, tool_status::finished);
    EXPECT_EQ(std::get<tool_result>(s.transcript.back().body).tool, "echo");
    EXPECT_EQ(plan_tool_will_execute(s, call_id("c1"), unix_ms{4}).error(),
              make_error_code(errc::tool_call_finished));
    EXPECT_EQ(plan_tool_did_execute(s, result_of("c1", "x"), unix_ms{4}).error(),
              make_error_code(errc::tool_call_finished));
    EXPECT_EQ(plan_tool_will_execute(s, call_id("zz"), unix_ms{4}).error(),
              make_error_code(errc::unknown_tool_call));
}

TEST(ToolCalls, IdsAreUniqueWithinAResponse) {
    EXPECT_EQ(
        plan_append_assistant({}, reply("", {{"c", "echo"}, {"c", "echo"}}), unix_ms{1}).error(),
        make_error_code(errc::invalid_entry));
}

TEST(ToolCalls, StatusTracksTheLatestAssistantMessage) {
    session_state s;
    apply_actions(plan_append_assistant(s, reply("", {{"c1", "echo"}}), unix_ms{1}).value(), s);
    apply_actions(plan_tool_will_execute(s, call_id("c1"), unix_ms{2}).value(), s);
    apply_actions(plan_tool_did_execute(s, result_of("c1", "x"), unix_ms{2}).value(), s);
    apply_actions(plan_append_assistant(s, reply("", {{"c1", "echo"}}), unix_ms{3}).value(), s);
    EXPECT_EQ(s.tool_calls_entry, entry_seq{4});
    EXPECT_EQ(s.find_tool_call("c1")->status, tool_status::not_started);
}

TEST(Compaction, FirstKeptMovesForwardAcrossCompactions) {
    session_state s;
    for (int i = 0; i < 4; ++i) {
        s = enqueued(s, user_in(lane::follow_up, "f" + std::to_string(i), "x"), i);
        s = drained(s, checkpoint::follow_up);
    }
    EXPECT_EQ(plan_append_compaction(s, {"sum", entry_seq{9}, 0}, unix_ms{1}).error(),
              make_error_code(errc::invalid_entry));
    EXPECT_EQ(plan_append_compaction(s, {"sum", entry_seq{0}, 0}, unix_ms{1}).error(),
              make_error_code(errc::invalid_entry));
    apply_actions(plan_append_compaction(s, {"sum", entry_seq{3}, 0}, unix_ms{1}).value(), s);
    EXPECT_EQ(plan_append_compaction(s, {"sum2", entry_seq{3}, 0}, unix_ms{1}).error(),
              make_error_code(errc::invalid_entry));
    EXPECT_TRUE(plan_append_compaction(s, {"sum2", entry_seq{4}, 0}, unix_ms{1}).has_value());
}

TEST(Settings, AreValidatedAndOnlyWrittenWhenChanged) {
    session_state s;
    EXPECT_TRUE(plan_set_settings(s, s.config).value().empty());
    settings bad = s.config;
    bad.compaction_buffer = bad.context_limit;
    EXPECT_EQ(plan_set_settings(s, bad).error(), make_error_code(errc::invalid_settings));
    bad = s.config;
    bad.tools = {"has space"};
    EXPECT_EQ(plan_set_settings(s, bad).error(), make_error_code(errc::invalid_settings));
    settings next = s.config;
    next.model = "gpt-x";
    apply_actions(plan_set_settings(s, next).value(), s);
    EXPECT_EQ(s.config.model, "gpt-x");
}

TEST(Pause, IsADurableFlagWrittenOnlyOnChange) {
    session_state s;
    EXPECT_TRUE(plan_set_paused(s, false).empty());
    apply_actions(plan_set_paused(s, true), s);
    EXPECT_TRUE(s.paused);
    EXPECT_TRUE(plan_set_paused(s, true).empty());
}

TEST(Markers, InterruptionsAndDiagnosticsAreNonMessageEntries) {
    session_state s;
    apply_actions(plan_append_marker(s, interruption{"aborted"}, unix_ms{1}), s);
    apply_actions(plan_append_marker(s, diagnostic{"input_too_large", "too big"}, unix_ms{2}), s);
    ASSERT_EQ(s.transcript.size(), 2u);
    EXPECT_FALSE(is_message(s.transcript[0].body));
    EXPECT_FALSE(is_message(s.transcript[1].body));
    EXPECT_EQ(type_name(s.transcript[1].body), "diagnostic");
}

}  // namespace wuhu::testing

namespace wuhu::testing {

namespace {
timer make_timer(const std::string& id, std::int64_t due) {
    return timer{item(id), unix_ms{due}, system_source::parse("scheduledCallback").value(),
                 "wake up"};
}
}  // namespace

TEST(DurableTimers, FireIntoTheSystemLaneExactlyOnce) {
    session_state s;
    apply_actions(plan_schedule_timer(s, make_timer("t1", 500), unix_ms{1}), s);
    apply_actions(plan_schedule_timer(s, make_timer("t0", 100), unix_ms{1}), s);
    EXPECT_EQ(next_timer(s)->id.str(), "t0");
    EXPECT_TRUE(plan_schedule_timer(s, make_timer("t1", 900), unix_ms{1}).empty());  // same id: nothing
    auto fired = plan_fire_timer(s, item("t1"), unix_ms{510});
    apply_actions(fired, s);
    EXPECT_FALSE(s.timers.contains("t1"));
    ASSERT_EQ(s.in(lane::system).pending.size(), 1u);
    const auto& q = s.in(lane::system).pending_item(0);
    EXPECT_EQ(q.id.str(), "t1");
    EXPECT_EQ(q.enqueued_at, unix_ms{510});
    EXPECT_EQ(std::get<system_input>(q.payload).content, "wake up");
    EXPECT_TRUE(s.has_work);
    // Firing again, or re-scheduling the fired id, records nothing.
    EXPECT_TRUE(plan_fire_timer(s, item("t1"), unix_ms{600}).empty());
    EXPECT_TRUE(plan_schedule_timer(s, make_timer("t1", 900), unix_ms{1}).empty());
}

// Issue 31, defect 5: timer_scheduled and timer_cleared advanced no version and appeared in no
// patch; a scheduled callback could not be listed or canceled. Each is now a fact of the
// system lane: scheduled, then fired (after its item's enqueue) or unscheduled (canceled).
TEST(DurableTimers, AreFactsOfTheSystemLaneThatAdvanceItsVersion) {
    session_state s;
    const auto v0 = s.version();
    auto scheduled = plan_schedule_timer(s, make_timer("t1", 500), unix_ms{10});
    apply_actions(scheduled, s);
    EXPECT_EQ(s.version().system, v0.system + 1);
    const auto p = patch_of(v0, scheduled, s, loop_state::idle);
    ASSERT_EQ(p.journal[index_of(lane::system)].size(), 1u);
    EXPECT_EQ(std::get<scheduled_fact>(p.journal[index_of(lane::system)][0].fact).t,
              make_timer("t1", 500));
    // Listed: the subscribe patch from scratch holds the pending timers' scheduled facts.
    apply_actions(plan_schedule_timer(s, make_timer("t2", 700), unix_ms{11}), s);
    auto fired = plan_fire_timer(s, item("t2"), unix_ms{700});
    apply_actions(fired, s);
    const auto& after_fire = std::get<journal_recorded>(fired[fired.size() - 2]).j;
    EXPECT_EQ(std::get<unscheduled_fact>(after_fire.fact), (unscheduled_fact{item("t2"), true}));
    auto all = since(s, version_vector{}).value();
    std::vector<std::string> facts;
    for (const auto& j : all.journal[index_of(lane::system)]) {
        facts.push_back(boost::json::serialize(to_json(j).at("fact")) + ":" + j.item_id().str());
    }
    EXPECT_EQ(facts, (std::vector<std::string>{R"("scheduled":t1)", R"("enqueued":t2)"}))
        << "t2 fired: its scheduled and fired facts coalesce away, its item stays";
    // Canceled: never fires, reports canceled (again too), and its id is spent.
    auto canceled = plan_cancel(s, lane::system, item("t1"), unix_ms{20}).value();
    EXPECT_TRUE(canceled.canceled);
    apply_actions(canceled.actions, s);
    EXPECT_TRUE(s.timers.empty());
    EXPECT_TRUE(plan_fire_timer(s, item("t1"), unix_ms{600}).empty());
    EXPECT_TRUE(plan_cancel(s, lane::system, item("t1"), unix_ms{21}).value().canceled);
    EXPECT_TRUE(plan_cancel(s, lane::system, item("t1"), unix_ms{21}).value().actions.empty());
    EXPECT_TRUE(plan_schedule_timer(s, make_timer("t1", 900), unix_ms{22}).empty());
    // Fired already: not canceled; an unknown id: item_not_found.
    EXPECT_FALSE(plan_cancel(s, lane::system, item("t2"), unix_ms{23}).value().canceled);
    EXPECT_EQ(plan_cancel(s, lane::system, item("t9"), unix_ms{23}).error(),
              make_error_code(errc::item_not_found));
    EXPECT_TRUE(since(s, version_vector{}).value().journal[index_of(lane::system)].size() == 1u)
        << "from scratch, only t2's item: nothing is scheduled";
}

}  // namespace wuhu::testing

namespace wuhu::testing {

TEST(LoopPosition, NeedsInferenceWhenTheNewestInputHasNoResponse) {
    session_state s;
    EXPECT_FALSE(needs_inference(s));
    s = enqueued(s, user_in(lane::follow_up, "f", "hi"), 1);
    EXPECT_FALSE(needs_inference(s));                         // queued, not materialized
    EXPECT_EQ(current_checkpoint(s), checkpoint::follow_up);  // the turn boundary
    apply_actions(plan_drain(s, checkpoint::follow_up, unix_ms{1}), s);
    EXPECT_TRUE(needs_inference(s));
    // Drained input awaits its inference: only system + steer may still join it.
    EXPECT_EQ(current_checkpoint(s), checkpoint::steer);
    apply_actions(plan_append_assistant(s, reply("", {{"c1", "echo"}}), unix_ms{2}).value(), s);
    EXPECT_FALSE(needs_inference(s));
    EXPECT_TRUE(has_unfinished_tool_calls(s));
    apply_actions(plan_tool_will_execute(s, call_id("c1"), unix_ms{3}).value(), s);
    EXPECT_FALSE(needs_inference(s));  // tool_started is transparent; the assistant is newest
    apply_actions(plan_tool_did_execute(s, result_of("c1", "x"), unix_ms{3}).value(), s);
    EXPECT_FALSE(has_unfinished_tool_calls(s));
    EXPECT_TRUE(needs_inference(s));  // results await the next inference
    EXPECT_EQ(current_checkpoint(s), checkpoint::steer);
    EXPECT_EQ(assistant_count(s), 1u);
}

TEST(LoopPosition, AnAbortEndsTheTurnButALostOwnerDoesNot) {
    session_state s = enqueued({}, user_in(lane::follow_up, "f", "hi"), 1);
    apply_actions(plan_drain(s, checkpoint::follow_up, unix_ms{1}), s);
    session_state lost = s;
    apply_actions(plan_append_marker(
                      lost, interruption{"owner died", interruption_kind::owner_lost}, unix_ms{2}),
                  lost);
    EXPECT_TRUE(needs_inference(lost));
    apply_actions(
        plan_append_marker(s, interruption{"user", interruption_kind::aborted}, unix_ms{2}), s);
    EXPECT_FALSE(needs_inference(s));
    EXPECT_EQ(current_checkpoint(s), checkpoint::follow_up);
    apply_actions(plan_append_marker(s, diagnostic{"input_too_large", "x"}, unix_ms{3}), s);
    EXPECT_FALSE(needs_inference(s));
}

}  // namespace wuhu::testing

namespace wuhu::testing {

TEST(CompactionTrigger, IsDueAfterAResponseOverTheThresholdUntilACompactionFollows) {
    session_state s;
    s.config.context_limit = 1000;
    s.config.compaction_buffer = 100;
    EXPECT_EQ(compaction_due(s), entry_seq{});
    auto big = reply("x");
    big.usage = {950, 0, 0};
    apply_actions(plan_append_assistant(s, big, unix_ms{1}).value(), s);
    EXPECT_EQ(compaction_due(s), entry_seq{1});
    apply_actions(plan_append_marker(s, interruption{"x"}, unix_ms{2}), s);
    EXPECT_EQ(compaction_due(s), entry_seq{1});  // still due after later entries
    apply_actions(plan_append_compaction(s, {"S", entry_seq{1}, 0}, unix_ms{3}).value(), s);
    EXPECT_EQ(compaction_due(s), entry_seq{});
    apply_actions(plan_append_assistant(s, reply("small"), unix_ms{4}).value(), s);
    EXPECT_EQ(compaction_due(s), entry_seq{});
}

}  // namespace wuhu::testing

namespace wuhu::testing {

TEST(ProviderOutput, IsSanitizedBeforeItIsRecorded) {
    session_state s;
    auto m = reply(std::string("bad\0text", 8), {{"c1", "echo"}});
    apply_actions(plan_append_assistant(s, m, unix_ms{1}).value(), s);
    EXPECT_EQ(std::get<assistant_message>(s.transcript[0].body).text, "bad\xEF\xBF\xBDtext");
    apply_actions(plan_tool_did_execute(s, result_of("c1", std::string("\xFF", 1), true), unix_ms{2})
                      .value(),
                  s);
    EXPECT_EQ(std::get<tool_result>(s.transcript[1].body).output, "\xEF\xBF\xBD");
}

}  // namespace wuhu::testing

// ---- fused operations: each equals its steps applied one after the other

namespace wuhu::testing {

namespace {

session_state applied_to(session_state s, const action_list& actions) {
    apply_actions(actions, s);
    return s;
}

// A session that answered one turn: idle, nothing pending, has_work clear.
session_state answered() {
    session_state s = enqueued({}, user_in(lane::follow_up, "f0", "hello"), 1);
    s = drained(s, checkpoint::follow_up, 2);
    apply_actions(plan_append_assistant(s, reply("hi"), unix_ms{3}).value(), s);
    apply_actions(plan_mark_idle(s), s);
    return s;
}

}  // namespace

TEST(FusedCommits, AnEnqueueIntoAnIdleSessionIsMaterializedAsItsCheckpointWould) {
    for (auto in : {user_in(lane::follow_up, "f1", "next"), user_in(lane::steer, "s1", "steer"),
                    system_in("y1", "callback")}) {
        const session_state s = answered();
        auto fused = plan_enqueue_and_drain(s, in, unix_ms{10});
        ASSERT_TRUE(fused.has_value());
        auto one = plan_enqueue(s, in, unix_ms{10}).value();
        session_state stepwise = applied_to(s, one.actions);
        stepwise = drained(stepwise, current_checkpoint(s), 10);
        EXPECT_EQ(applied_to(s, fused->actions), stepwise) << in.id.str();
        EXPECT_EQ(fused->id, one.id);
        EXPECT_EQ(applied_to(s, fused->actions).find_item(in.id.str())->status,
                  item_status::materialized);
    }
}

TEST(FusedCommits, AnEnqueueIsNotMaterializedWhereTheCheckpointWouldNotTakeIt) {
    // Something pending already, or paused: the plain enqueue.
    session_state pending = enqueued(answered(), user_in(lane::follow_up, "f1", "a"), 5);
    auto out = plan_enqueue_and_drain(pending, user_in(lane::follow_up, "f2", "b"), unix_ms{6});
    EXPECT_EQ(out->actions, plan_enqueue(pending, user_in(lane::follow_up, "f2", "b"),
                                         unix_ms{6})->actions);
    session_state paused = applied_to(answered(), plan_set_paused(answered(), true));
    out = plan_enqueue_and_drain(paused, user_in(lane::follow_up, "f2", "b"), unix_ms{6});
    EXPECT_EQ(applied_to(paused, out->actions).find_item("f2")->status, item_status::pending);
    // Input awaiting a response (a crash between drain and inference): the steer checkpoint
    // applies, and it does not take a follow-up.
    session_state awaiting = drained(enqueued({}, user_in(lane::follow_up, "f0", "x"), 1),
                                     checkpoint::follow_up, 2);
    out = plan_enqueue_and_drain(awaiting, user_in(lane::follow_up, "f1", "y"), unix_ms{3});
    EXPECT_EQ(applied_to(awaiting, out->actions).find_item("f1")->status, item_status::pending);
    out = plan_enqueue_and_drain(awaiting, user_in(lane::steer, "s1", "z"), unix_ms{3});
    EXPECT_EQ(applied_to(awaiting, out->actions).find_item("s1")->status,
              item_status::materialized);
    // A duplicate changes nothing.
    out = plan_enqueue_and_drain(answered(), user_in(lane::follow_up, "f0", "again"), unix_ms{4});
    EXPECT_TRUE(out->duplicate);
    EXPECT_TRUE(out->actions.empty());
}

TEST(FusedCommits, AResponseAndTheStartOfItsCallsAreOneOperation) {
    const session_state s = drained(enqueued({}, user_in(lane::follow_up, "f", "x"), 1),
                                    checkpoint::follow_up, 2);
    const auto m = reply("calling", {{"c1", "echo"}, {"c2", "mystery"}, {"c3", "clock"}});
    auto fused = plan_response(s, m, {call_id("c1"), call_id("c3")}, true, unix_ms{5});
    ASSERT_TRUE(fused.has_value());
    session_state stepwise = applied_to(s, plan_append_assistant(s, m, unix_ms{5}).value());
    stepwise = applied_to(stepwise, plan_tool_will_execute(stepwise, call_id("c1"), unix_ms{5}).value());
    stepwise = applied_to(stepwise, plan_tool_will_execute(stepwise, call_id("c3"), unix_ms{5}).value());
    EXPECT_EQ(applied_to(s, *fused), stepwise);
    EXPECT_TRUE(stepwise.has_work) << "a response with calls never settles";
    EXPECT_EQ(plan_response(s, m, {call_id("zz")}, false, unix_ms{5}).error(),
              make_error_code(errc::unknown_tool_call));
    // Paused, or with a compaction due, the calls do not run next: no markers (the loop
    // starts each call when it runs it).
    session_state paused = applied_to(s, plan_set_paused(s, true));
    EXPECT_EQ(plan_response(paused, m, {call_id("c1")}, true, unix_ms{5})->size(), 1u);
    session_state small = s;
    small.config.context_limit = 1000;
    small.config.compaction_buffer = 100;
    auto big = m;
    big.usage.input = 950;
    EXPECT_EQ(plan_response(small, big, {call_id("c1")}, true, unix_ms{5})->size(), 1u);
    EXPECT_EQ(plan_response(s, m, {call_id("c1"), call_id("c1")}, false, unix_ms{5}).error(),
              make_error_code(errc::invalid_entry));
}

TEST(FusedCommits, AFinalAnswerClearsHasWorkAsTheMarkIdleAfterItWould) {
    const session_state s = drained(enqueued({}, user_in(lane::follow_up, "f", "x"), 1),
                                    checkpoint::follow_up, 2);
    auto fused = plan_response(s, reply("done"), {}, true, unix_ms{5});
    session_state stepwise = applied_to(s, plan_append_assistant(s, reply("done"), unix_ms{5}).value());
    stepwise = applied_to(stepwise, plan_mark_idle(stepwise));
    EXPECT_EQ(applied_to(s, fused.value()), stepwise);
    EXPECT_FALSE(stepwise.has_work);
    // Not while input is pending (the loop drains it next), paused, or when the answer calls
    // for a compaction (the loop compacts next).
    session_state pending = enqueued(s, user_in(lane::follow_up, "f2", "y"), 3);
    EXPECT_TRUE(applied_to(pending, plan_response(pending, reply("done"), {}, true, unix_ms{5})
                                        .value())
                    .has_work);
    session_state paused = applied_to(s, plan_set_paused(s, true));
    EXPECT_TRUE(
        applied_to(paused, plan_response(paused, reply("done"), {}, true, unix_ms{5}).value())
            .has_work);
    session_state small = s;
    small.config.context_limit = 1000;
    small.config.compaction_buffer = 100;
    auto big = reply("done");
    big.usage.input = 950;
    EXPECT_TRUE(applied_to(small, plan_response(small, big, {}, true, unix_ms{5}).value())
                    .has_work);
    // Without settle, the answer alone.
    EXPECT_TRUE(applied_to(s, plan_response(s, reply("done"), {}, false, unix_ms{5}).value())
                    .has_work);
}

TEST(FusedCommits, ToolResultsThatFinishTogetherAndTheDrainAfterThemAreOneOperation) {
    session_state s = drained(enqueued({}, user_in(lane::follow_up, "f", "x"), 1),
                              checkpoint::follow_up, 2);
    s = applied_to(s, plan_response(s, reply("", {{"c1", "echo"}, {"c2", "charge"}, {"c3", "x"}}),
                                    {call_id("c1"), call_id("c2")}, true, unix_ms{3})
                          .value());
    s = enqueued(s, user_in(lane::steer, "s1", "careful"), 4);
    s = enqueued(s, user_in(lane::follow_up, "f2", "later"), 4);
    const std::vector<entry_body> steps{result_of("c1", "e1"), result_of("c2", "ok"),
                                        result_of("c3", "unknown tool", true)};
    auto fused = plan_tool_steps(s, steps, true, unix_ms{5});
    ASSERT_TRUE(fused.has_value());
    session_state stepwise = s;
    for (const auto& r : steps) {
        stepwise = applied_to(
            stepwise,
            plan_tool_did_execute(stepwise, std::get<tool_result>(r), unix_ms{5}).value());
    }
    stepwise = drained(stepwise, current_checkpoint(stepwise), 5);
    EXPECT_EQ(applied_to(s, *fused), stepwise);
    EXPECT_EQ(stepwise.find_item("s1")->status, item_status::materialized);
    EXPECT_EQ(stepwise.find_item("f2")->status, item_status::pending)
        << "the steer checkpoint after a result leaves follow-ups";
    // Each step is checked on the state the ones before it leave.
    EXPECT_EQ(plan_tool_steps(s, {result_of("c1", "a"), result_of("c1", "b")}, false, unix_ms{5})
                  .error(),
              make_error_code(errc::tool_call_finished));
    EXPECT_EQ(plan_tool_steps(s, {result_of("c3", "ran?")}, false, unix_ms{5}).error(),
              make_error_code(errc::tool_call_not_started));
    EXPECT_EQ(plan_tool_steps(s, {reply("no")}, false, unix_ms{5}).error(),
              make_error_code(errc::invalid_entry));
    // A start and its result in one operation (a call started late, then finished at once);
    // a start of a started call records nothing.
    auto started = plan_tool_steps(
        s, {tool_started{call_id("c3"), ""}, result_of("c3", "x"), tool_started{call_id("c1"), ""}},
        false, unix_ms{5});
    ASSERT_TRUE(started.has_value());
    EXPECT_EQ(started->size(), 2u);
    EXPECT_EQ(std::get<tool_started>(std::get<entry_appended>(started->front()).e.body).tool, "x");
}

TEST(FusedCommits, AnAbortsResultsAndInterruptionEndTheTurnAndTheFollowUpCheckpointFollows) {
    session_state s = drained(enqueued({}, user_in(lane::follow_up, "f", "x"), 1),
                              checkpoint::follow_up, 2);
    s = applied_to(s, plan_response(s, reply("", {{"c1", "echo"}, {"c2", "echo"}}),
                                    {call_id("c1"), call_id("c2")}, true, unix_ms{3})
                          .value());
    s = enqueued(s, user_in(lane::follow_up, "f2", "next"), 4);
    const std::vector<entry_body> steps{result_of("c1", "aborted: stop", true),
                                        result_of("c2", "not run", true),
                                        interruption{"stop", interruption_kind::aborted}};
    session_state stepwise = s;
    for (const auto& b : steps) {
        if (const auto* r = std::get_if<tool_result>(&b)) {
            stepwise = applied_to(stepwise, plan_tool_did_execute(stepwise, *r, unix_ms{5}).value());
        } else {
            stepwise = applied_to(stepwise,
                                  plan_append_marker(stepwise, std::get<interruption>(b), unix_ms{5}));
        }
    }
    EXPECT_EQ(current_checkpoint(stepwise), checkpoint::follow_up);
    stepwise = drained(stepwise, checkpoint::follow_up, 5);
    EXPECT_EQ(applied_to(s, plan_tool_steps(s, steps, true, unix_ms{5}).value()), stepwise);
    EXPECT_EQ(stepwise.find_item("f2")->status, item_status::materialized);
    // Paused: no drain.
    session_state paused = applied_to(s, plan_set_paused(s, true));
    EXPECT_EQ(applied_to(paused, plan_tool_steps(paused, steps, true, unix_ms{5}).value())
                  .find_item("f2")
                  ->status,
              item_status::pending);
}

}  // namespace wuhu::testing
