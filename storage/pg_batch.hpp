// The rows PostgreSQL keeps a session's log in: one row per commit for its transcript entries,
// and one per commit and lane for its journal facts, rather than one per value. A turn commits
// 4 times but appends 9 values, and each row costs PostgreSQL a tuple header, an index entry and
// their WAL, so fewer rows is less disk and less work per commit.
//
// A row's key (seq) is its last value's key (an entry's `id`, a fact's `seq`) and its `at` the
// last value's time. Its body is a JSON array of the codec's objects without their key, which
// follows from the row's key and the position (keys are consecutive), and without an `at` equal
// to the row's. A row written before batches holds one object, whole: it loads as it is.
//
// Keying a row by its last value serves the catch-up of a subscription: the rows holding values
// after `n` are exactly those with seq > n, the first of them perhaps with earlier values too.
#pragma once

#include <boost/json.hpp>
#include <boost/system/result.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace wuhu::storage {

// The values of one commit (its entries, or one lane's facts), made into a row.
class batch_row {
  public:
    // `key_name`: "id" for entries, "seq" for facts.
    explicit batch_row(const char* key_name) : key_name_(key_name) {}

    // Appends the codec's object of a value whose key and time are `key` and `at`.
    void add(boost::json::value v, std::uint64_t key, std::int64_t at);
    bool empty() const { return values_.empty(); }
    std::uint64_t key() const { return key_; }
    std::int64_t at() const { return at_; }
    // The row's body: `[{...},...]`.
    std::string body() const;

  private:
    const char* key_name_;
    std::vector<boost::json::object> values_;
    std::uint64_t key_ = 0;
    std::int64_t at_ = 0;
};

// Appends to `out` the objects of a stored row with their keys and times restored, those with a
// key after `after` only. Anything batch_row would not have written (or, for a row of one whole
// value, a key or time other than its row's) is `corrupt`.
boost::system::result<void> expand_row(std::string_view body, std::uint64_t key, std::int64_t at,
                                       const char* key_name, std::uint64_t after,
                                       std::vector<boost::json::value>& out);

}  // namespace wuhu::storage
