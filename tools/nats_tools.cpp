#include "tools/nats_tools.hpp"

#include "protocol/subjects.hpp"
#include "session/ids.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <deque>
#include <set>
#include <stdexcept>

namespace wuhu::tools {

namespace json = boost::json;
using namespace boost::asio::experimental::awaitable_operators;
using std::chrono::milliseconds;

namespace {

struct bad_config : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A tool's approval terms (any tool's entry; a built-in's holds nothing else).
session::tool_approval approval_of(const std::string& name, const json::value& v) {
    const std::string where = "tool \"" + name + "\": ";
    if (!v.is_object()) {
        throw bad_config(where + "must be an object");
    }
    auto terms = approval_terms(v.as_object(), where);
    if (!terms) {
        throw bad_config(terms.error());
    }
    if (is_builtin_tool(name)) {
        for (const auto& [k, _] : v.as_object()) {
            if (k != "approval" && k != "approval_deadline_ms" && k != "approval_default") {
                throw bad_config(where +
                                 "a built-in tool's entry sets only approval, "
                                 "approval_deadline_ms and approval_default");
            }
        }
    }
    return *terms;
}

tool_service service_of(const std::string& name, const json::value& v) {
    const std::string where = "tool \"" + name + "\": ";
    if (!session::is_id_token(name)) {
        throw bad_config(where + "a name is 1-64 of [A-Za-z0-9_-]");
    }
    if (!v.is_object()) {
        throw bad_config(where + "must be an object");
    }
    const auto& o = v.as_object();
    static const std::set<std::string_view> known = {
        "description",          "schema",           "subject",
        "idempotent",           "timeout_ms",       "approval",
        "approval_deadline_ms", "approval_default", "attempt_timeout_ms"};
    for (const auto& [k, _] : o) {
        if (!known.contains(k)) {
            throw bad_config(where + "unknown field \"" + std::string(k) + "\"");
        }
    }
    tool_service s;
    s.spec.name = name;
    const auto* d = o.if_contains("description");
    if (d == nullptr || !d->is_string() || d->as_string().empty()) {
        throw bad_config(where + "\"description\" must be a string the model reads");
    }
    s.spec.description = d->as_string();
    const auto* schema = o.if_contains("schema");
    if (schema == nullptr || !schema->is_object()) {
        throw bad_config(where + "\"schema\" must be a JSON Schema object of the arguments");
    }
    // The arguments are a JSON object (what the providers send, and what the service reads).
    const auto* type = schema->as_object().if_contains("type");
    if (type == nullptr || !type->is_string() || type->as_string() != "object") {
        throw bad_config(where + "\"schema\" must have \"type\": \"object\" (the arguments "
                                 "are a JSON object)");
    }
    s.spec.schema = json::serialize(*schema);
    if (const auto* subject = o.if_contains("subject")) {
        if (!subject->is_string() || !protocol::valid_prefix(subject->as_string())) {
            throw bad_config(where +
                             "\"subject\" must be tokens of [A-Za-z0-9_-] separated by dots");
        }
        s.subject = subject->as_string();
    }
    if (const auto* i = o.if_contains("idempotent")) {
        if (!i->is_bool()) {
            throw bad_config(where + "\"idempotent\" must be true or false");
        }
        s.idempotent = i->as_bool();
    }
    auto ms = [&](const char* key, milliseconds fallback) {
        const auto* f = o.if_contains(key);
        if (f == nullptr) {
            return fallback;
        }
        if (!f->is_int64() || f->as_int64() < 1 || f->as_int64() > 86'400'000) {
            throw bad_config(where + "\"" + key + "\" must be 1-86400000 ms");
        }
        return milliseconds(f->as_int64());
    };
    s.timeout = ms("timeout_ms", s.timeout);
    s.attempt_timeout = ms("attempt_timeout_ms", s.timeout / 3);
    if (o.contains("attempt_timeout_ms") && !s.idempotent) {
        throw bad_config(where + "\"attempt_timeout_ms\" is for idempotent tools (tried again)");
    }
    s.attempt_timeout = std::clamp(s.attempt_timeout, milliseconds(1), s.timeout);
    return s;
}

// The answers to one call's requests (every attempt's: an earlier attempt's late answer is as
// good as the last one's), handed to the call's executor as they come.
struct answers {
    explicit answers(const asio::any_io_executor& ex) : wake(ex) {}
    asio::steady_timer wake;  // cancelled when an answer comes
    std::deque<nats::reply> queue;
};

// The call's requests, withdrawn when the call ends however it ends (an answer, a timeout, an
// abort, the session unloaded): no answer reaches a call that is gone.
class call_requests {
  public:
    call_requests(nats::connection& nc, std::shared_ptr<answers> a)
        : nc_(nc), answers_(std::move(a)) {}
    call_requests(const call_requests&) = delete;
    call_requests& operator=(const call_requests&) = delete;
    ~call_requests() {
        for (auto token : tokens_) {
            nc_.cancel_request(token);
        }
    }

