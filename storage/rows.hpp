// Rebuilding a session from stored rows, shared by the SQLite and PostgreSQL stores.
//
// The stores keep the codec's JSON of each transcript entry, journal fact and timer (SQLite one
// row per value; PostgreSQL the values of one commit in one row, storage/pg_batch.hpp), plus the
// registers. Loading feeds the values, in order, through the reducer, so a loaded state is built
// exactly like the owner's in-memory one. Anything that does not decode, or would break the
// reducer's invariants, is `corrupt` (never an abort).
#pragma once

#include "session/patch.hpp"
#include "session/state.hpp"
#include "storage/errc.hpp"

#include <boost/json.hpp>
#include <boost/system/result.hpp>

#include <string>
#include <string_view>

namespace wuhu::storage {

class state_builder {
  public:
    // Values in order: all entries by id, then each lane's facts by seq, then timers. As
    // stored text, or parsed.
    void entry(std::string_view json);
    void entry(const boost::json::value& v);
    void fact(session::lane l, std::string_view json);
    void fact(session::lane l, const boost::json::value& v);
    void timer(std::string_view json);
    void registers(std::string_view settings_json, bool paused, bool has_work);
    boost::system::result<session::session_state> finish();

  private:
    void corrupt(std::string why);
    session::session_state state_;
    std::string error_;
};

// The stable patch for backfill from values already selected by the window (from, to]:
// `entries` and `facts` hold the parsed values after `from` (see parse_row).
struct patch_rows {
    std::vector<boost::json::value> entries;
    std::array<std::vector<boost::json::value>, 3> facts;
    std::string settings_json;
    bool paused = false;
    bool has_work = false;
    std::string usage_json;  // the ledger's totals ("": none yet)
};
boost::system::result<session::patch> patch_from_rows(const session::version_vector& from,
                                                      const session::version_vector& to,
                                                      const patch_rows& rows);

// A stored value's text, parsed; null when it is not JSON (it then fails to decode: corrupt).
boost::json::value parse_row(std::string_view text);

// "t,s,st,f": the version vector as stored in a text column.
std::string encode_version(const session::version_vector& v);
boost::system::result<session::version_vector> decode_version(std::string_view s);

// The JSON stored for a session's settings register.
std::string encode_settings(const session::settings& s);

}  // namespace wuhu::storage
