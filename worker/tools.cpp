#include "worker/tools.hpp"

#include "session/codec.hpp"
#include "session/json_reader.hpp"
#include "session/text.hpp"

#include <algorithm>
#include <cstdio>

namespace wuhu::worker {

namespace json = boost::json;

void tool_registry::add(std::shared_ptr<tool> t) {
    std::string name = t->spec().name;
    tools_[name] = std::move(t);
}

tool* tool_registry::find(const std::string& name, const std::vector<std::string>& enabled) const {
    auto it = tools_.find(name);
    if (it == tools_.end()) {
        return nullptr;
    }
    if (!enabled.empty() && std::find(enabled.begin(), enabled.end(), name) == enabled.end()) {
        return nullptr;
    }
    return it->second.get();
}

std::vector<tool_spec> tool_registry::specs(const std::vector<std::string>& enabled) const {
    std::vector<tool_spec> out;
    for (const auto& [name, t] : tools_) {
        if (find(name, enabled) != nullptr) {
            out.push_back(t->spec());
        }
    }
    return out;
}

namespace {

using session::detail::object_reader;

// Parses the arguments object; a decode error becomes a tool error result for the model.
std::optional<json::value> parse_args(const std::string& arguments, tool_output& error) {
    auto v = session::parse_json(arguments);
    if (!v || !v->is_object()) {
        error = {"arguments must be a JSON object", true};
        return std::nullopt;
    }
    return std::move(*v);
}

tool_output bad_args(const session::decode_error& e) {
    return {"invalid arguments: " + e.message(), true};
}

class echo_tool final : public tool {
  public:
    const tool_spec& spec() const override { return spec_; }
    bool idempotent() const override { return true; }
    asio::awaitable<tool_output> execute(std::string arguments, tool_call_context) override {
        tool_output err;
        auto v = parse_args(arguments, err);
        if (!v) {
            co_return err;
        }
        auto r = object_reader::open(*v, "");
        auto text = r->str("text");
        if (!text) {
            co_return bad_args(text.error());
        }
        co_return tool_output{std::string(*text), false};
    }

  private:
    tool_spec spec_{
        "echo", "Returns its text argument unchanged.",
        R"({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]})"};
};

class clock_tool final : public tool {
  public:
    const tool_spec& spec() const override { return spec_; }
    bool idempotent() const override { return true; }
    asio::awaitable<tool_output> execute(std::string, tool_call_context ctx) override {
        auto ms = ctx.services.time().now().value;
        std::time_t secs = static_cast<std::time_t>(ms / 1000);
        std::tm tm{};
        gmtime_r(&secs, &tm);
        char buf[40];
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
                      tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        co_return tool_output{buf, false};
    }

  private:
    tool_spec spec_{"clock", "Returns the current time in UTC (ISO 8601).",
                    R"({"type":"object","properties":{}})"};
};

class sleep_tool final : public tool {
  public:
    const tool_spec& spec() const override { return spec_; }
    bool idempotent() const override { return true; }
    asio::awaitable<tool_output> execute(std::string arguments, tool_call_context ctx) override {
        tool_output err;
        auto v = parse_args(arguments, err);
        if (!v) {
            co_return err;
        }
        auto r = object_reader::open(*v, "");
        auto ms = r->u64("ms");
        if (!ms) {
            co_return bad_args(ms.error());
        }
        co_await ctx.services.time().sleep(milliseconds(*ms));
        co_return tool_output{"slept " + std::to_string(*ms) + " ms", false};
    }

  private:
    tool_spec spec_{
        "sleep", "Waits for the given number of milliseconds.",
        R"({"type":"object","properties":{"ms":{"type":"integer","minimum":0}},"required":["ms"]})"};
};

class schedule_callback_tool final : public tool {
  public:
    const tool_spec& spec() const override { return spec_; }
    // The timer id derives from the call id, so a re-run schedules nothing new.
    bool idempotent() const override { return true; }
    asio::awaitable<tool_output> execute(std::string arguments, tool_call_context ctx) override {
        tool_output err;
        auto v = parse_args(arguments, err);
        if (!v) {
            co_return err;
        }
        auto r = object_reader::open(*v, "");
        auto delay = r->u64("delay_ms");
        if (!delay) {
            co_return bad_args(delay.error());
        }
        auto content = r->text("content", session::default_max_content_bytes);
        if (!content) {
            co_return bad_args(content.error());
        }
        auto id = session::queue_item_id::parse("timer-" + ctx.call.str());
        if (!id) {
            co_return tool_output{"the tool call id is too long for a timer id", true};
        }
        session::unix_ms due{ctx.services.time().now().value + static_cast<std::int64_t>(*delay)};
        session::timer t{*id, due, session::system_source::parse("scheduledCallback").value(),
                         *content};
        auto scheduling = ctx.services.schedule_timer(std::move(t));
        if (!co_await std::move(scheduling)) {
            co_return tool_output{"the session stopped: the callback was not scheduled", true};
        }
        co_return tool_output{
            "scheduled callback " + id->str() + " in " + std::to_string(*delay) + " ms", false};
    }

  private:
    tool_spec spec_{
        "schedule_callback",
        "Schedules a message to this session's system lane after delay_ms; it arrives once, "
        "even across restarts.",
        R"({"type":"object","properties":{"delay_ms":{"type":"integer","minimum":0},"content":{"type":"string"}},"required":["delay_ms","content"]})"};
};

}  // namespace

void add_builtin_tools(tool_registry& r) {
    r.add(std::make_shared<echo_tool>());
    r.add(std::make_shared<clock_tool>());
    r.add(std::make_shared<sleep_tool>());
    r.add(std::make_shared<schedule_callback_tool>());
}

}  // namespace wuhu::worker
