// Strict reading of JSON objects, shared by the codec and the request decoders.
//
// A reader takes fields by name; `finish()` then fails with unknown_field if the object has a
// field nobody took. Errors carry the dotted path of the field.
#pragma once

#include "session/codec.hpp"

#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace wuhu::session::detail {

decode_error fail(errc code, std::string_view path);
std::string join(std::string_view path, std::string_view key);

class object_reader {
  public:
    static decoded<object_reader> open(const boost::json::value& v, std::string path);

    // Required / optional fields of each kind. Optional ones are absent when missing or null.
    decoded<std::string_view> str(std::string_view key);
    decoded<std::optional<std::string_view>> opt_str(std::string_view key);
    decoded<std::uint64_t> u64(std::string_view key);
    decoded<std::optional<std::uint64_t>> opt_u64(std::string_view key);
    decoded<std::int64_t> i64(std::string_view key);
    decoded<std::optional<std::int64_t>> opt_i64(std::string_view key);
    decoded<bool> boolean(std::string_view key);
    decoded<std::optional<bool>> opt_boolean(std::string_view key);
    decoded<const boost::json::array*> arr(std::string_view key);
    decoded<const boost::json::value*> val(std::string_view key);
    const boost::json::value* opt_val(std::string_view key);

    // Content: a string checked by check_content against max_bytes.
    decoded<std::string> text(std::string_view key, std::size_t max_bytes);

    decoded<void> finish() const;
    std::string path(std::string_view key) const { return join(path_, key); }
    const std::string& where() const { return path_; }

  private:
    object_reader(const boost::json::object* o, std::string path)
        : obj_(o), path_(std::move(path)) {}
    const boost::json::value* find(std::string_view key);

    const boost::json::object* obj_;
    std::string path_;
    std::set<std::string, std::less<>> taken_;
};

// Unwraps a decoded<T> into `lhs`, or returns its error from the enclosing function.
#define WUHU_TRY(lhs, expr)           \
    auto lhs##_result_ = (expr);      \
    if (!lhs##_result_) {             \
        return lhs##_result_.error(); \
    }                                 \
    auto lhs = std::move(*lhs##_result_)

// Same for decoded<void> and for results whose value is not needed.
#define WUHU_CHECK(expr)                \
    do {                                \
        auto wuhu_check_ = (expr);      \
        if (!wuhu_check_) {             \
            return wuhu_check_.error(); \
        }                               \
    } while (false)

}  // namespace wuhu::session::detail
