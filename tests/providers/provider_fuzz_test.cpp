// Random and truncated streams fed to both providers' decoders, through the SSE parser: no
// crash, no sanitizer report, and every failure is a classified error (issue 14).
#include "providers/anthropic.hpp"
#include "providers/openai.hpp"
#include "tests/providers/provider_streams.hpp"

#include <gtest/gtest.h>

#include <random>

namespace wuhu::testing {

namespace {

// A saved stream damaged at random: bytes flipped, inserted or dropped, then cut somewhere.
std::string damaged(const std::string& s, std::mt19937& rng) {
    std::string out = s;
    std::uniform_int_distribution<int> byte(0, 255);
    const int edits = std::uniform_int_distribution<int>(0, 8)(rng);
    for (int i = 0; i < edits && !out.empty(); ++i) {
        const auto at = std::uniform_int_distribution<std::size_t>(0, out.size() - 1)(rng);
        switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
            case 0:
                out[at] = static_cast<char>(byte(rng));
                break;
            case 1:
                out.insert(at, 1, static_cast<char>(byte(rng)));
                break;
            case 2:
                out.erase(at, 1);
                break;
            default:  // a structural character where it hurts
                out[at] = "{}[]\":,\n\r\\"[std::uniform_int_distribution<int>(0, 10)(rng)];
                break;
        }
    }
    if (std::uniform_int_distribution<int>(0, 1)(rng) == 1 && !out.empty()) {
        out.resize(std::uniform_int_distribution<std::size_t>(0, out.size())(rng));
    }
    return out;
}

std::string noise(std::mt19937& rng) {
    std::string out(std::uniform_int_distribution<std::size_t>(0, 400)(rng), '\0');
    for (auto& c : out) {
        c = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    }
    // Some of it shaped like events, so that the decoders see JSON-ish data too.
    return std::uniform_int_distribution<int>(0, 1)(rng) == 1 ? "data: " + out + "\n\n" : out;
}

// Feeds `stream` in random pieces; checks the outcome is one of: a message (done, no error),
// a classified error, or not done (the provider reports "ended before its end marker").
template <class Decoder>
void check(const std::string& stream, std::mt19937& rng) {
    recording_sink sink;
    Decoder d(sink, "m", "KEY");
    providers::sse_parser p(1 << 16);
    std::size_t at = 0;
    bool parse_ok = true;
    while (at < stream.size() && parse_ok && !d.done()) {
        const auto n = std::uniform_int_distribution<std::size_t>(1, 64)(rng);
        parse_ok = p.feed(std::string_view(stream).substr(at, n),
                          [&](const providers::sse_event& e) { d.on_event(e); });
        at += n;
    }
    if (const auto& e = d.error()) {
        EXPECT_FALSE(e->message.empty());
        EXPECT_TRUE(e->kind == providers::provider_error_kind::transient ||
                    e->kind == providers::provider_error_kind::fatal ||
                    e->kind == providers::provider_error_kind::context_overflow);
        EXPECT_EQ(e->message.find("KEY"), std::string::npos);
    } else if (d.done()) {
        const auto m = d.message();  // a whole message: its calls have ids
        for (const auto& c : m.tool_calls) {
            EXPECT_FALSE(c.id.str().empty());
        }
    }
}

}  // namespace

TEST(ProviderFuzz, DamagedAndRandomStreamsNeverCrashAndEveryFailureIsClassified) {
    std::mt19937 rng(20261124);
    const std::vector<std::string> openai = {saved_stream("openai_text.sse"),
                                             saved_stream("openai_tools.sse")};
    const std::vector<std::string> anthropic = {saved_stream("anthropic_text.sse"),
                                                saved_stream("anthropic_tools.sse"),
                                                saved_stream("anthropic_overloaded.sse")};
    for (int i = 0; i < 1500; ++i) {
        check<providers::openai_stream>(damaged(openai[i % openai.size()], rng), rng);
        check<providers::anthropic_stream>(damaged(anthropic[i % anthropic.size()], rng), rng);
        check<providers::openai_stream>(noise(rng), rng);
        check<providers::anthropic_stream>(noise(rng), rng);
    }
}

}  // namespace wuhu::testing
