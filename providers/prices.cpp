#include "providers/prices.hpp"

#include <boost/json.hpp>

#include <cmath>

namespace wuhu::providers {

namespace json = boost::json;

namespace {

// Dollars per million tokens as nano-dollars per million; nullopt when not a price.
std::optional<std::uint64_t> nano_of(const json::value& v) {
    double d = 0;
    if (v.is_double()) {
        d = v.as_double();
    } else if (v.is_int64()) {
        d = static_cast<double>(v.as_int64());
    } else if (v.is_uint64()) {
        d = static_cast<double>(v.as_uint64());
    } else {
        return std::nullopt;
    }
    if (!std::isfinite(d) || d < 0 || d > 1e6) {
        return std::nullopt;
    }
    return static_cast<std::uint64_t>(std::llround(d * 1e9));
}

}  // namespace

boost::system::result<price_table, std::string> parse_prices(std::string_view json_text) {
    boost::system::error_code ec;
    auto v = json::parse(json_text, ec);
    if (ec || !v.is_object()) {
        return std::string("not a JSON object");
    }
    price_table out;
    const auto* prices = v.as_object().if_contains("prices");
    if (prices == nullptr) {
        return out;
    }
    if (!prices->is_object()) {
        return std::string("\"prices\" must be an object of models");
    }
    for (const auto& [model, p] : prices->as_object()) {
        const std::string name(model);
        if (name.empty() || name.size() > 128) {
            return std::string("a price's model must be 1-128 bytes");
        }
        if (!p.is_object() || p.as_object().empty()) {
            return "price of \"" + name +
                   "\": an object of input, cached_input, cache_write, output";
        }
        session::model_prices mp;
        for (const auto& [kind, value] : p.as_object()) {
            auto nano = nano_of(value);
            std::uint64_t* field = kind == "input"          ? &mp.input
                                   : kind == "cached_input" ? &mp.cached_input
                                   : kind == "cache_write"  ? &mp.cache_write
                                   : kind == "output"       ? &mp.output
                                                            : nullptr;
            if (field == nullptr) {
                return "price of \"" + name + "\": unknown kind \"" + std::string(kind) +
                       "\" (input, cached_input, cache_write, output)";
            }
            if (!nano) {
                return "price of \"" + name + "\"." + std::string(kind) +
                       ": dollars per million tokens, a number from 0 to 1000000";
            }
            *field = *nano;
        }
        out.emplace(name, mp);
    }
    return out;
}

const session::model_prices* price_for(const price_table& t, std::string_view model) {
    if (auto it = t.find(model); it != t.end()) {
        return &it->second;
    }
    const session::model_prices* best = nullptr;
    std::size_t best_size = 0;
    for (const auto& [key, p] : t) {
        if (key.size() > best_size && model.size() > key.size() && model.starts_with(key) &&
            model[key.size()] == '-') {
            best = &p;
            best_size = key.size();
        }
    }
    return best;
}

std::uint64_t cost_for(const price_table& t, const session::token_usage& u,
                       std::string_view reported, std::string_view asked) {
    const auto* p = price_for(t, reported);
    if (p == nullptr && !asked.empty()) {
        p = price_for(t, asked);
    }
    return p != nullptr ? session::cost_of(u, *p) : 0;
}

void price(session::assistant_message& m, const price_table& t, std::string_view asked) {
    m.cost = cost_for(t, m.usage, m.model, asked);
}

}  // namespace wuhu::providers
