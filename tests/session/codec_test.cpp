#include "session/codec.hpp"
#include "session/reducer.hpp"
#include "tests/support/builders.hpp"
#include "tests/support/random_ops.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace json = boost::json;

namespace {

json::value reparse(const json::value& v) {
    return json::parse(json::serialize(v));
}

session_state rich_history(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    session_state s;
    for (int i = 0; i < 300; ++i) {
        auto op = next_op(rng, s, unix_ms{1771340160000 + i});
        if (auto actions = run_pure(op, s)) {
            apply_actions(*actions, s);
        }
    }
    return s;
}

}  // namespace

TEST(Codec, EntriesJournalFactsAndPatchesRoundTrip) {
    for (std::uint64_t seed = 1; seed <= 10; ++seed) {
        session_state s = rich_history(seed);
        for (const auto& e : s.transcript) {
            ASSERT_EQ(entry_from_json(reparse(to_json(e))).value(), e);
        }
        for (lane l : all_lanes) {
            for (const auto& j : s.in(l).journal) {
                ASSERT_EQ(journal_entry_from_json(reparse(to_json(j))).value(), j);
            }
        }
        auto p = since(s, {}).value();
        EXPECT_EQ(patch_from_json(reparse(to_json(p))).value(), p);
        EXPECT_EQ(settings_from_json(reparse(to_json(s.config))).value(), s.config);
        EXPECT_EQ(version_from_json(reparse(to_json(s.version()))).value(), s.version());
    }
}

TEST(Codec, ActionsRoundTrip) {
    std::mt19937_64 rng(42);
    session_state s;
    int n = 0;
    for (int i = 0; i < 300; ++i) {
        auto op = next_op(rng, s, unix_ms{i});
        if (auto actions = run_pure(op, s)) {
            for (const auto& a : *actions) {
                ASSERT_EQ(action_from_json(reparse(to_json(a))).value(), a);
                ++n;
            }
            apply_actions(*actions, s);
        }
    }
    EXPECT_GT(n, 100);
}

TEST(Codec, WireShapesAreStable) {
    EXPECT_EQ(json::serialize(to_json(version_vector{1, 2, 3, 4})),
              R"({"transcript":1,"system":2,"steer":3,"followUp":4})");
    EXPECT_EQ(json::serialize(to_json(human("u1", "Ann", "a@x.io"))),
              R"({"kind":"human","id":"u1","name":"Ann","email":"a@x.io"})");
    entry e{entry_seq{3}, unix_ms{9}, tool_result{call_id("c1"), "echo", "hi", false}};
    EXPECT_EQ(
        json::serialize(to_json(e)),
        R"({"id":3,"at":9,"type":"tool_result","call":"c1","tool":"echo","output":"hi","is_error":false})");
    EXPECT_EQ(
        json::serialize(to_json(status{loop_state::executing_tools, false, true, 0, 0, {}})),
        R"({"state":"executing_tools","paused":false,"has_work":true,"usage":{"input":0,"cached_input":0,"output":0,"cost":0,"turns":0,"tool_calls":0}})");
    // A published status carries the stamp that orders it (epoch, seq), and reads back.
    const status stamped{loop_state::idle, true, false, 7, 12, {}};
    EXPECT_EQ(
        json::serialize(to_json(stamped)),
        R"({"state":"idle","paused":true,"has_work":false,"usage":{"input":0,"cached_input":0,"output":0,"cost":0,"turns":0,"tool_calls":0},"epoch":7,"seq":12})");
    EXPECT_EQ(status_from_json(to_json(stamped)).value(), stamped);
}

// Issue 31, defect 15: a party message records when it was sent (`sent_at`); an entry stored
// before has none, and reads back with 0 (the header then shows the entry's time).
TEST(Codec, APartyMessageCarriesWhenItWasSentAndOneStoredBeforeReadsBack) {
    entry e{entry_seq{1}, unix_ms{20},
            party_message{human("u1", "Ann", ""), lane::steer, item("s1"), "hi", unix_ms{10}}};
    const auto written = json::serialize(to_json(e));
    EXPECT_NE(written.find(R"("sent_at":10)"), std::string::npos) << written;
    EXPECT_EQ(entry_from_json(json::parse(written)).value(), e);
    auto before = json::parse(written).as_object();
    before.erase("sent_at");
    EXPECT_EQ(std::get<party_message>(entry_from_json(before).value().body).sent_at, unix_ms{0});
}

// Issue 14: Anthropic reports the tokens written to its prompt cache; an entry without them
// (every entry stored before) reads back as 0, and a 0 is not written.
TEST(Codec, UsageCarriesCacheWritesOnlyWhenThereAreSome) {
    entry e{entry_seq{1}, unix_ms{2}, assistant_message{"hi", {}, token_usage{10, 20, 3, 40}, "m"}};
    const auto written = json::serialize(to_json(e));
    EXPECT_NE(written.find(R"("usage":{"input":10,"cached_input":20,"output":3,"cache_write":40})"),
              std::string::npos)
        << written;
    EXPECT_EQ(entry_from_json(reparse(to_json(e))).value(), e);
    EXPECT_EQ(std::get<assistant_message>(e.body).usage.total(), 73u);
    std::get<assistant_message>(e.body).usage.cache_write = 0;
    EXPECT_EQ(json::serialize(to_json(e)).find("cache_write"), std::string::npos);
    EXPECT_EQ(entry_from_json(reparse(to_json(e))).value(), e);
}

