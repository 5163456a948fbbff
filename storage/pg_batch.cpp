#include "storage/pg_batch.hpp"

#include "session/assert.hpp"
#include "session/codec.hpp"
#include "storage/errc.hpp"

namespace wuhu::storage {

namespace json = boost::json;

void batch_row::add(json::value v, std::uint64_t key, std::int64_t at) {
    // The reducer appends with consecutive keys (a row could not say otherwise).
    WUHU_ASSERT(values_.empty() || key == key_ + 1, "a batch row's values have consecutive keys");
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

bool is(const json::value& v, std::uint64_t n) {
    return v.is_uint64()  ? v.get_uint64() == n
           : v.is_int64() ? v.get_int64() >= 0 && static_cast<std::uint64_t>(v.get_int64()) == n
                          : false;
}

}  // namespace

boost::system::result<void> expand_row(std::string_view body, std::uint64_t key, std::int64_t at,
                                       const char* key_name, std::uint64_t after,
                                       std::vector<json::value>& out) {
    auto v = session::parse_json(body);
    if (!v || key == 0) {
        return errc::corrupt;
    }
    if (v->is_object()) {  // written before batches: one value, whole, keyed and timed as its row
        const auto* k = v->as_object().if_contains(key_name);
        const auto* t = v->as_object().if_contains("at");
        if (k == nullptr || !is(*k, key) || t == nullptr || !t->is_int64() ||
            t->get_int64() != at) {
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
    // Exactly what batch_row writes: no keys, and no time on the last value (the row's).
    auto& values = v->as_array();
    std::uint64_t k = key - values.size();
    for (auto& e : values) {
        ++k;
        auto* o = e.if_object();
        if (o == nullptr || o->contains(key_name) || (k == key && o->contains("at"))) {
            return errc::corrupt;
        }
        if (k <= after) {
            continue;
        }
        o->emplace(key_name, k);
        if (!o->contains("at")) {
            o->emplace("at", at);
        }
        out.push_back(std::move(e));
    }
    return {};
}

}  // namespace wuhu::storage
