#include "session/compaction.hpp"
#include "session/reducer.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>

#include <set>

namespace wuhu::testing {

TEST(CompactionTrigger, FiresWhenUsagePlusBufferExceedsTheContextLimit) {
    settings c;
    c.context_limit = 1000;
    c.compaction_buffer = 100;
    EXPECT_FALSE(should_compact({500, 200, 200}, c));  // 900 + 100 == 1000: not above
    EXPECT_TRUE(should_compact({500, 200, 201}, c));
    EXPECT_TRUE(should_compact({0, 901, 0}, c));  // cached input counts
}

namespace {

// Each message is 40 bytes of content -> ~10 tokens plus header and overhead.
session_state long_session(int turns, bool with_tools) {
    session_state s;
    s.config.keep_recent_tokens = 60;
    for (int i = 0; i < turns; ++i) {
        auto id = std::to_string(i);
        s = enqueued(s, user_in(lane::follow_up, "f" + id, std::string(40, 'u')), i);
        apply_actions(plan_drain(s, checkpoint::follow_up, unix_ms{i}), s);
        if (with_tools) {
            apply_actions(plan_append_assistant(
                              s, reply(std::string(40, 'a'), {{"c" + id, "echo"}}), unix_ms{i})
                              .value(),
                          s);
            apply_actions(plan_tool_will_execute(s, call_id("c" + id), unix_ms{i}).value(), s);
            apply_actions(
                plan_tool_did_execute(s, result_of("c" + id, std::string(40, 't')), unix_ms{i})
                    .value(),
                s);
        } else {
            apply_actions(plan_append_assistant(s, reply(std::string(40, 'a')), unix_ms{i}).value(),
                          s);
        }
    }
    return s;
}

}  // namespace

TEST(CompactionCutPoint, KeepsAtLeastTheRecentBudgetAndSummarizesTheRest) {
    session_state s = long_session(10, false);
    auto plan = plan_compaction(s, anthropic_roles).value();
    EXPECT_EQ(plan.segment_begin, entry_seq{1});
    std::uint64_t kept = 0;
    for (std::uint64_t id = plan.first_kept.value; id <= s.transcript.size(); ++id) {
        kept += estimate_tokens(to_llm_message(s.transcript[id - 1], anthropic_roles, 0));
    }
    EXPECT_GE(kept, s.config.keep_recent_tokens);
    EXPECT_EQ(plan.segment.size(), plan.first_kept.value - 1);
    EXPECT_GT(plan.tokens_before, kept);
}

TEST(CompactionCutPoint, NeverLandsOnAToolResult) {
    int planned = 0;
    std::set<std::uint64_t> cuts;
    for (std::uint64_t budget = 1; budget < 200; budget += 3) {
        session_state s = long_session(8, true);
        s.config.keep_recent_tokens = budget;
        auto plan = plan_compaction(s, anthropic_roles);
        if (!plan) {
            continue;  // nothing old enough for this budget
        }
        ++planned;
        cuts.insert(plan->first_kept.value);
        const entry& cut = s.transcript[plan->first_kept.value - 1];
        EXPECT_FALSE(std::holds_alternative<tool_result>(cut.body)) << budget;
        EXPECT_TRUE(is_message(cut.body));
        // A result never ends up in the segment without its call: the segment ends before an
        // assistant or party message.
        for (const auto& m : plan->segment) {
            if (m.role == llm_role::tool) {
                bool call_in_segment = false;
                for (const auto& n : plan->segment) {
                    for (const auto& c : n.tool_calls) {
                        call_in_segment |= c.id.str() == m.tool_call_id;
                    }
                }
                EXPECT_TRUE(call_in_segment);
            }
        }
    }
    // The budgets above cut the session in many places (tool results among the candidates),
    // so the property was checked, not skipped.
    EXPECT_GE(planned, 30);
    EXPECT_GE(cuts.size(), 4u);
}

TEST(CompactionCutPoint, SegmentStartsAtThePreviousFirstKept) {
    session_state s = long_session(10, false);
    auto first = plan_compaction(s, anthropic_roles).value();
    apply_actions(
        plan_append_compaction(s, {"S1", first.first_kept, first.tokens_before}, unix_ms{1})
            .value(),
        s);
    for (int i = 10; i < 16; ++i) {
        s = enqueued(s, user_in(lane::follow_up, "g" + std::to_string(i), std::string(40, 'u')), i);
        apply_actions(plan_drain(s, checkpoint::follow_up, unix_ms{i}), s);
    }
    auto second = plan_compaction(s, anthropic_roles).value();
    EXPECT_EQ(second.segment_begin, first.first_kept);
    EXPECT_GT(second.first_kept, first.first_kept);
}

TEST(CompactionCutPoint, NothingToCompactWhenEverythingFitsTheBudget) {
    session_state s = long_session(2, false);
    s.config.keep_recent_tokens = 10'000;
    EXPECT_EQ(plan_compaction(s, anthropic_roles).error(),
              make_error_code(errc::nothing_to_compact));
    EXPECT_EQ(plan_compaction({}, anthropic_roles).error(),
              make_error_code(errc::nothing_to_compact));
}

TEST(CompactionFits, QueuedInputThatCannotFitEvenAfterCompactionIsAHardError) {
    session_state s;
    s.config.context_limit = 100;
    s.config.compaction_buffer = 10;
    s.config.keep_recent_tokens = 50;
    s = enqueued(s, user_in(lane::follow_up, "big", std::string(1000, 'x')), 1);
    apply_actions(plan_drain(s, checkpoint::follow_up, unix_ms{1}), s);
    EXPECT_EQ(check_fits(s, anthropic_roles).error(), make_error_code(errc::input_too_large));
    session_state small;
    small.config = s.config;
    small = enqueued(small, user_in(lane::follow_up, "ok", "short"), 1);
    apply_actions(plan_drain(small, checkpoint::follow_up, unix_ms{1}), small);
    EXPECT_TRUE(check_fits(small, anthropic_roles).has_value());
}

}  // namespace wuhu::testing

namespace wuhu::testing {

TEST(CompactionCutPoint, APlanBoundedByTheTriggeringResponseIgnoresLaterEntries) {
    session_state s = long_session(6, false);
    const entry_seq trigger = s.last_entry();
    auto before = plan_compaction(s, anthropic_roles, trigger).value();
    for (int i = 0; i < 5; ++i) {
        s = enqueued(s, user_in(lane::follow_up, "late" + std::to_string(i), std::string(80, 'z')),
                     100 + i);
        apply_actions(plan_drain(s, checkpoint::follow_up, unix_ms{100 + i}), s);
    }
    auto after = plan_compaction(s, anthropic_roles, trigger).value();
    EXPECT_EQ(after.first_kept, before.first_kept);
    EXPECT_EQ(after.segment, before.segment);
    EXPECT_EQ(after.tokens_before, before.tokens_before);
    EXPECT_NE(plan_compaction(s, anthropic_roles).value().first_kept, before.first_kept);
}

}  // namespace wuhu::testing