// An abort's interruption says what it stopped and the request's id (older entries, and
// owner_lost ones, have neither).
TEST(Codec, AnAbortsInterruptionCarriesWhatItStoppedAndItsId) {
    entry e{entry_seq{3}, unix_ms{2},
            interruption{"user", interruption_kind::aborted, abort_stage::tool, "stop-1"}};
    const auto written = json::serialize(to_json(e));
    EXPECT_NE(written.find(R"("stopped":"tool","abort_id":"stop-1")"), std::string::npos)
        << written;
    EXPECT_EQ(entry_from_json(reparse(to_json(e))).value(), e);
    entry old{entry_seq{3}, unix_ms{2}, interruption{"gone", interruption_kind::owner_lost}};
    const auto plain = json::serialize(to_json(old));
    EXPECT_EQ(plain.find("stopped"), std::string::npos) << plain;
    EXPECT_EQ(plain.find("abort_id"), std::string::npos) << plain;
    EXPECT_EQ(entry_from_json(reparse(to_json(old))).value(), old);
    for (const char* bad :
         {R"({"id":1,"at":0,"type":"interruption","reason":"x","kind":"aborted","stopped":"nothing"})",
          R"({"id":1,"at":0,"type":"interruption","reason":"x","kind":"aborted","stopped":"lunch"})",
          R"({"id":1,"at":0,"type":"interruption","reason":"x","kind":"aborted","abort_id":""})"}) {
        auto r = entry_from_json(json::parse(bad));
        ASSERT_FALSE(r.has_value()) << bad;
        EXPECT_EQ(r.error().code, errc::invalid_entry) << bad;
    }
}

struct rejection {
    const char* json;
    errc code;
    const char* field;
};

TEST(Codec, RejectsMalformedEntriesWithAStableCodeAndField) {
    const rejection cases[] = {
        {R"({"id":"1","at":0,"type":"interruption","reason":"x","kind":"aborted"})",
         errc::invalid_type, "id"},
        {R"({"id":-1,"at":0,"type":"interruption","reason":"x","kind":"aborted"})",
         errc::invalid_type, "id"},
        {R"({"at":0,"type":"interruption","reason":"x","kind":"aborted"})", errc::missing_field,
         "id"},
        {R"({"id":1,"at":0,"type":"weird"})", errc::invalid_entry, "type"},
        {R"({"id":1,"at":0,"type":"interruption","reason":"x","kind":"aborted","extra":1})",
         errc::unknown_field, "extra"},
        {R"({"id":1,"at":0,"type":"party_message","author":{"kind":"alien"},"lane":"steer","item":"a","content":"x"})",
         errc::invalid_author, "author.kind"},
        {R"({"id":1,"at":0,"type":"party_message","author":{"kind":"unknown"},"lane":"sideways","item":"a","content":"x"})",
         errc::invalid_lane, "lane"},
        {R"({"id":1,"at":0,"type":"system_message","source":"a.b","item":"a","content":"x"})",
         errc::invalid_source, "source"},
        {R"({"id":1,"at":0,"type":"tool_result","call":"","tool":"t","output":"","is_error":false})",
         errc::invalid_tool_call_id, "call"},
        {R"({"id":1,"at":0,"type":"interruption","kind":"aborted","reason":"a\u0000b"})",
         errc::invalid_content, "reason"},
        {R"([1,2])", errc::invalid_type, ""},
    };
    for (const auto& c : cases) {
        auto r = entry_from_json(json::parse(c.json));
        ASSERT_FALSE(r.has_value()) << c.json;
        EXPECT_EQ(r.error().code, c.code) << c.json << " -> " << code_name(r.error().code);
        EXPECT_EQ(r.error().field, c.field) << c.json;
        EXPECT_FALSE(r.error().message().empty());
    }
}

TEST(Codec, RejectsBadVersions) {
    for (const char* bad :
         {R"({"transcript":-1,"system":0,"steer":0,"followUp":0})",
          R"({"transcript":1.5,"system":0,"steer":0,"followUp":0})",
          R"({"transcript":0,"system":0,"steer":"2","followUp":0})", R"({"lanes":1})",
          R"([0,0,0,0])", R"({"steer":2})", R"({"transcript":0,"system":0,"steer":0})"}) {
        auto r = version_from_json(json::parse(bad));
        ASSERT_FALSE(r.has_value()) << bad;
        EXPECT_EQ(r.error().code, errc::invalid_version) << bad;
    }
    EXPECT_EQ(
        version_from_json(json::parse(R"({"transcript":0,"system":0,"steer":2,"followUp":0})"))
            .value(),
        (version_vector{0, 0, 2, 0}));
}

TEST(Codec, ParseJsonSeparatesInvalidUtf8FromInvalidJson) {
    EXPECT_EQ(parse_json("{\"a\":\"\xFF\"}").error().code, errc::invalid_utf8);
    EXPECT_EQ(parse_json("{\"a\":").error().code, errc::invalid_json);
    EXPECT_EQ(parse_json(R"({"a":"\ud800"})").error().code, errc::invalid_json);
    EXPECT_TRUE(parse_json(R"({"a":"\u00e9"})").has_value());
}

TEST(Codec, RandomMutationsOfValidEntriesNeverCrashAndFailCleanly) {
    session_state s = rich_history(3);
    std::mt19937_64 rng(99);
    int rejected = 0;
    for (const auto& e : s.transcript) {
        std::string text = json::serialize(to_json(e));
        for (int k = 0; k < 5; ++k) {
            std::string m = text;
            m[rng() % m.size()] = static_cast<char>("\"{}[]:,0a\\\xFF"[rng() % 11]);
            auto v = parse_json(m);
            if (!v) {
                ++rejected;
                continue;
            }
            auto d = entry_from_json(*v);
            if (d) {
                // Whatever decodes must re-encode to something that decodes to the same value.
                EXPECT_EQ(entry_from_json(reparse(to_json(*d))).value(), *d);
            } else {
                ++rejected;
            }
        }
    }
    EXPECT_GT(rejected, 0);
}

}  // namespace wuhu::testing
