// The session store: what the owner of a session uses to load it and to persist every durable
// transition.
//
// `session_store` is a backend (in-memory, per-session SQLite, PostgreSQL) chosen at run time.
// `open(sid, epoch)` fences the session at `epoch` and returns a `session_log`, the handle one
// owner uses for one session. Each operation of a session_log is one atomic transaction that
// checks the epoch (lease_lost for a stale owner), records what the pure rules decided, and
// returns those actions; the caller then applies them with the reducer. So:
//
//     apply_actions(op(before).actions, before) == load()     after every operation
//
// Operations take the owner's current state: the owner is the single writer, and the fence
// guarantees nobody else wrote since it loaded. An operation that records nothing (a duplicate
// enqueue, a repeated cancel) does not touch the store.
//
// A session_log belongs to one owner at a time and is not thread-safe; a session_store is
// thread-safe.
#pragma once

#include "session/patch.hpp"
#include "session/rules.hpp"
#include "session/state.hpp"
#include "session/summary.hpp"
#include "storage/errc.hpp"

#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace wuhu::storage {

using session::action_list;
using session::lease_epoch;
using session::session_id;
using session::session_state;
using session::unix_ms;
template <class T>
using result = boost::system::result<T>;

// A session as the store's index lists it (the recovery sweep and the fleet view): kept in the
// commit's own transaction on PostgreSQL, in the catalog after the commit on SQLite (a hint
// there; the session file is authoritative).
struct catalog_entry {
    session_id id;
    session::session_summary summary;
    bool operator==(const catalog_entry&) const = default;
};

// Which sessions sessions() lists, in id order (byte order).
struct catalog_query {
    std::optional<session_id> after;  // only ids after this one
    std::size_t limit = std::numeric_limits<std::size_t>::max();
    std::optional<bool> has_work;
    // Only sessions that need an owner by this time even when nobody asks for them: work to
    // do and not paused (a paused session makes no progress until `resume`, which loads
    // it), or a timer due by then.
    std::optional<unix_ms> needing_owner_by;
    // Only these sessions (those that do not exist are left out).
    std::optional<std::vector<session_id>> ids;
    // Only the sessions of this tenant (keys `<tenant>.<id>`); "": those of no tenant.
    std::optional<std::string> tenant;
    // Only the sessions with (true) or without (false) calls waiting for approval.
    std::optional<bool> awaiting_approval;
    // In order of cost, the highest first (ties in id order), instead of id order: with
    // `after_cost`, the page starts after the row (`after_cost`, `after`) (`after` absent: at
    // the first row of that cost).
    bool by_cost = false;
    std::optional<std::uint64_t> after_cost;
};

// Whether the query's filters (not `after`, `after_cost` or `limit`) let the entry through.
bool matches(const catalog_query& q, const catalog_entry& e);
// Whether the entry comes after the query's cursor, in the query's order.
bool after_cursor(const catalog_query& q, const catalog_entry& e);
// The entries in the query's order (by id, or by cost, highest first, then id).
void in_query_order(const catalog_query& q, std::vector<catalog_entry>& entries);

// Whether a session is in a tenant scope (catalog_query::tenant, ownership's lease_query):
// nullopt every session; "" the sessions of no tenant; a name that tenant's.
bool in_scope(const std::optional<std::string>& tenant, const session_id& id);

// Where a scan in key order of the sessions after `after` in a scope starts and stops: keys
// greater than `after` and, for a tenant, less than `before` (its keys are the range from
// `<tenant>.` to `<tenant>/`). The sessions of no tenant are spread among the others: no
// narrowing ("" before).
struct key_range {
    std::string after;
    std::string before;
};
key_range range_of(const std::optional<std::string>& tenant,
                   const std::optional<session_id>& after);

class session_log {
  public:
    session_log(session_id id, lease_epoch epoch) : id_(std::move(id)), epoch_(epoch) {}
    virtual ~session_log() = default;
    session_log(const session_log&) = delete;
    session_log& operator=(const session_log&) = delete;

