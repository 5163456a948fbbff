#include "session/context.hpp"
#include "session/reducer.hpp"
#include "tests/support/builders.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace {

constexpr std::int64_t t0 = 1771340160000;  // 26/2/17 14:56 UTC

session_state conversation() {
    session_state s;
    s.config.system_prompt = "You are helpful.";
    s = enqueued(
        s, user_in(lane::follow_up, "f1", "list files", human("u1", "minsheng", "lambda@liu.ms")),
        t0);
    apply_actions(plan_drain(s, checkpoint::follow_up, unix_ms{t0}), s);
    apply_actions(plan_append_assistant(s, reply("sure", {{"c1", "echo"}}), unix_ms{t0}).value(),
                  s);
    apply_actions(plan_tool_will_execute(s, call_id("c1"), unix_ms{t0}).value(), s);
    apply_actions(plan_tool_did_execute(s, result_of("c1", "a.txt"), unix_ms{t0}).value(), s);
    s = enqueued(s, system_in("s1", "async task xxx has finished"), t0 + 60'000);
    apply_actions(plan_drain(s, checkpoint::steer, unix_ms{t0 + 60'000}), s);
    return s;
}

}  // namespace

TEST(ContextProjection, WithoutCompactionIsTheSystemPromptThenMessageEntries) {
    auto ctx = project_context(conversation(), anthropic_roles);
    ASSERT_EQ(ctx.size(),
              5u);  // prompt, party, assistant, tool result, system (tool_started dropped)
    EXPECT_EQ(ctx[0].role, llm_role::system);
    EXPECT_EQ(ctx[0].content, "You are helpful.");
    EXPECT_EQ(ctx[1].role, llm_role::user);
    EXPECT_EQ(ctx[1].content, "minsheng <lambda@liu.ms> 26/2/17 14:56\n\nlist files");
    EXPECT_EQ(ctx[2].role, llm_role::assistant);
    ASSERT_EQ(ctx[2].tool_calls.size(), 1u);
    EXPECT_EQ(ctx[3].role, llm_role::tool);
    EXPECT_EQ(ctx[3].tool_call_id, "c1");
    EXPECT_EQ(ctx[3].content, "a.txt");
    EXPECT_EQ(ctx[4].content, "system-reminder 26/2/17 14:57\n\nasync task xxx has finished");
}

// Issue 31, defect 15: a steer sent at 14:50 during a long tool joins the transcript when the
// tool ends (14:56). Its header reads when it was sent (docs/decisions.md); the entry's time
// stays when it joined. An entry stored before the send time was recorded shows its own.
TEST(ContextProjection, APartyMessageHeaderShowsWhenItWasSentNotWhenItJoined) {
    session_state s;
    s = enqueued(s, user_in(lane::steer, "s1", "use staging", human("u1", "ann", "ann@x.io")),
                 t0 - 6 * 60'000);
    apply_actions(plan_drain(s, checkpoint::steer, unix_ms{t0}), s);
    ASSERT_EQ(s.transcript.back().at, unix_ms{t0}) << "it joined at 14:56";
    EXPECT_EQ(project_context(s, openai_roles).back().content,
              "ann <ann@x.io> 26/2/17 14:50\n\nuse staging");
    std::get<party_message>(s.transcript.back().body).sent_at = unix_ms{0};
    EXPECT_EQ(project_context(s, openai_roles).back().content,
              "ann <ann@x.io> 26/2/17 14:56\n\nuse staging");
}

TEST(ContextProjection, SystemLaneMapsToDeveloperForOpenAiAndUserForAnthropic) {
    auto openai = project_context(conversation(), openai_roles);
    auto anthropic = project_context(conversation(), anthropic_roles);
    EXPECT_EQ(openai.back().role, llm_role::developer);
    EXPECT_EQ(anthropic.back().role, llm_role::user);
    EXPECT_EQ(openai[1].role, llm_role::user);
    for (const auto& m : openai) {
        if (m.source.value != 0) {
            EXPECT_NE(m.role, llm_role::system) << "system role is only for the prompt";
        }
    }
}

TEST(ContextProjection, UnknownAuthorsGetAnUnknownHeader) {
    session_state s = enqueued({}, user_in(lane::follow_up, "f", "hi"), t0);
    apply_actions(plan_drain(s, checkpoint::follow_up, unix_ms{t0}), s);
    EXPECT_EQ(project_context(s, anthropic_roles)[0].content, "unknown 26/2/17 14:56\n\nhi");
}

TEST(ContextProjection, NonMessageEntriesAreNotInTheContext) {
    session_state s;
    apply_actions(plan_append_marker(s, interruption{"aborted"}, unix_ms{1}), s);
    apply_actions(plan_append_marker(s, diagnostic{"x", "y"}, unix_ms{1}), s);
    EXPECT_TRUE(project_context(s, anthropic_roles).empty());
}

TEST(ContextProjection, CompactionSummariesStackThenEntriesFromFirstKept) {
    session_state s;
    auto say = [&](const std::string& id) {
        s = enqueued(s, user_in(lane::follow_up, id, "msg " + id), t0);
        apply_actions(plan_drain(s, checkpoint::follow_up, unix_ms{t0}), s);
        apply_actions(plan_append_assistant(s, reply("re " + id), unix_ms{t0}).value(), s);
    };
    say("a");  // entries 1, 2
    say("b");  // 3, 4
    apply_actions(plan_append_compaction(s, {"S1", entry_seq{3}, 0}, unix_ms{t0}).value(), s);  // 5
    say("c");  // 6, 7
    apply_actions(plan_append_compaction(s, {"S2", entry_seq{6}, 0}, unix_ms{t0}).value(), s);  // 8
    say("d");  // 9, 10
    apply_actions(plan_append_compaction(s, {"S3", entry_seq{7}, 0}, unix_ms{t0}).value(),
                  s);  // 11
    auto ctx = project_context(s, anthropic_roles);
    std::vector<std::string> got;
    for (const auto& m : ctx) {
        got.push_back(m.content.substr(m.content.rfind('\n') + 1));
    }
    EXPECT_EQ(got, (std::vector<std::string>{"S1", "S2", "S3", "re c", "msg d", "re d"}));
    EXPECT_EQ(ctx[0].content, std::string(summary_preamble) + "S1");
    EXPECT_EQ(ctx[3].source, entry_seq{7});
    // The transcript itself is never modified by compaction.
    EXPECT_EQ(s.transcript.size(), 11u);
}

}  // namespace wuhu::testing
