#include "providers/replay_provider.hpp"

#include "session/codec.hpp"

#include <boost/json.hpp>

#include <stdexcept>

namespace wuhu::providers {

namespace json = boost::json;

namespace {

json::value message_json(const session::assistant_message& m) {
    // The transcript codec's shape of an assistant message (without its entry id and time).
    auto v = session::to_json(session::entry{session::entry_seq{1}, session::unix_ms{0}, m});
    auto& o = v.as_object();
    o.erase("id");
    o.erase("at");
    o.erase("type");
    return v;
}

std::optional<session::assistant_message> message_of(const json::value& v) {
    if (!v.is_object()) {
        return std::nullopt;
    }
    json::object o = v.as_object();
    o["id"] = 1;
    o["at"] = 0;
    o["type"] = "assistant_message";
    auto e = session::entry_from_json(o);
    if (!e) {
        return std::nullopt;
    }
    return std::get<session::assistant_message>(e->body);
}

std::optional<session::token_usage> usage_of(const json::value& v) {
    if (!v.is_object()) {
        return std::nullopt;
    }
    session::token_usage u;
    for (auto [name, field] : {std::pair{"input", &u.input},
                               {"cached_input", &u.cached_input},
                               {"output", &u.output},
                               {"cache_write", &u.cache_write},
                               {"reasoning", &u.reasoning}}) {
        if (const auto* n = v.as_object().if_contains(name)) {
            if (!n->is_int64() || n->as_int64() < 0) {
                return std::nullopt;
            }
            *field = static_cast<std::uint64_t>(n->as_int64());
        }
    }
    return u;
}

// The model a record names beside its usage ("" when none).
std::string model_at(const json::object& o) {
    const auto* m = o.if_contains("model");
    return m != nullptr && m->is_string() ? std::string(m->as_string()) : std::string();
}

json::value error_json(const provider_error& e) {
    json::object o{{"kind", session::kind_name(e.kind)}, {"message", e.message}};
    if (e.retry_after) {
        o["retry_after_ms"] = e.retry_after->count();
    }
    return o;
}

std::optional<provider_error> error_of(const json::value& v) {
    if (!v.is_object() || !v.as_object().contains("kind") || !v.at("kind").is_string() ||
        !v.as_object().contains("message") || !v.at("message").is_string()) {
        return std::nullopt;
    }
    provider_error e;
    const std::string_view kind = v.at("kind").as_string();
    if (kind == "transient") {
        e.kind = provider_error_kind::transient;
    } else if (kind == "context_overflow") {
        e.kind = provider_error_kind::context_overflow;
    } else if (kind == "fatal") {
        e.kind = provider_error_kind::fatal;
    } else {
        return std::nullopt;
    }
    e.message = v.at("message").as_string();
    if (const auto* r = v.as_object().if_contains("retry_after_ms");
        r != nullptr && r->is_int64()) {
        e.retry_after = std::chrono::milliseconds(r->as_int64());
    }
    return e;
}

// Passes the deltas on, and keeps them with their times.
class recording_sink final : public stream_sink {
  public:
    recording_sink(stream_sink& inner, runtime::clock& clk)
        : inner_(inner), clock_(clk), start_(clk.now().value) {}
    void text(std::string_view d) override {
        events_.push_back(json::object{{"after_ms", clock_.now().value - start_}, {"text", d}});
        inner_.text(d);
    }
    void tool_call(const tool_call_delta& d) override {
        events_.push_back(json::object{
            {"after_ms", clock_.now().value - start_},
            {"tool_call",
             json::object{{"id", d.id}, {"name", d.name}, {"arguments", d.arguments}}}});
        inner_.tool_call(d);
    }
    void usage(const reported_usage& u) override {
        events_.push_back(json::object{{"after_ms", clock_.now().value - start_},
                                       {"usage", session::to_json(u.usage)},
                                       {"model", u.model}});
        inner_.usage(u);
    }
    json::array take() { return std::move(events_); }