    const session_id& id() const { return id_; }
    lease_epoch epoch() const { return epoch_; }

    // The stored state (empty for a new session). The first load of a handle whose open
    // created the session reads nothing: a session made a moment ago by this open, under this
    // epoch, is the empty one (issue 36: that read was most of a new session's statements).
    result<session_state> load() {
        if (std::exchange(created_, false)) {
            return session_state{};
        }
        return do_load();
    }

    // Backfill for subscribe(since:): the stable patch from `from` to the stored version, read
    // from the store. Registers carry the stored settings and durable status.
    result<session::patch> since(const session::version_vector& from) { return do_since(from); }

    // Persists `actions`, planned by the session's rules on `before` (session/rules.hpp,
    // session/transition.hpp), in one transaction that checks the epoch and that the stored
    // version is `before.version()`; no IO when there are none. What the loop uses.
    result<void> commit(const session_state& before, const action_list& actions);

    // The rules' plan and its commit in one call (tests, benchmarks and tools; the loop plans on
    // its own executor and calls commit()).
    result<session::enqueue_outcome> enqueue(const session_state& before, session::enqueue_input in,
                                             unix_ms at);
    result<session::cancel_outcome> cancel(const session_state& before, session::lane l,
                                           const session::queue_item_id& id, unix_ms at);
    // Fused operations (session/rules.hpp): adjacent steps of a turn in one transaction.
    result<session::enqueue_outcome> enqueue_and_drain(const session_state& before,
                                                       session::enqueue_input in, unix_ms at);
    result<action_list> append_response(const session_state& before, session::assistant_message m,
                                        const std::vector<session::tool_call_id>& starting,
                                        bool settle, unix_ms at);
    result<action_list> tool_steps(const session_state& before,
                                   std::vector<session::entry_body> steps, bool drain,
                                   unix_ms at);
    result<action_list> drain(const session_state& before, session::checkpoint c, unix_ms at);
    result<action_list> append_assistant(const session_state& before, session::assistant_message m,
                                         unix_ms at);
    result<action_list> tool_will_execute(const session_state& before,
                                          const session::tool_call_id& id, unix_ms at);
    result<action_list> tool_did_execute(const session_state& before, session::tool_result r,
                                         unix_ms at);
    result<action_list> append_compaction(const session_state& before, session::compaction c,
                                          unix_ms at);
    result<action_list> append_marker(const session_state& before,
                                      std::variant<session::interruption, session::diagnostic> m,
                                      unix_ms at);
    result<action_list> set_settings(const session_state& before, session::settings s);
    result<action_list> mark_idle(const session_state& before);
    result<action_list> set_paused(const session_state& before, bool paused);
    result<action_list> schedule_timer(const session_state& before, session::timer t,
                                       unix_ms at);
    result<action_list> fire_timer(const session_state& before, const session::queue_item_id& id,
                                   unix_ms at);

    // For a store's open: whether this handle's open created the session (nothing was stored
    // before it, at any epoch).
    void set_created(bool created) { created_ = created; }

  protected:
    virtual result<session_state> do_load() = 0;
    virtual result<session::patch> do_since(const session::version_vector& from) = 0;
    // Persists `actions` (non-empty) in one transaction that checks the epoch and that the
    // stored version is `before.version()`. All or nothing.
    virtual result<void> do_commit(const session_state& before, const action_list& actions) = 0;

    // For wrappers: commit through another log's backend.
    static result<void> forward_commit(session_log& inner, const session_state& before,
                                       const action_list& actions) {
        inner.created_ = false;  // as commit() does: its next load reads what this stored
        return inner.do_commit(before, actions);
    }

  private:
    result<action_list> commit_plan(const session_state& before, result<action_list> plan);

    session_id id_;
    lease_epoch epoch_;
    bool created_ = false;  // until the first load or commit
};

// open(): a command that may create the session, or a read that must find it.
enum class open_mode { create, existing };

class session_store {
  public:
    virtual ~session_store() = default;
    session_store() = default;
    session_store(const session_store&) = delete;
    session_store& operator=(const session_store&) = delete;

