// The PostgreSQL store's pool of connections (postgres_store.hpp: at most `pool_size`, each
// set to the store's schema, timeouts and prepared statements), and a fix of libpqxx 6.4.
#include "storage/postgres_pool.hpp"

#include "storage/postgres_schema.hpp"

#include <dlfcn.h>
#include <libpq-fe.h>

// libpqxx 6.4 leaks a PGresult whenever a connection breaks under a query: make_result()
// asks for the client encoding before it wraps the result (whose deleter would free it), and
// PQclientEncoding() answers -1 on a broken connection, so encoding_id() throws first (jtv/libpqxx
// #500, fixed in 7.7; Debian 12 ships 6.4.5). LeakSanitizer then fails every worker that saw a
// database outage. This definition takes libpq's place for libpqxx (it is in the executable):
// on a broken connection it answers the encoding the connection had, libpqxx wraps the result,
// and its own check then reports the broken connection, freeing the result on the way.
extern "C" int pg_char_to_encoding(const char* name);  // exported by libpq

extern "C" int PQclientEncoding(const PGconn* conn) {
    using real_fn = int (*)(const PGconn*);
    static const auto real = reinterpret_cast<real_fn>(dlsym(RTLD_NEXT, "PQclientEncoding"));
    const int enc = real(conn);
    if (enc != -1 || conn == nullptr) {
        return enc;
    }
    const char* name = PQparameterStatus(conn, "client_encoding");
    const int had = name != nullptr ? pg_char_to_encoding(name) : -1;
    return had >= 0 ? had : 0;  // 0: SQL_ASCII, only to name a result about to be discarded
}

namespace wuhu::storage {

std::unique_ptr<postgres_store::connection> postgres_store::connect() {
    auto c = std::make_unique<connection>(options_.dsn);
    {
        pqxx::nontransaction n(c->c);
        n.exec0("SET search_path TO " + options_.schema);
        n.exec0("SET synchronous_commit TO on");
    }
    set_pg_timeouts(c->c, options_.timeouts);
    prepare_postgres_statements(c->c);
    return c;
}

postgres_store::pooled postgres_store::acquire() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, options_.acquire_timeout,
                      [&] { return !idle_.empty() || total_ < options_.pool_size; })) {
        throw pqxx::broken_connection("no pooled connection became free in time");
    }
    if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        return pooled(*this, std::move(c));
    }
    ++total_;
    lock.unlock();
    try {
        return pooled(*this, connect());
    } catch (...) {
        std::lock_guard again(mu_);
        --total_;
        cv_.notify_one();
        throw;
    }
}

void postgres_store::give_back(std::unique_ptr<connection> c, health h) {
    std::lock_guard lock(mu_);
    if (h == health::broken || !c->c.is_open()) {
        // One connection broke: the server went away or dropped its connections, and the
        // idle ones (likely broken too) would each fail one more operation. They are opened
        // afresh when needed.
        total_ -= 1 + idle_.size();
        idle_.clear();
    } else {
        idle_.push_back(std::move(c));
    }
    cv_.notify_one();
}

}  // namespace wuhu::storage