  private:
    stream_sink& inner_;
    runtime::clock& clock_;
    std::int64_t start_;
    json::array events_;
};

replay_provider::record record_of(const json::object& line, std::size_t n) {
    auto bad = [n](const std::string& why) {
        return std::invalid_argument("line " + std::to_string(n) + " of the recording: " + why);
    };
    replay_provider::record r;
    if (const auto* events = line.if_contains("events")) {
        if (!events->is_array()) {
            throw bad("\"events\" must be an array");
        }
        for (const auto& ev : events->as_array()) {
            if (!ev.is_object() || !ev.as_object().contains("after_ms") ||
                !ev.at("after_ms").is_int64()) {
                throw bad("an event needs \"after_ms\"");
            }
            replay_provider::event e;
            e.after_ms = ev.at("after_ms").as_int64();
            if (const auto* t = ev.as_object().if_contains("text");
                t != nullptr && t->is_string()) {
                e.text = t->as_string();
            } else if (const auto* c = ev.as_object().if_contains("tool_call");
                       c != nullptr && c->is_object() && c->as_object().contains("id") &&
                       c->at("id").is_string() && c->as_object().contains("name") &&
                       c->at("name").is_string() && c->as_object().contains("arguments") &&
                       c->at("arguments").is_string()) {
                e.is_text = false;
                e.call = tool_call_delta{std::string(c->at("id").as_string()),
                                         std::string(c->at("name").as_string()),
                                         std::string(c->at("arguments").as_string())};
            } else if (const auto* u = ev.as_object().if_contains("usage")) {
                auto usage = usage_of(*u);
                if (!usage) {
                    throw bad("an event's \"usage\" counts tokens (input, output, ...)");
                }
                e.is_text = false;
                e.usage = reported_usage{*usage, model_at(ev.as_object()), 0};
            } else {
                throw bad("an event is a \"text\", a \"tool_call\" or a \"usage\"");
            }
            r.events.push_back(std::move(e));
        }
    }
    const auto* outcome = line.if_contains("outcome");
    if (outcome == nullptr || !outcome->is_object()) {
        throw bad("\"outcome\" is missing");
    }
    const auto& o = outcome->as_object();
    if (const auto* m = o.if_contains("message")) {
        auto message = message_of(*m);
        if (!message) {
            throw bad("\"message\" is not an assistant message");
        }
        r.outcome = std::move(*message);
    } else if (const auto* s = o.if_contains("summary"); s != nullptr && s->is_string()) {
        summary_answer sum{std::string(s->as_string()), {}, model_at(o), 0};
        if (const auto* u = o.if_contains("usage")) {
            auto usage = usage_of(*u);
            if (!usage) {
                throw bad("the summary's \"usage\" counts tokens (input, output, ...)");
            }
            sum.usage = *usage;
        }
        r.outcome = std::move(sum);
    } else if (const auto* e = o.if_contains("error")) {
        auto err = error_of(*e);
        if (!err) {
            throw bad("\"error\" needs a kind (transient, context_overflow, fatal) and a message");
        }
        r.outcome = std::move(*err);
    } else {
        throw bad("the outcome is a \"message\", a \"summary\" or an \"error\"");
    }
    return r;
}

}  // namespace

std::unique_ptr<replay_provider> replay_provider::recording(std::unique_ptr<provider> inner,
                                                            const std::filesystem::path& file,
                                                            runtime::clock& clk) {
    std::unique_ptr<replay_provider> p(new replay_provider(clk));
    p->inner_ = std::move(inner);
    p->out_.open(file, std::ios::app);
    if (!p->out_) {
        throw std::invalid_argument("cannot open the recording " + file.string() +
                                    " for appending");
    }
    return p;
}

std::unique_ptr<replay_provider> replay_provider::playing(const std::filesystem::path& file,
                                                          runtime::clock& clk) {
    std::ifstream in(file);
    if (!in) {
        throw std::invalid_argument("cannot read the recording " + file.string());
    }
    std::unique_ptr<replay_provider> p(new replay_provider(clk));
    std::string line;
    std::size_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (line.empty()) {
            continue;
        }
        boost::system::error_code ec;
        auto v = json::parse(line, ec);
        if (ec || !v.is_object() || !v.as_object().contains("session") ||
            !v.at("session").is_string() || !v.as_object().contains("kind") ||
            !v.at("kind").is_string() || !v.as_object().contains("step") ||
            !v.at("step").is_int64() || v.at("step").as_int64() < 0) {
            throw std::invalid_argument(file.string() + ": line " + std::to_string(n) +
                                        " is not a record (session, kind, step, outcome)");
        }
        const auto& o = v.as_object();
        key k{std::string(o.at("session").as_string()), std::string(o.at("kind").as_string()),
              static_cast<std::uint64_t>(o.at("step").as_int64())};
        p->records_[k].push_back(record_of(o, n));
    }
    return p;
}

