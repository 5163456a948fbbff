// The log of one session in its SQLite file: loads, patches since a version, and commits
// fenced by the epoch the file holds.
#include "storage/sqlite_log.hpp"

#include "session/codec.hpp"
#include "session/overloaded.hpp"
#include "session/summary.hpp"
#include "storage/rows.hpp"
#include "storage/sqlite_catalog.hpp"
#include "storage/sqlite_files.hpp"
#include "storage/sqlite_open_files.hpp"

#include <algorithm>

namespace wuhu::storage {

namespace s = wuhu::session;
namespace json = boost::json;

namespace sqlite {

std::string meta(db& db, const char* key) {
    auto& q = db.prepare("SELECT v FROM meta WHERE k = ?1");
    q.bind(1, std::string_view(key));
    std::string out = q.step() ? std::string(q.text(0)) : std::string();
    q.reset();
    return out;
}

void set_meta(db& db, const char* key, std::string_view value) {
    auto& q = db.prepare(
        "INSERT INTO meta (k, v) VALUES (?1, ?2) "
        "ON CONFLICT (k) DO UPDATE SET v = excluded.v");
    q.bind(1, std::string_view(key)).bind(2, value).run();
}

result<session_state> load_rows(db& db) {
    state_builder b;
    {
        auto& q = db.prepare("SELECT body FROM transcript ORDER BY seq");
        while (q.step()) {
            b.entry(q.text(0));
        }
    }
    {
        auto& q = db.prepare("SELECT lane, body FROM journal ORDER BY lane, seq");
        while (q.step()) {
            auto lane = q.int64(0);
            if (lane < 0 || lane > 2) {
                return errc::corrupt;
            }
            b.fact(static_cast<s::lane>(lane), q.text(1));
        }
    }
    {
        auto& q = db.prepare("SELECT body FROM timers ORDER BY id");
        while (q.step()) {
            b.timer(q.text(0));
        }
    }
    b.registers(meta(db, "settings"), meta(db, "paused") == "1", meta(db, "has_work") == "1");
    return b.finish();
}

}  // namespace sqlite

namespace {

using sqlite::meta;
using sqlite::set_meta;

std::string dump(const json::value& v) {
    return json::serialize(v);
}

// What the catalog row says while a commit from `was` to `now` is under way: the most of both
// (work if either has it, the more timers, the earlier due time). The sweep finds a session by
// its row: one that says too much costs a load (which rewrites it), one that says too little
// hides work.
s::session_summary at_most_either(const s::session_summary& was, const s::session_summary& now) {
    s::session_summary out = now;
    out.has_work = was.has_work || now.has_work;
    out.paused = was.paused && now.paused;  // the sweep skips paused sessions
    out.timers = std::max(was.timers, now.timers);
    if (was.next_timer && (!now.next_timer || *was.next_timer < *now.next_timer)) {
        out.next_timer = was.next_timer;
    }
    return out;
}

// Whether two summaries differ in what the recovery sweep reads (work, paused, timers, when
// one is due).
bool sweep_reads_differ(const s::session_summary& a, const s::session_summary& b) {
    return a.has_work != b.has_work || a.paused != b.paused || a.timers != b.timers ||
           a.next_timer != b.next_timer;
}

// One action's rows.
void write(sqlite::db& db, const s::action& a) {
    std::visit(
        s::overloaded{
            [&](const s::entry_appended& x) {
                db.prepare("INSERT INTO transcript (seq, at, body) VALUES (?1, ?2, ?3)")
                    .bind(1, static_cast<std::int64_t>(x.e.id.value))
                    .bind(2, x.e.at.value)
                    .bind(3, dump(s::to_json(x.e)))
                    .run();
            },
            [&](const s::journal_recorded& x) {
                db.prepare(
                      "INSERT INTO journal (lane, seq, at, body) "
                      "VALUES (?1, ?2, ?3, ?4)")
                    .bind(1, static_cast<std::int64_t>(s::index_of(x.in)))
                    .bind(2, static_cast<std::int64_t>(x.j.seq.value))
                    .bind(3, x.j.at.value)
                    .bind(4, dump(s::to_json(x.j)))
                    .run();
            },
            [&](const s::settings_set& x) { set_meta(db, "settings", encode_settings(x.value)); },
            [&](const s::has_work_set& x) { set_meta(db, "has_work", x.value ? "1" : "0"); },
            [&](const s::paused_set& x) { set_meta(db, "paused", x.value ? "1" : "0"); },
            [&](const s::timer_scheduled& x) {
                db.prepare("INSERT INTO timers (id, body) VALUES (?1, ?2)")
                    .bind(1, x.t.id.str())
                    .bind(2, dump(s::to_json(x.t)))
                    .run();
            },
            [&](const s::timer_cleared& x) {
                db.prepare("DELETE FROM timers WHERE id = ?1").bind(1, x.id.str()).run();
            },
        },
        a);
}

}  // namespace

sqlite_log::sqlite_log(sqlite::session_files& files, sqlite::open_files& open,
                       sqlite::catalog& catalog, session_id id, lease_epoch epoch)
    : session_log(std::move(id), epoch), files_(files), open_(open), catalog_(catalog) {}

sqlite_log::~sqlite_log() {
    open_.close_unused(id());
    catalog_.write_unwritten(id());
}

template <class F>
auto sqlite_log::with_handle(F&& f) -> std::invoke_result_t<F, sqlite::handle&> {
    try {
        auto h = open_.acquire(id(), open_mode::existing);
        if (!h) {
            return errc::lease_lost;  // the session was removed
        }
        std::lock_guard lock(h->mu);
        if (!h->db) {
            return errc::lease_lost;  // removed while this operation waited
        }
        return f(*h);
    } catch (const sqlite::error& e) {
        return sqlite::storage_error(e);
    }
}

result<session_state> sqlite_log::do_load() {
    auto loaded = with_handle([&](sqlite::handle& h) -> result<session_state> {
        auto& db = *h.db;
        // One read transaction, fenced like a write: a handle whose epoch is not the
        // file's (a newer owner, or a removal) reads nothing.
        sqlite::read_transaction read(db);
        if (meta(db, "epoch") != std::to_string(epoch().value)) {
            return errc::lease_lost;
        }
        return sqlite::load_rows(db);
    });
    if (loaded) {
        catalog_.note_loaded(id(), epoch(), s::summarize(*loaded));
    }
    return loaded;
}

result<s::patch> sqlite_log::do_since(const s::version_vector& from) {
    return with_handle([&](sqlite::handle& h) -> result<s::patch> {
        auto& db = *h.db;
        // One read transaction, so the rows and the version agree.
        sqlite::read_transaction read(db);
        auto to = decode_version(meta(db, "version"));
        if (!to) {
            return to.error();
        }
        if (!from.le(*to)) {
            return s::errc::invalid_version;
        }
        patch_rows rows;
        {
            auto& q = db.prepare("SELECT body FROM transcript WHERE seq > ?1 ORDER BY seq");
            q.bind(1, static_cast<std::int64_t>(from.transcript));
            while (q.step()) {
                rows.entries.push_back(parse_row(q.text(0)));
            }
        }
        for (s::lane l : s::all_lanes) {
            auto& q =
                db.prepare("SELECT body FROM journal WHERE lane = ?1 AND seq > ?2 ORDER BY seq");
            q.bind(1, static_cast<std::int64_t>(s::index_of(l)))
                .bind(2, static_cast<std::int64_t>(from.of(l)));
            while (q.step()) {
                rows.facts[s::index_of(l)].push_back(parse_row(q.text(0)));
            }
        }
        rows.settings_json = meta(db, "settings");
        rows.paused = meta(db, "paused") == "1";
        rows.has_work = meta(db, "has_work") == "1";
        rows.usage_json = meta(db, "usage");
        return patch_from_rows(from, *to, rows);
    });
}

result<void> sqlite_log::do_commit(const session_state& before, const action_list& actions) {
    const auto was = s::summarize(before);
    const auto now = s::summarize(before, actions);
    // The row is raised before the file's commit, and lowered after it (later: with the
    // catalog's next read, or the session's unload): a process killed between the two leaves a row
    // that says too much, never one that hides work or a timer (issue 31, defect 9).
    const auto during = at_most_either(was, now);
    if (sweep_reads_differ(during, was)) {
        // A row that cannot be written now (the catalog locked past the busy timeout, a
        // full disk) is counted and kept for the next write: the commit goes on, since the
        // catalog is a hint and the file the truth (a crash before that write leaves the
        // work to the next request, or to the scan after a reboot).
        catalog_.note(id(), epoch(), during, true);
    }
    auto r = with_handle([&](sqlite::handle& h) -> result<void> {
        auto& db = *h.db;
        sqlite::transaction tx(db);
        if (meta(db, "epoch") != std::to_string(epoch().value)) {
            return errc::lease_lost;
        }
        if (meta(db, "version") != encode_version(before.version())) {
            return errc::conflict;
        }
        files_.synced_from_now(h);
        files_.size_wal(h, id());
        for (const auto& a : actions) {
            write(db, a);
        }
        if (const auto usage = s::counted(before.usage, actions); usage != before.usage) {
            set_meta(db, "usage", dump(s::to_json(usage)));
        }
        if (now.approvals != was.approvals || now.approvals > 0) {
            // Read by the check after a reboot: a call waiting for a person has a deadline.
            // Written by each commit while one waits (a file from before it was kept gets it).
            set_meta(db, "approvals", std::to_string(now.approvals));
        }
        set_meta(db, "version", encode_version(s::advance(before.version(), actions)));
        tx.commit();
        if (files_.options().after_file_commit) {
            files_.options().after_file_commit();
        }
        return {};
    });
    if (r) {
        // Written later, lowered or not: a row that says too much costs nothing until the
        // sweep reads it, and the session's next command needs no raise meanwhile.
        catalog_.note(id(), epoch(), now, false);
    }
    return r;
}

}  // namespace wuhu::storage
