#include "broker/tool_services.hpp"

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
#include <set>
#include <stdexcept>

namespace wuhu::broker {

namespace json = boost::json;
using namespace boost::asio::experimental::awaitable_operators;
using std::chrono::milliseconds;

namespace {

struct bad_config : std::runtime_error {
    using std::runtime_error::runtime_error;
};

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
        "description", "schema", "subject", "idempotent", "timeout_ms", "attempt_timeout_ms"};
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

// One request to a tool service, awaited on the calling coroutine's executor. A cancellation
// (the attempt's timeout, an abort) withdraws it and throws operation_aborted.
asio::awaitable<nats::reply> ask(nats::connection& nc, std::string subject,
                                 nats::header_list headers, std::string body) {
    struct waiting {
        explicit waiting(const asio::any_io_executor& ex) : wake(ex) {}
        asio::steady_timer wake;
        std::optional<nats::reply> answer;
    };
    auto w = std::make_shared<waiting>(co_await asio::this_coro::executor);
    w->wake.expires_at(asio::steady_timer::time_point::max());
    const auto token = nc.request_async(subject, headers, body, [w](nats::reply r) {
        // A libnats thread: hand the answer to the executor.
        asio::post(w->wake.get_executor(), [w, r = std::move(r)]() mutable {
            if (!w->answer) {
                w->answer = std::move(r);
                w->wake.cancel();
            }
        });
    });
    if (token == 0) {
        throw std::runtime_error("the request could not be sent to " + subject);
    }
    boost::system::error_code ec;
    co_await w->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (w->answer) {
        co_return std::move(*w->answer);
    }
    nc.cancel_request(token);
    throw boost::system::system_error(asio::error::operation_aborted);
}

// The service's answer as the tool's output.
worker::tool_output output_of(const std::string& name, const std::string& data) {
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

boost::system::result<std::vector<tool_service>, std::string> parse_tools(
    std::string_view json_text) {
    boost::system::error_code ec;
    auto v = json::parse(json_text, ec);
    if (ec) {
        return "not JSON: " + ec.message();
    }
    const auto* tools = v.is_object() ? v.as_object().if_contains("tools") : nullptr;
    if (tools == nullptr || !tools->is_object() || v.as_object().size() != 1) {
        return std::string("the file must be {\"tools\": {\"<name>\": {...}, ...}}");
    }
    std::vector<tool_service> out;
    try {
        for (const auto& [name, t] : tools->as_object()) {
            out.push_back(service_of(std::string(name), t));
        }
    } catch (const bad_config& e) {
        return std::string(e.what());
    }
    return out;
}

std::string subject_of(const tool_service& service, const std::string& prefix) {
    return service.subject.empty() ? prefix + ".tools." + service.spec.name : service.subject;
}

nats_tool::nats_tool(nats::connection& nc, tool_service service, const std::string& prefix)
    : nc_(nc), service_(std::move(service)) {
    service_.subject = subject_of(service_, prefix);
}

asio::awaitable<worker::tool_output> nats_tool::execute(std::string arguments,
                                                       worker::tool_call_context ctx) {
    auto& clk = ctx.services.time();
    const std::string& name = service_.spec.name;
    milliseconds backoff{100};
    for (int attempt = 1;; ++attempt) {
        const milliseconds left{ctx.deadline.value - clk.now().value};
        if (left.count() <= 0) {
            co_return worker::tool_output{
                "timed out: the service of tool " + name + " did not answer on " +
                    service_.subject + " within " + std::to_string(service_.timeout.count()) +
                    " ms (" + std::to_string(attempt - 1) + " attempts)",
                true};
        }
        const milliseconds wait = service_.idempotent ? std::min(left, service_.attempt_timeout)
                                                      : left;
        nats::header_list headers{
            {"Wuhu-Session", ctx.session.str()},
            {"Wuhu-Tool", name},
            {"Wuhu-Tool-Call", ctx.call.str()},
            {"Wuhu-Deadline", std::to_string(clk.now().value + wait.count())},
            {"Wuhu-Attempt", std::to_string(attempt)},
        };
        auto r = co_await (ask(nc_, service_.subject, std::move(headers), arguments) ||
                           clk.sleep(wait));
        if (r.index() == 0) {
            auto& reply = std::get<0>(r);
            if (reply.how == nats::reply::kind::answered) {
                co_return output_of(name, reply.data);
            }
            if (!service_.idempotent) {
                co_return worker::tool_output{"no service of tool " + name + " is listening on " +
                                                  service_.subject + " (no responders)",
                                              true};
            }
            // Nobody serves it now (a service restarting): try again a little later.
            const milliseconds still{ctx.deadline.value - clk.now().value};
            co_await clk.sleep(std::max(milliseconds(0), std::min(backoff, still)));
            backoff = std::min(backoff * 2, milliseconds(1000));
            continue;
        }
        if (!service_.idempotent) {
            co_return worker::tool_output{"timed out: the service of tool " + name +
                                              " did not answer on " + service_.subject +
                                              " within " + std::to_string(wait.count()) +
                                              " ms",
                                          true};
        }
    }
}

void add_tool_services(worker::tool_registry& r, nats::connection& nc,
                       const std::vector<tool_service>& services, const std::string& prefix) {
    for (const auto& s : services) {
        if (!r.add(std::make_shared<nats_tool>(nc, s, prefix))) {
            throw std::invalid_argument("tools file: tool \"" + s.spec.name +
                                        "\" is a built-in tool's name");
        }
    }
}

}  // namespace wuhu::broker