asio::awaitable<inference_outcome> replay_provider::infer(inference_request req,
                                                          stream_sink& sink) {
    if (inner_) {
        json::object line{{"session", req.session},
                          {"step", req.step},
                          {"kind", "infer"},
                          {"model", req.model},
                          {"messages", req.context.size()},
                          {"tools", req.tools.size()}};
        recording_sink rec(sink, clock_);
        auto inferring = inner_->infer(std::move(req), rec);
        auto out = co_await std::move(inferring);
        line["events"] = rec.take();
        if (const auto* m = std::get_if<session::assistant_message>(&out)) {
            line["outcome"] = json::object{{"message", message_json(*m)}};
        } else {
            line["outcome"] = json::object{{"error", error_json(std::get<provider_error>(out))}};
        }
        out_ << json::serialize(line) << '\n' << std::flush;
        co_return out;
    }
    auto it = records_.find(key{req.session, "infer", req.step});
    if (it == records_.end() || it->second.empty()) {
        co_return provider_error{provider_error_kind::fatal,
                                 "the recording has no (more) inference for session " +
                                     req.session + " at step " + std::to_string(req.step)};
    }
    record r = std::move(it->second.front());
    it->second.pop_front();
    std::int64_t at = 0;
    for (const auto& e : r.events) {
        if (e.after_ms > at) {
            auto pause = clock_.sleep(std::chrono::milliseconds(e.after_ms - at));
            co_await std::move(pause);
            at = e.after_ms;
        }
        if (e.usage) {
            sink.usage(*e.usage);
        } else if (e.is_text) {
            sink.text(e.text);
        } else {
            sink.tool_call(e.call);
        }
    }
    if (auto* m = std::get_if<session::assistant_message>(&r.outcome)) {
        co_return std::move(*m);
    }
    if (auto* e = std::get_if<provider_error>(&r.outcome)) {
        co_return std::move(*e);
    }
    co_return provider_error{provider_error_kind::fatal,
                             "the recording has a summary where an inference was asked for"};
}

asio::awaitable<summary_outcome> replay_provider::summarize(summary_request req) {
    if (inner_) {
        json::object line{{"session", req.session},
                          {"step", req.step},
                          {"kind", "summary"},
                          {"model", req.model},
                          {"messages", req.segment.size()}};
        auto summarizing = inner_->summarize(std::move(req));
        auto out = co_await std::move(summarizing);
        if (const auto* s = std::get_if<summary_answer>(&out)) {
            line["outcome"] = json::object{
                {"summary", s->text}, {"usage", session::to_json(s->usage)}, {"model", s->model}};
        } else {
            line["outcome"] = json::object{{"error", error_json(std::get<provider_error>(out))}};
        }
        out_ << json::serialize(line) << '\n' << std::flush;
        co_return out;
    }
    auto it = records_.find(key{req.session, "summary", req.step});
    if (it == records_.end() || it->second.empty()) {
        co_return provider_error{provider_error_kind::fatal,
                                 "the recording has no (more) summary for session " + req.session +
                                     " at step " + std::to_string(req.step)};
    }
    record r = std::move(it->second.front());
    it->second.pop_front();
    if (auto* s = std::get_if<summary_answer>(&r.outcome)) {
        co_return std::move(*s);
    }
    if (auto* e = std::get_if<provider_error>(&r.outcome)) {
        co_return std::move(*e);
    }
    co_return provider_error{provider_error_kind::fatal,
                             "the recording has an inference where a summary was asked for"};
}

}  // namespace wuhu::providers