    // False when the request could not be sent.
    bool send(const std::string& subject, const nats::header_list& headers,
              const std::string& body) {
        const auto token = nc_.request_async(subject, headers, body, [a = answers_](nats::reply r) {
            // A libnats thread: hand the answer to the call's executor.
            asio::post(a->wake.get_executor(), [a, r = std::move(r)]() mutable {
                a->queue.push_back(std::move(r));
                a->wake.cancel();
            });
        });
        if (token != 0) {
            tokens_.push_back(token);
        }
        return token != 0;
    }

  private:
    nats::connection& nc_;
    std::shared_ptr<answers> answers_;
    std::vector<std::uint64_t> tokens_;
};

// The next answer, or nullopt when none came by `until`. Cancellable (an abort).
asio::awaitable<std::optional<nats::reply>> next_answer(
    std::shared_ptr<answers> a, std::chrono::steady_clock::time_point until) {
    if (a->queue.empty()) {
        a->wake.expires_at(until);
        boost::system::error_code ec;
        co_await a->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if ((co_await asio::this_coro::cancellation_state).cancelled() !=
            asio::cancellation_type::none) {
            throw boost::system::system_error(asio::error::operation_aborted);
        }
    }
    if (a->queue.empty()) {
        co_return std::nullopt;
    }
    nats::reply r = std::move(a->queue.front());
    a->queue.pop_front();
    co_return r;
}

// The service's answer as the tool's output.
tools::tool_output output_of(const std::string& name, const std::string& data) {
    boost::system::error_code ec;
    auto v = json::parse(data, ec);
    const json::object* o = !ec && v.is_object() ? &v.as_object() : nullptr;
    const json::value* out = o != nullptr ? o->if_contains("output") : nullptr;
    const json::value* err = o != nullptr ? o->if_contains("is_error") : nullptr;
    if (out == nullptr || !out->is_string() || (err != nullptr && !err->is_bool())) {
        std::string head = data.substr(0, 200);
        return {"the service of tool " + name +
                    " answered something that is not {\"output\": string, \"is_error\"?: "
                    "bool}: " +
                    head + (data.size() > head.size() ? "..." : ""),
                true};
    }
    return {std::string(out->as_string()), err != nullptr && err->as_bool()};
}

}  // namespace

boost::system::result<session::tool_approval, std::string> approval_terms(
    const json::object& entry, const std::string& where) {
    session::tool_approval terms;
    if (const auto* f = entry.if_contains("approval")) {
        const auto mode =
            f->is_string() ? session::approval_mode_named(f->as_string()) : std::nullopt;
        if (!mode) {
            return where + "\"approval\" must be \"always\" or \"never\"";
        }
        terms.mode = *mode;
    }
    if (const auto* f = entry.if_contains("approval_deadline_ms")) {
        if (!f->is_int64() || f->as_int64() < 1 ||
            static_cast<std::uint64_t>(f->as_int64()) > session::max_approval_deadline_ms) {
            return where + "\"approval_deadline_ms\" must be 1-2592000000 ms";
        }
        terms.deadline_ms = static_cast<std::uint64_t>(f->as_int64());
    }
    if (const auto* f = entry.if_contains("approval_default")) {
        const auto d = f->is_string() ? session::decision_named(f->as_string()) : std::nullopt;
        if (!d || *d == session::decision::respond) {
            return where + "\"approval_default\" must be \"reject\" or \"approve\"";
        }
        terms.on_deadline = *d;
    }
    return terms;
}

boost::system::result<std::vector<tool_service>, std::string> parse_tools(
    std::string_view json_text) {
    boost::system::error_code ec;
    auto v = json::parse(json_text, ec);
    if (ec) {
        return "not JSON: " + ec.message();
    }
    // "mcp_servers" is read by mcp/tools.hpp.
    const bool shaped =
        v.is_object() && !v.as_object().empty() &&
        std::all_of(v.as_object().begin(), v.as_object().end(), [](const auto& kv) {
            return (kv.key() == "tools" || kv.key() == "mcp_servers") && kv.value().is_object();
        });
    if (!shaped) {
        return std::string(
            "the file must be {\"tools\": {\"<name>\": {...}, ...}, \"mcp_servers\": {...}} "
            "(either may be left out)");
    }
    static const json::value none = json::object{};
    const auto* tools = v.as_object().if_contains("tools");
    if (tools == nullptr) {
        tools = &none;
    }
    std::vector<tool_service> out;
    try {
        for (const auto& [name, t] : tools->as_object()) {
            approval_of(std::string(name), t);  // checked (parse_approvals reads it)
            if (is_builtin_tool(name)) {
                continue;  // a built-in's entry sets only its approval
            }
            out.push_back(service_of(std::string(name), t));
        }
    } catch (const bad_config& e) {
        return std::string(e.what());
    }
    return out;
}

boost::system::result<std::map<std::string, session::tool_approval>, std::string> parse_approvals(
    std::string_view json_text) {
    auto services = parse_tools(json_text);  // the whole file checked once
    if (!services) {
        return services.error();
    }
    std::map<std::string, session::tool_approval> out;
    const auto v = json::parse(json_text);
    const auto* tools = v.as_object().if_contains("tools");
    if (tools == nullptr) {
        return out;
    }
    for (const auto& [name, t] : tools->as_object()) {
        const auto terms = approval_of(std::string(name), t);
        if (terms != session::tool_approval{}) {
            out[std::string(name)] = terms;
        }
    }
    return out;
}

std::string subject_of(const tool_service& service, const protocol::subject_layout& subjects) {
    if (!service.subject.empty()) {
        return service.subject;
    }
    return subjects.prefix() + (subjects.tenancy_on() ? ".<tenant>" : "") + ".tools." +
           service.spec.name;
}

nats_tool::nats_tool(nats::connection& nc, tool_service service,
                     protocol::subject_layout subjects)
    : nc_(nc), service_(std::move(service)), subjects_(std::move(subjects)) {}

asio::awaitable<tools::tool_output> nats_tool::execute(std::string arguments,
                                                       tools::tool_call_context ctx) {
    using steady = std::chrono::steady_clock;
    auto& clk = ctx.services.time();
    const std::string& name = service_.spec.name;
    // The runner's deadline, on the steady clock from here on (a step of the wall clock does
    // not change the attempts); the headers carry it as wall-clock time.
    const auto deadline = steady::now() + milliseconds(ctx.deadline.value - clk.now().value);
    auto left = [&] {
        return std::chrono::duration_cast<milliseconds>(deadline - steady::now());
    };
    // The tool's own subject, or the session's tenant's service of that name.
    const auto subject = service_.subject.empty() ? subjects_.tool(ctx.session, name).value()
                                                  : service_.subject;
    auto failed = [&](const std::string& why) {
        return tools::tool_output{"the service of tool " + name + " on " + subject + ": " + why,
                                   true};
    };
    auto a = std::make_shared<answers>(co_await asio::this_coro::executor);
    call_requests requests(nc_, a);
    milliseconds backoff{100};
    std::string last_failure = "no answer";
    int attempt = 0;
    while (left().count() > 0) {
        ++attempt;
        const milliseconds wait =
            service_.idempotent ? std::min(left(), service_.attempt_timeout) : left();
        nats::header_list headers{
            {"Wuhu-Session", std::string(ctx.session.local())},
            {"Wuhu-Tool", name},
            {"Wuhu-Tool-Call", ctx.call.str()},
            {"Wuhu-Deadline", std::to_string(clk.now().value + wait.count())},
            {"Wuhu-Attempt", std::to_string(attempt)},
        };
        if (const auto tenant = subjects_.tenant_of(ctx.session); !tenant.empty()) {
            headers.emplace_back("Wuhu-Tenant", std::string(tenant));
        }
        bool retry_later = false;
        if (!requests.send(subject, headers, arguments)) {
            if (!service_.idempotent) {
                co_return failed("the call could not be sent (the NATS connection is closed)");
            }
            last_failure = "could not send";
            retry_later = true;
        } else {
            // This attempt's answer, or an earlier one's; "no responders" ends it at once.
            auto answer = co_await next_answer(a, steady::now() + wait);
            if (answer && answer->how == nats::reply::kind::answered) {
                co_return output_of(name, answer->data);
            }
            if (answer) {
                if (!service_.idempotent) {
                    co_return failed("no service is listening (no responders)");
                }
                last_failure = "no service was listening (no responders)";
                retry_later = true;
            } else if (!service_.idempotent) {
                co_return failed("no answer within " + std::to_string(service_.timeout.count()) +
                                 " ms");
            } else {
                last_failure = "no answer";
            }
        }
        if (retry_later) {
            // Nobody serves it now (a service restarting): try again a little later.
            const milliseconds pause = std::max(milliseconds(0), std::min(backoff, left()));
            co_await clk.sleep(pause);
            backoff = std::min(backoff * 2, milliseconds(1000));
        }
    }
    co_return failed("timed out after " + std::to_string(service_.timeout.count()) + " ms (" +
                     std::to_string(attempt) + " attempts; the last: " + last_failure + ")");
}

void add_tool_services(tools::tool_registry& r, nats::connection& nc,
                       const std::vector<tool_service>& services,
                       const protocol::subject_layout& subjects) {
    for (const auto& s : services) {
        if (!r.add(std::make_shared<nats_tool>(nc, s, subjects))) {
            throw std::invalid_argument("tools file: tool \"" + s.spec.name +
                                        "\" is a built-in tool's name");
        }
    }
}

}  // namespace wuhu::tools
