#include "session/text.hpp"

#include <gtest/gtest.h>

namespace wuhu::session {

TEST(Utf8, AcceptsWellFormedText) {
    for (std::string_view ok : {"", "plain", "résumé", "日本語", "🙂", "\x7F"}) {
        EXPECT_TRUE(is_valid_utf8(ok)) << ok;
    }
}

TEST(Utf8, RejectsMalformedSequences) {
    for (std::string_view bad : {
             std::string_view("\xC3", 1),              // truncated
             std::string_view("\xC0\xAF", 2),          // overlong '/'
             std::string_view("\xE0\x80\xAF", 3),      // overlong
             std::string_view("\xED\xA0\x80", 3),      // UTF-16 surrogate
             std::string_view("\xF4\x90\x80\x80", 4),  // above U+10FFFF
             std::string_view("\x80", 1),              // stray continuation
             std::string_view("\xFF", 1),
             std::string_view("ok\xE6\x97", 5),
         }) {
        EXPECT_FALSE(is_valid_utf8(bad));
    }
}

// ASCII is checked eight bytes at a time: a bad or good sequence at every offset of a long ASCII
// run, across the eight-byte boundaries, is judged as a lone one is.
TEST(Utf8, JudgesASequenceAtAnyOffsetOfLongAsciiText) {
    for (std::size_t at = 0; at <= 24; ++at) {
        for (std::size_t after : {0, 1, 7, 8, 9, 17}) {
            const std::string before(at, 'a');
            const std::string tail(after, 'z');
            EXPECT_TRUE(is_valid_utf8(before + "\xE6\x97\xA5" + tail)) << at << " " << after;
            EXPECT_TRUE(is_valid_utf8(before + "\xF0\x9F\x99\x82" + tail)) << at << " " << after;
            EXPECT_FALSE(is_valid_utf8(before + "\xFF" + tail)) << at << " " << after;
            EXPECT_FALSE(is_valid_utf8(before + "\xC0\xAF" + tail)) << at << " " << after;
            EXPECT_FALSE(is_valid_utf8(before + "\xED\xA0\x80" + tail)) << at << " " << after;
            EXPECT_FALSE(is_valid_utf8(before + "\xE6\x97")) << at;  // cut at the end
        }
    }
}

TEST(Content, LimitsSizeUtf8AndNul) {
    EXPECT_TRUE(check_content("hi", 2).has_value());
    EXPECT_EQ(check_content("hi!", 2).error(), make_error_code(errc::content_too_large));
    EXPECT_EQ(check_content(std::string_view("\xFF", 1), 10).error(),
              make_error_code(errc::invalid_utf8));
    EXPECT_EQ(check_content(std::string_view("a\0b", 3), 10).error(),
              make_error_code(errc::invalid_content));
}

TEST(Tokens, EstimateIsBytesOverFourRoundedUp) {
    EXPECT_EQ(estimate_tokens(""), 0u);
    EXPECT_EQ(estimate_tokens("abc"), 1u);
    EXPECT_EQ(estimate_tokens("abcd"), 1u);
    EXPECT_EQ(estimate_tokens("abcde"), 2u);
}

}  // namespace wuhu::session

namespace wuhu::session {

TEST(Sanitize, ReplacesNulAndInvalidUtf8AndKeepsValidText) {
    EXPECT_EQ(sanitized("résumé 🙂"), "résumé 🙂");
    EXPECT_EQ(sanitized(std::string_view("a\0b", 3)), "a\xEF\xBF\xBD" "b");
    EXPECT_EQ(sanitized(std::string_view("x\xFFy", 3)), "x\xEF\xBF\xBDy");
    EXPECT_EQ(sanitized(std::string_view("\xE6\x97", 2)), "\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_TRUE(is_valid_utf8(sanitized(std::string_view("\xC0\xAF\xED\xA0\x80", 5))));
}

}  // namespace wuhu::session

namespace wuhu::session {

// Bounds (DESIGN.md "Bounds"): an answer or a tool output past the entry limit is stored cut,
// with a note, the whole within the limit, never inside a UTF-8 character.
TEST(CutTo, TextPastTheLimitIsCutWithANoteAndTheWholeFits) {
    EXPECT_EQ(cut_to("short", 300, "answer"), "short");
    EXPECT_EQ(cut_to(std::string(5000, 'x'), 0, "answer").size(), 5000u) << "0: no limit";
    const std::string long_text(1000, 'x');
    const auto cut = cut_to(long_text, 300, "tool output");
    EXPECT_EQ(cut.size(), 300u);
    EXPECT_TRUE(cut.ends_with(cut_note(300, "tool output")));
    EXPECT_TRUE(cut.ends_with("[cut by the runtime: this tool output passed the limit of 300 bytes]"));
    std::string accents;
    for (int i = 0; i < 400; ++i) {
        accents += "\xC3\xA9";  // é, two bytes each
    }
    const auto utf8 = cut_to(accents, 301, "answer");
    EXPECT_LE(utf8.size(), 301u);
    EXPECT_TRUE(is_valid_utf8(utf8)) << "never cut inside a character";
    const auto stopped = cut_to("partial", 300, "answer", true);
    EXPECT_EQ(stopped, "partial" + cut_note(300, "answer"))
        << "an answer stopped at the limit says so even when its text fits";
}

}  // namespace wuhu::session
