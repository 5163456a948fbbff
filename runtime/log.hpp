// Structured logs: one JSON object per line,
//
//   {"time":"2026-11-23T02:15:23.364Z","level":"info","worker":"w1","msg":"..."}
//
// with the time in UTC and the message escaped as a JSON string, so that every line parses
// whatever the message holds (quotes, newlines, an SQL error with its statement).
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace wuhu::runtime {

// The formatter of those lines, for any sink.
std::unique_ptr<spdlog::formatter> json_log_formatter(const std::string& worker_id);

// A logger that writes those lines to stderr (thread-safe).
std::shared_ptr<spdlog::logger> json_logger(const std::string& worker_id);

}  // namespace wuhu::runtime
