#include "runtime/log.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <boost/json/serialize.hpp>
#include <boost/json/string_view.hpp>

namespace wuhu::runtime {

namespace {

std::string json_string(std::string_view s) {
    return boost::json::serialize(boost::json::string_view(s.data(), s.size()));
}

// %* in the pattern: the message as a JSON string, quotes included.
class json_message final : public spdlog::custom_flag_formatter {
  public:
    void format(const spdlog::details::log_msg& msg, const std::tm&,
                spdlog::memory_buf_t& dest) override {
        const std::string s = json_string(std::string_view(msg.payload.data(), msg.payload.size()));
        dest.append(s.data(), s.data() + s.size());
    }
    std::unique_ptr<custom_flag_formatter> clone() const override {
        return std::make_unique<json_message>();
    }
};

}  // namespace

std::unique_ptr<spdlog::formatter> json_log_formatter(const std::string& worker_id) {
    std::string worker = json_string(worker_id);
    std::string pattern = R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","worker":)";
    for (char ch : worker) {
        pattern += ch;
        if (ch == '%') {
            pattern += '%';  // a literal percent sign in an spdlog pattern
        }
    }
    pattern += R"(,"msg":%*})";
    auto f = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    f->add_flag<json_message>('*').set_pattern(pattern);
    return f;
}

std::shared_ptr<spdlog::logger> json_logger(const std::string& worker_id) {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto log = std::make_shared<spdlog::logger>("wuhu", sink);
    log->set_formatter(json_log_formatter(worker_id));
    return log;
}

}  // namespace wuhu::runtime
