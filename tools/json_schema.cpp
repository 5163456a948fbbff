#include "tools/json_schema.hpp"

#include <boost/json.hpp>

#include <cmath>

namespace wuhu::tools {

namespace json = boost::json;

namespace {

std::string type_of(const json::value& v) {
    switch (v.kind()) {
        case json::kind::null:
            return "null";
        case json::kind::bool_:
            return "boolean";
        case json::kind::int64:
        case json::kind::uint64:
            return "integer";
        case json::kind::double_:
            return std::trunc(v.as_double()) == v.as_double() ? "integer" : "number";
        case json::kind::string:
            return "string";
        case json::kind::array:
            return "array";
        case json::kind::object:
            return "object";
    }
    return "?";
}

bool is_type(const json::value& v, std::string_view t) {
    const auto actual = type_of(v);
    return actual == t || (t == "number" && actual == "integer");
}

std::optional<double> number(const json::value* v) {
    if (v == nullptr || !v->is_number()) {
        return std::nullopt;
    }
    return v->to_number<double>();
}

std::optional<std::size_t> count(const json::value* v) {
    if (v == nullptr || !v->is_number() || v->to_number<double>() < 0) {
        return std::nullopt;
    }
    return static_cast<std::size_t>(v->to_number<double>());
}

std::size_t code_points(std::string_view s) {
    std::size_t n = 0;
    for (unsigned char c : s) {
        n += (c & 0xC0) != 0x80;
    }
    return n;
}

std::string at(const std::string& path) {
    return "at " + (path.empty() ? std::string("/") : path) + ": ";
}

std::optional<std::string> check(const json::value& v, const json::value& schema,
                                 const std::string& path);

// The first failure of `v` against `schemas` (an array), or nullopt; counts the successes.
std::size_t successes(const json::value& v, const json::array& schemas, const std::string& path) {
    std::size_t ok = 0;
    for (const auto& s : schemas) {
        ok += !check(v, s, path).has_value();
    }
    return ok;
}

std::optional<std::string> check(const json::value& v, const json::value& schema,
                                 const std::string& path) {
    if (schema.is_bool()) {
        return schema.as_bool() ? std::nullopt
                                : std::optional<std::string>(at(path) + "nothing is allowed here");
    }
    if (!schema.is_object()) {
        return std::nullopt;
    }
    const auto& s = schema.as_object();
    if (const auto* t = s.if_contains("type")) {
        bool ok = false;
        std::string wanted;
        if (t->is_string()) {
            ok = is_type(v, t->as_string());
            wanted = t->as_string();
        } else if (t->is_array()) {
            for (const auto& one : t->as_array()) {
                if (one.is_string()) {
                    ok = ok || is_type(v, one.as_string());
                    wanted += (wanted.empty() ? "" : " or ") + std::string(one.as_string());
                }
            }
        } else {
            ok = true;
        }
        if (!ok) {
            return at(path) + "expected " + (wanted.empty() ? "another type" : "a " + wanted) +
                   ", got " + (type_of(v) == "integer" ? "a number" : "a " + type_of(v));
        }
    }
    if (const auto* e = s.if_contains("enum"); e != nullptr && e->is_array()) {
        const auto& options = e->as_array();
        if (std::find(options.begin(), options.end(), v) == options.end()) {
            return at(path) + "expected one of " + json::serialize(*e);
        }
    }
    if (const auto* c = s.if_contains("const"); c != nullptr && *c != v) {
        return at(path) + "expected " + json::serialize(*c);
    }
    if (v.is_number()) {
        const double x = v.to_number<double>();
        if (auto m = number(s.if_contains("minimum")); m && x < *m) {
            return at(path) + "must be at least " + json::serialize(s.at("minimum"));
        }
        if (auto m = number(s.if_contains("maximum")); m && x > *m) {
            return at(path) + "must be at most " + json::serialize(s.at("maximum"));
        }
        if (auto m = number(s.if_contains("exclusiveMinimum")); m && x <= *m) {
            return at(path) + "must be more than " + json::serialize(s.at("exclusiveMinimum"));
        }
        if (auto m = number(s.if_contains("exclusiveMaximum")); m && x >= *m) {
            return at(path) + "must be less than " + json::serialize(s.at("exclusiveMaximum"));
        }
    }
    if (v.is_string()) {
        const auto n = code_points(v.as_string());
        if (auto m = count(s.if_contains("minLength")); m && n < *m) {
            return at(path) + "must be at least " + std::to_string(*m) + " characters";
        }
        if (auto m = count(s.if_contains("maxLength")); m && n > *m) {
            return at(path) + "must be at most " + std::to_string(*m) + " characters";
        }
    }
    if (v.is_array()) {
        const auto& a = v.as_array();
        if (auto m = count(s.if_contains("minItems")); m && a.size() < *m) {
            return at(path) + "must have at least " + std::to_string(*m) + " items";
        }
        if (auto m = count(s.if_contains("maxItems")); m && a.size() > *m) {
            return at(path) + "must have at most " + std::to_string(*m) + " items";
        }
        if (const auto* items = s.if_contains("items")) {
            for (std::size_t i = 0; i < a.size(); ++i) {
                if (auto why = check(a[i], *items, path + "/" + std::to_string(i))) {
                    return why;
                }
            }
        }
    }
    if (v.is_object()) {
        const auto& o = v.as_object();
        const json::object* props = nullptr;
        if (const auto* p = s.if_contains("properties"); p != nullptr && p->is_object()) {
            props = &p->as_object();
        }
        if (const auto* r = s.if_contains("required"); r != nullptr && r->is_array()) {
            for (const auto& name : r->as_array()) {
                if (name.is_string() && !o.contains(name.as_string())) {
                    return at(path) + "\"" + std::string(name.as_string()) + "\" is required";
                }
            }
        }
        const auto* extra = s.if_contains("additionalProperties");
        for (const auto& [k, child] : o) {
            const std::string child_path = path + "/" + std::string(k);
            if (props != nullptr && props->contains(k)) {
                if (auto why = check(child, props->at(k), child_path)) {
                    return why;
                }
            } else if (extra != nullptr) {
                if (extra->is_bool() && !extra->as_bool()) {
                    return at(path) + "\"" + std::string(k) + "\" is not allowed";
                }
                if (auto why = check(child, *extra, child_path)) {
                    return why;
                }
            }
        }
    }
    if (const auto* all = s.if_contains("allOf"); all != nullptr && all->is_array()) {
        for (const auto& one : all->as_array()) {
            if (auto why = check(v, one, path)) {
                return why;
            }
        }
    }
    if (const auto* any = s.if_contains("anyOf"); any != nullptr && any->is_array()) {
        if (successes(v, any->as_array(), path) == 0) {
            return at(path) + "matches none of the allowed shapes (anyOf)";
        }
    }
    if (const auto* one = s.if_contains("oneOf"); one != nullptr && one->is_array()) {
        if (successes(v, one->as_array(), path) != 1) {
            return at(path) + "must match exactly one of the allowed shapes (oneOf)";
        }
    }
    if (const auto* no = s.if_contains("not"); no != nullptr && !check(v, *no, path)) {
        return at(path) + "matches a shape that is not allowed (not)";
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::string> schema_violation(const json::value& v, const json::value& schema) {
    return check(v, schema, "");
}

}  // namespace wuhu::tools
