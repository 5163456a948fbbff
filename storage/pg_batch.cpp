#include "storage/pg_batch.hpp"

#include "session/codec.hpp"
#include "storage/errc.hpp"

#include <stdexcept>

namespace wuhu::storage {

namespace json = boost::json;

void batch_row::add(json::value v, std::uint64_t key, std::int64_t at) {
    if (!values_.empty() && key != key_ + 1) {
        // The reducer appends with consecutive keys; a row could not say otherwise.
        throw std::logic_error("a batch row's values must have consecutive keys");
    }
    values_.push_back(std::move(v.as_object()));
    key_ = key;
    at_ = at;
}

std::string batch_row::body() const {
    // Each object as the codec's serializer writes it, in its order, less the two members.
    std::string out = "[";
    for (const auto& o : values_) {
        out += out.size() > 1 ? ",{" : "{";
        bool first = true;
        for (const auto& [name, value] : o) {
            if (name == key_name_ ||
                (name == "at" && value.is_int64() && value.get_int64() == at_)) {
                continue;
            }
            out += first ? "" : ",";
            first = false;
            out += json::serialize(name);
            out += ':';
            out += json::serialize(value);
        }
        out += '}';
    }
    return out + "]";
}

namespace {

// Gives `o` its key and, when it has none, the row's time; a key it holds must be `key`.
bool restore(json::object& o, const char* key_name, std::uint64_t key, std::int64_t at) {
    if (const auto* k = o.if_contains(key_name)) {
        const bool same = k->is_uint64()  ? k->get_uint64() == key
                          : k->is_int64() ? k->get_int64() >= 0 &&
                                                static_cast<std::uint64_t>(k->get_int64()) == key
                                          : false;
        if (!same) {
            return false;
        }
    } else {
        o.emplace(key_name, key);
    }
    if (!o.contains("at")) {
        o.emplace("at", at);
    }
    return true;
}

}  // namespace

boost::system::result<void> expand_row(std::string_view body, std::uint64_t key, std::int64_t at,
                                       const char* key_name, std::uint64_t after,
                                       std::vector<json::value>& out) {
    auto v = session::parse_json(body);
    if (!v) {
        return errc::corrupt;
    }
    if (v->is_object()) {  // written before batches: one value, whole
        if (!restore(v->as_object(), key_name, key, at)) {
            return errc::corrupt;
        }
        if (key > after) {
            out.push_back(std::move(*v));
        }
        return {};
    }
    if (!v->is_array() || v->as_array().empty() || v->as_array().size() > key) {
        return errc::corrupt;
    }
    auto& values = v->as_array();
    std::uint64_t k = key - values.size();
    for (auto& e : values) {
        ++k;
        if (!e.is_object() || !restore(e.as_object(), key_name, k, at)) {
            return errc::corrupt;
        }
        if (k > after) {
            out.push_back(std::move(e));
        }
    }
    return {};
}

}  // namespace wuhu::storage
