#include "session/json_reader.hpp"

#include "session/text.hpp"

namespace wuhu::session::detail {

namespace json = boost::json;

decode_error fail(errc code, std::string_view path) {
    return decode_error{code, std::string(path)};
}

std::string join(std::string_view path, std::string_view key) {
    if (path.empty()) {
        return std::string(key);
    }
    std::string out(path);
    out.append(".").append(key);
    return out;
}

decoded<object_reader> object_reader::open(const json::value& v, std::string path) {
    const json::object* o = v.if_object();
    if (o == nullptr) {
        return fail(errc::invalid_type, path);
    }
    return object_reader(o, std::move(path));
}

const json::value* object_reader::find(std::string_view key) {
    taken_.emplace(key);
    const json::value* v = obj_->if_contains(key);
    return (v == nullptr || v->is_null()) ? nullptr : v;
}

const json::value* object_reader::opt_val(std::string_view key) {
    return find(key);
}

decoded<const json::value*> object_reader::val(std::string_view key) {
    const json::value* v = find(key);
    if (v == nullptr) {
        return fail(errc::missing_field, path(key));
    }
    return v;
}

decoded<std::optional<std::string_view>> object_reader::opt_str(std::string_view key) {
    const json::value* v = find(key);
    if (v == nullptr) {
        return std::optional<std::string_view>{};
    }
    if (!v->is_string()) {
        return fail(errc::invalid_type, path(key));
    }
    std::string_view s = v->get_string();
    if (!is_valid_utf8(s)) {
        return fail(errc::invalid_utf8, path(key));
    }
    if (s.find('\0') != std::string_view::npos) {
        return fail(errc::invalid_content, path(key));  // no text field may hold a NUL
    }
    return std::optional<std::string_view>{s};
}

decoded<std::string_view> object_reader::str(std::string_view key) {
    WUHU_TRY(s, opt_str(key));
    if (!s) {
        return fail(errc::missing_field, path(key));
    }
    return *s;
}

decoded<std::string> object_reader::text(std::string_view key, std::size_t max_bytes) {
    WUHU_TRY(s, str(key));
    if (auto r = check_content(s, max_bytes); !r) {
        return fail(static_cast<errc>(r.error().value()), path(key));
    }
    return std::string(s);
}

decoded<std::optional<std::int64_t>> object_reader::opt_i64(std::string_view key) {
    const json::value* v = find(key);
    if (v == nullptr) {
        return std::optional<std::int64_t>{};
    }
    if (v->is_int64()) {
        return std::optional<std::int64_t>{v->get_int64()};
    }
    if (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
        return std::optional<std::int64_t>{static_cast<std::int64_t>(v->get_uint64())};
    }
    return fail(errc::invalid_type, path(key));
}

decoded<std::int64_t> object_reader::i64(std::string_view key) {
    WUHU_TRY(n, opt_i64(key));
    if (!n) {
        return fail(errc::missing_field, path(key));
    }
    return *n;
}

decoded<std::optional<std::uint64_t>> object_reader::opt_u64(std::string_view key) {
    const json::value* v = find(key);
    if (v == nullptr) {
        return std::optional<std::uint64_t>{};
    }
    if (v->is_uint64()) {
        return std::optional<std::uint64_t>{v->get_uint64()};
    }
    if (v->is_int64() && v->get_int64() >= 0) {
        return std::optional<std::uint64_t>{static_cast<std::uint64_t>(v->get_int64())};
    }
    return fail(errc::invalid_type, path(key));
}

decoded<std::uint64_t> object_reader::u64(std::string_view key) {
    WUHU_TRY(n, opt_u64(key));
    if (!n) {
        return fail(errc::missing_field, path(key));
    }
    return *n;
}

decoded<std::optional<bool>> object_reader::opt_boolean(std::string_view key) {
    const json::value* v = find(key);
    if (v == nullptr) {
        return std::optional<bool>{};
    }
    if (!v->is_bool()) {
        return fail(errc::invalid_type, path(key));
    }
    return std::optional<bool>{v->get_bool()};
}

decoded<bool> object_reader::boolean(std::string_view key) {
    WUHU_TRY(b, opt_boolean(key));
    if (!b) {
        return fail(errc::missing_field, path(key));
    }
    return *b;
}

decoded<const json::array*> object_reader::arr(std::string_view key) {
    WUHU_TRY(v, val(key));
    if (!v->is_array()) {
        return fail(errc::invalid_type, path(key));
    }
    return &v->get_array();
}

decoded<void> object_reader::finish() const {
    for (const auto& kv : *obj_) {
        if (!taken_.contains(std::string_view(kv.key()))) {
            return fail(errc::unknown_field, join(path_, kv.key()));
        }
    }
    return {};
}

}  // namespace wuhu::session::detail
