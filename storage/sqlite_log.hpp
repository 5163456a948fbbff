// The log of one session in its SQLite file (internal to storage/): loads, patches since a
// version, and commits fenced by the epoch the file holds, each with the index row the catalog
// keeps for it (raised before the file's commit, lowered after).
#pragma once

#include "storage/store.hpp"

#include <type_traits>

namespace wuhu::storage {

namespace sqlite {
class catalog;
class open_files;
class session_files;
struct handle;
}  // namespace sqlite

class sqlite_log final : public session_log {
  public:
    // The session is open (fenced at `epoch`) in `open`.
    sqlite_log(sqlite::session_files& files, sqlite::open_files& open, sqlite::catalog& catalog,
               session_id id, lease_epoch epoch);
    // The session is no longer loaded here: its file is closed, unless an operation uses it,
    // and its catalog row written if a commit left it behind.
    ~sqlite_log() override;

  protected:
    result<session_state> do_load() override;
    result<session::patch> do_since(const session::version_vector& from) override;
    result<void> do_commit(const session_state& before, const action_list& actions) override;

  private:
    // f(handle) on the session's open file, under its mutex: lease_lost if the session was
    // removed, a storage error if SQLite failed.
    template <class F>
    auto with_handle(F&& f) -> std::invoke_result_t<F, sqlite::handle&>;

    sqlite::session_files& files_;
    sqlite::open_files& open_;
    sqlite::catalog& catalog_;
};

}  // namespace wuhu::storage
