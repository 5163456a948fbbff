// The server-sent events parser (providers/sse.hpp): the standard's rules, and the same events
// whatever pieces the bytes arrive in.
#include "providers/sse.hpp"

#include <gtest/gtest.h>

#include <random>

namespace wuhu::testing {

using providers::sse_event;
using providers::sse_parser;

namespace {

std::vector<sse_event> parse(std::string_view stream) {
    sse_parser p;
    std::vector<sse_event> out;
    EXPECT_TRUE(p.feed(stream, [&](const sse_event& e) { out.push_back(e); })) << p.error();
    return out;
}

sse_event ev(std::string event, std::string data, std::string id = "") {
    return sse_event{std::move(event), std::move(data), std::move(id)};
}

}  // namespace

TEST(Sse, EventsEndAtABlankLineAndDataLinesJoinWithLf) {
    EXPECT_EQ(parse("data: one\n\ndata: two\ndata: lines\n\n"),
              (std::vector{ev("message", "one"), ev("message", "two\nlines")}));
}

TEST(Sse, EventNamesAndIdsAreKeptAndTheNameResetsAfterEachEvent) {
    EXPECT_EQ(parse("event: message_start\nid: 7\ndata: {}\n\ndata: x\n\n"),
              (std::vector{ev("message_start", "{}", "7"), ev("message", "x", "7")}));
}

TEST(Sse, CommentsUnknownFieldsAndEventsWithoutDataDispatchNothing) {
    EXPECT_EQ(parse(": keep-alive\n\nretry: 100\nfoo: bar\n\nevent: ping\n\n"),
              std::vector<sse_event>{});
}

TEST(Sse, OnlyOneSpaceAfterTheColonIsDroppedAndALineWithoutColonIsAField) {
    EXPECT_EQ(parse("data:no space\n\ndata:  two spaces\n\ndata\n\n"),
              (std::vector{ev("message", "no space"), ev("message", " two spaces"),
                           ev("message", "")}));
}

TEST(Sse, CrLfCrAndLfAllEndLinesAndALeadingByteOrderMarkIsSkipped) {
    EXPECT_EQ(parse("\xEF\xBB\xBF" "data: a\r\n\r\ndata: b\r\rdata: c\n\n"),
              (std::vector{ev("message", "a"), ev("message", "b"), ev("message", "c")}));
}

TEST(Sse, AnEventCutOffByTheEndOfTheStreamIsPendingAndNotDispatched) {
    sse_parser p;
    int n = 0;
    ASSERT_TRUE(p.feed("data: whole\n\ndata: cut", [&](const sse_event&) { ++n; }));
    EXPECT_EQ(n, 1);
    EXPECT_TRUE(p.pending());
    ASSERT_TRUE(p.feed("\n\n", [&](const sse_event&) { ++n; }));
    EXPECT_EQ(n, 2);
    EXPECT_FALSE(p.pending());
}

TEST(Sse, AnEventPastTheLimitIsAnErrorAndTheParserStaysFailed) {
    sse_parser p(64);
    int n = 0;
    auto count = [&](const sse_event&) { ++n; };
    ASSERT_TRUE(p.feed("data: small\n\n", count));
    EXPECT_FALSE(p.feed("data: " + std::string(100, 'x'), count));
    EXPECT_NE(p.error().find("64 bytes"), std::string::npos) << p.error();
    EXPECT_FALSE(p.feed("\n\ndata: later\n\n", count));
    EXPECT_EQ(n, 1);
    // Many data lines add up too.
    sse_parser lines(64);
    std::string many;
    for (int i = 0; i < 20; ++i) {
        many += "data: 12345\n";
    }
    EXPECT_FALSE(lines.feed(many, count));
}

// The same events whatever pieces the stream is cut into: every split point, including
// between the CR and LF of a CRLF and inside the byte order mark.
TEST(Sse, TheSameEventsWhateverPiecesTheBytesArriveIn) {
    const std::string stream =
        "\xEF\xBB\xBF" ": hi\r\nevent: a\r\ndata: {\"x\":1}\r\n\r\ndata: two\rdata: three\r\r"
        "id: 9\ndata: last\n\n";
    const auto whole = parse(stream);
    ASSERT_EQ(whole.size(), 3u);
    std::mt19937 rng(7);
    for (int round = 0; round < 500; ++round) {
        sse_parser p;
        std::vector<sse_event> got;
        std::size_t at = 0;
        while (at < stream.size()) {
            const auto n = std::uniform_int_distribution<std::size_t>(0, 6)(rng);
            ASSERT_TRUE(p.feed(std::string_view(stream).substr(at, n),
                               [&](const sse_event& e) { got.push_back(e); }));
            at += n;
        }
        ASSERT_EQ(got, whole) << "round " << round;
    }
}

}  // namespace wuhu::testing
