// Saved provider streams (tests/data/providers/) and a sink that records what a decoder
// streamed, for the provider tests.
#pragma once

#include "providers/provider.hpp"
#include "providers/sse.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace wuhu::testing {

inline std::string saved_stream(const std::string& name) {
    std::ifstream f(std::string(WUHU_TEST_DATA) + "/providers/" + name, std::ios::binary);
    EXPECT_TRUE(f.good()) << "missing tests/data/providers/" << name;
    std::ostringstream out;
    out << f.rdbuf();
    return out.str();
}

struct recording_sink final : providers::stream_sink {
    std::string streamed;  // the text deltas, joined
    std::vector<providers::tool_call_delta> calls;
    int text_deltas = 0;
    void text(std::string_view d) override {
        streamed.append(d);
        ++text_deltas;
    }
    void tool_call(const providers::tool_call_delta& d) override { calls.push_back(d); }
    std::vector<providers::reported_usage> usage_reports;
    void usage(const providers::reported_usage& u) override { usage_reports.push_back(u); }
};

inline session::llm_message msg(session::llm_role role, std::string content,
                                std::vector<session::tool_call> calls = {}) {
    session::llm_message m;
    m.role = role;
    m.content = std::move(content);
    m.tool_calls = std::move(calls);
    return m;
}

inline session::llm_message tool_result_msg(std::string call, std::string tool,
                                            std::string content, bool is_error = false) {
    session::llm_message m;
    m.role = session::llm_role::tool;
    m.content = std::move(content);
    m.tool_call_id = std::move(call);
    m.tool_name = std::move(tool);
    m.is_error = is_error;
    return m;
}

inline session::tool_call call(const char* id, const char* name, const char* args) {
    return session::tool_call{session::tool_call_id::parse(id).value(), name, args};
}

// Feeds `stream` to `decoder` (anything with on_event and done) event by event, through the
// SSE parser, in pieces of `piece` bytes.
template <class Decoder>
void feed_stream(Decoder& decoder, std::string_view stream, std::size_t piece = 7) {
    providers::sse_parser p;
    for (std::size_t at = 0; at < stream.size() && !decoder.done(); at += piece) {
        ASSERT_TRUE(p.feed(stream.substr(at, piece),
                           [&](const providers::sse_event& e) { decoder.on_event(e); }))
            << p.error();
    }
}

}  // namespace wuhu::testing
