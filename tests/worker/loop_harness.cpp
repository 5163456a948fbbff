#include "tests/worker/loop_harness.hpp"

#include "session/overloaded.hpp"

namespace wuhu::testing {

worker::loop_options loop_harness::default_options() {
    worker::loop_options o;
    o.jitter_seed = 42;
    return o;
}

loop_harness::loop_harness(const std::string& script_json, storage::session_store* store,
                           std::uint64_t epoch, worker::loop_options opts, const std::string& key)
    : store_(store != nullptr ? store : &own_store_) {
    auto parsed = providers::parse_script(script_json);
    if (!parsed) {
        ADD_FAILURE() << "bad script: " << parsed.error().message();
        parsed = providers::script{};
    }
    provider_ = std::make_unique<providers::scripted_provider>(std::move(*parsed), clock_);
    provider_->record_requests(true);
    tools::add_builtin_tools(tools_);
    auto log = store_->open(session_id::parse_key(key).value(), lease_epoch{epoch});
    EXPECT_TRUE(log.has_value());
    loop_ = std::make_unique<worker::agent_loop>(io_.get_executor(), std::move(*log), *provider_,
                                                 tools_, clock_, opts);
    sub_ = loop_->observe([this](const loop_event& e) { events_.push_back(e); }).sub;
}

void loop_harness::start() {
    asio::co_spawn(io_, loop_->start(),
                   asio::bind_cancellation_slot(stop_.slot(), [this](std::exception_ptr e) {
                       finished_ = true;
                       if (e) {
                           try {
                               std::rethrow_exception(e);
                           } catch (const boost::system::system_error& se) {
                               if (se.code() != asio::error::operation_aborted) {
                                   ADD_FAILURE() << "start() threw: " << se.what();
                               }
                           } catch (const std::exception& ex) {
                               ADD_FAILURE() << "start() threw: " << ex.what();
                           }
                       }
                   }));
    poll();
}

void loop_harness::poll() {
    io_.restart();
    io_.poll();
}

bool loop_harness::run_until(const std::function<bool()>& done, bool move_clock) {
    for (int round = 0; round < 100'000; ++round) {
        poll();
        if (done()) {
            return true;
        }
        if (!move_clock || !clock_.advance_to_next()) {
            poll();
            return done();
        }
    }
    return false;
}

boost::system::result<command_reply> loop_harness::send(command c) {
    std::optional<boost::system::result<command_reply>> out;
    asio::co_spawn(io_, loop_->send(std::move(c)),
                   [&out](std::exception_ptr e, boost::system::result<command_reply> r) {
                       EXPECT_FALSE(e) << "send() threw";
                       out = std::move(r);
                   });
    EXPECT_TRUE(run_until([&] { return out.has_value(); }, false)) << "send() did not complete";
    return out.value_or(
        boost::system::result<command_reply>(make_error_code(storage::errc::unavailable)));
}

std::vector<boost::system::result<command_reply>> loop_harness::send_all(
    std::vector<command> cs) {
    std::vector<std::optional<boost::system::result<command_reply>>> outs(cs.size());
    for (std::size_t i = 0; i < cs.size(); ++i) {
        asio::co_spawn(io_, loop_->send(std::move(cs[i])),
                       [&outs, i](std::exception_ptr e, boost::system::result<command_reply> r) {
                           EXPECT_FALSE(e) << "send() threw";
                           outs[i] = std::move(r);
                       });
    }
    EXPECT_TRUE(run_until(
        [&] { return std::all_of(outs.begin(), outs.end(), [](auto& o) { return o.has_value(); }); },
        false))
        << "a send() did not complete";
    std::vector<boost::system::result<command_reply>> replies;
    for (auto& o : outs) {
        replies.push_back(o.value_or(
            boost::system::result<command_reply>(make_error_code(storage::errc::unavailable))));
    }
    return replies;
}

void loop_harness::settle() {
    EXPECT_TRUE(run_until([this] { return loop_->quiescent(); })) << "the loop did not settle";
}

void loop_harness::stop() {
    stop_.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(run_until([this] { return finished_; }, false)) << "start() did not return";
}

boost::system::result<command_reply> loop_harness::follow_up(const std::string& id,
                                                             const std::string& text) {
    return send(worker::enqueue_command{user_in(lane::follow_up, id, text, human("u1", "Ann"))});
}

boost::system::result<command_reply> loop_harness::steer(const std::string& id,
                                                         const std::string& text) {
    return send(worker::enqueue_command{user_in(lane::steer, id, text, human("u1", "Ann"))});
}

boost::system::result<command_reply> loop_harness::system(const std::string& id,
                                                          const std::string& text) {
    return send(worker::enqueue_command{system_in(id, text)});
}

std::string loop_harness::diagnostic_message() const {
    const auto& t = state().transcript;
    for (auto it = t.rbegin(); it != t.rend(); ++it) {
        if (const auto* d = std::get_if<session::diagnostic>(&it->body)) {
            return d->message;
        }
    }
    return "";
}

std::vector<std::string> loop_harness::transcript_texts() const {
    std::vector<std::string> out;
    for (const auto& e : state().transcript) {
        std::visit(session::overloaded{
                       [&](const party_message& m) { out.push_back("party:" + m.content); },
                       [&](const system_message& m) { out.push_back("system:" + m.content); },
                       [&](const assistant_message& m) {
                           std::string calls;
                           for (const auto& c : m.tool_calls) {
                               calls += "+" + c.name;
                           }
                           out.push_back("assistant:" + m.text + calls);
                       },
                       [&](const tool_started& t) { out.push_back("started:" + t.tool); },
                       [&](const tool_result& r) {
                           out.push_back(std::string(r.is_error ? "error:" : "result:") + r.output);
                       },
                       [&](const compaction& c) { out.push_back("compaction:" + c.summary); },
                       [&](const interruption& i) {
                           out.push_back(std::string(i.kind == interruption_kind::aborted
                                                         ? "aborted:"
                                                         : "owner_lost:") +
                                         i.reason);
                       },
                       [&](const diagnostic& d) { out.push_back("diagnostic:" + d.code); },
                       [&](const approval_requested& a) { out.push_back("asked:" + a.tool); },
                       [&](const approval_decided& d) {
                           out.push_back(std::string(decision_name(d.what)) + ":" + d.tool);
                       },
                   },
                   e.body);
    }
    return out;
}

asio::awaitable<tools::tool_output> counting_tool::execute(std::string,
                                                            tools::tool_call_context ctx) {
    int n = ++runs_[ctx.call.str()];
    co_return tools::tool_output{"charged (run " + std::to_string(n) + ")", false};
}

}  // namespace wuhu::testing
