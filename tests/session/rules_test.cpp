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