    // Fences the session at `epoch` (stored epoch := epoch) and returns its handle. lease_lost
    // when the stored epoch is higher, or when the session was removed at `epoch` or later (a
    // request that waited behind the removal must not bring it back under the old lease).
    // Creates the session if it does not exist, or answers not_found (mode existing).
    result<std::unique_ptr<session_log>> open(const session_id& id, lease_epoch epoch,
                                              open_mode mode = open_mode::create) {
        return do_open(id, epoch, mode);
    }

    // Removes the session's data, fenced at `epoch` like every write: lease_lost when a newer
    // owner holds the session (its stored epoch is higher). Every handle opened before (in any
    // process) is fenced out: its writes fail with lease_lost, and a later open() starts a new,
    // empty session. Idempotent: removing a missing session succeeds.
    virtual result<void> remove(const session_id& id, lease_epoch epoch) = 0;

    // Whether the session has been created (and not removed since). Creates nothing.
    virtual result<bool> exists(const session_id& id) = 0;

    // The stored state of the session, read without a lease: it fences nothing and creates
    // nothing (nullopt when the session does not exist). For a read of a session nobody owns:
    // answered from the store, it does not make this worker its owner. A snapshot: an owner
    // may commit after it.
    virtual result<std::optional<session_state>> read(const session_id& id) = 0;

    // The stored sessions that match `q`, from the index, in id order.
    virtual result<std::vector<catalog_entry>> sessions(const catalog_query& q) = 0;

    // "memory", "sqlite", "postgres".
    virtual std::string_view backend() const = 0;

    // Writes of the store's index that failed and wait for a later one (the SQLite catalog,
    // written after each commit: locked past its busy timeout, or a full disk). The commits
    // themselves succeeded; the sweep may find their sessions late. 0 where the index is
    // written in the commit's own transaction.
    virtual std::size_t index_write_failures() const { return 0; }

    // The process is stopping: it unloads every session next. Tidying that only saves disk
    // until a session's next use (the SQLite store's WALs of files closed early) is skipped,
    // so that a stop does not wait for it.
    virtual void stopping() {}

    // Gives back what this process holds open for sessions no operation has used since
    // `unused_since`, loaded or not (the SQLite store's files: a connection, its page cache and
    // its shared memory each; the next operation opens the file again). Store IO (SQLite
    // checkpoints each file's WAL): on a store thread. Returns how many it closed, which may be
    // fewer than there are (a call is bounded; call again).
    virtual std::size_t close_idle(std::chrono::steady_clock::time_point /*unused_since*/) {
        return 0;
    }

  protected:
    virtual result<std::unique_ptr<session_log>> do_open(const session_id& id, lease_epoch epoch,
                                                         open_mode mode) = 0;
};

// A store that passes every call to another one (LevelDB's EnvWrapper): wrappers such as
// faulty_store override only what they change.
class forwarding_store : public session_store {
  public:
    explicit forwarding_store(session_store& target) : target_(target) {}

    result<void> remove(const session_id& id, lease_epoch epoch) override {
        return target_.remove(id, epoch);
    }
    result<bool> exists(const session_id& id) override { return target_.exists(id); }
    result<std::optional<session_state>> read(const session_id& id) override {
        return target_.read(id);
    }
    result<std::vector<catalog_entry>> sessions(const catalog_query& q) override {
        return target_.sessions(q);
    }
    std::string_view backend() const override { return target_.backend(); }
    std::size_t index_write_failures() const override { return target_.index_write_failures(); }
    void stopping() override { target_.stopping(); }
    std::size_t close_idle(std::chrono::steady_clock::time_point unused_since) override {
        return target_.close_idle(unused_since);
    }

  protected:
    result<std::unique_ptr<session_log>> do_open(const session_id& id, lease_epoch epoch,
                                                 open_mode mode) override {
        return target_.open(id, epoch, mode);
    }
    session_store& target() { return target_; }

  private:
    session_store& target_;
};

}  // namespace wuhu::storage
