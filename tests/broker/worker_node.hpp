// One worker in-process for the NATS tests: the node wuhu-worker runs (app/node.hpp) with a
// SQLite store and the SQLite catalog lease in `data_dir` (several nodes on one dir are workers
// of one host; through a faulty_store, so that a test can stall its disk, and a lease store
// whose acquisitions a test can hold), the scripted model, its own NATS connection, and a
// thread running it.
#pragma once

#include "app/node.hpp"
#include "ownership/sqlite_lease.hpp"
#include "providers/scripted_provider.hpp"
#include "runtime/log.hpp"
#include "storage/faulty_store.hpp"
#include "storage/sqlite_store.hpp"
#include "tests/support/forwarding_lease.hpp"

#include <boost/asio/post.hpp>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

namespace wuhu::testing {

// A lease store whose acquisitions wait while hold() is on (a slow catalog, a far database).
class holding_lease final : public forwarding_lease {
  public:
    explicit holding_lease(ownership::lease_store& inner) : forwarding_lease(inner) {}
    void hold() {
        std::lock_guard lock(mu_);
        holding_ = true;
    }
    void let_go() {
        std::lock_guard lock(mu_);
        holding_ = false;
        cv_.notify_all();
    }
    // Acquisitions waiting now.
    int held() const {
        std::lock_guard lock(mu_);
        return waiting_;
    }

    ownership::result<ownership::acquisition> acquire(const session::session_id& id,
                                                      std::string_view owner,
                                                      std::chrono::milliseconds ttl) override {
        {
            std::unique_lock lock(mu_);
            ++waiting_;
            cv_.wait(lock, [this] { return !holding_; });
            --waiting_;
        }
        return forwarding_lease::acquire(id, owner, ttl);
    }

  private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool holding_ = false;
    int waiting_ = 0;
};

struct node_options {
    std::string nats_url;
    std::string prefix;
    std::filesystem::path data_dir;
    std::string worker_id = "w1";
    std::string script;
    std::size_t max_reply_bytes = 0;
    std::chrono::milliseconds drain_timeout{10000};
    std::optional<worker::loop_options> loop{};  // none: the node's defaults
    std::string metrics_addr{};                   // none: no metrics port
    std::shared_ptr<spdlog::logger> log{};        // none: JSON lines on stderr
    protocol::tenancy tenancy{};                  // none: no tenants
    // Changes the node's options last (bounds, say).
    std::function<void(app::node_options&)> tune{};
};

class worker_node {
  public:
    explicit worker_node(node_options o)
        : options_(std::move(o)),
          store_(storage::sqlite_options{options_.data_dir}),
          stalling_store_(store_),
          leases_(options_.data_dir),
          holding_leases_(leases_),
          nats_(options_.nats_url, options_.worker_id),
          node_(stalling_store_, holding_leases_, nats_, provider_factory(), broker_options(),
                options_.log ? options_.log : runtime::json_logger(options_.worker_id)) {
        thread_ = std::thread([this] { node_.run(); });
    }
    worker_node(const worker_node&) = delete;

    // A graceful stop, as on SIGTERM: requests taken are answered, leases released.
    ~worker_node() {
        node_.stop();
        thread_.join();
    }

    // Runs `f` on the node's executor and waits for it.
    template <class F>
    auto on_executor(F f) -> decltype(f()) {
        std::packaged_task<decltype(f())()> task(std::move(f));
        auto done = task.get_future();
        boost::asio::post(node_.executor(), [&task] { task(); });
        return done.get();
    }

    bool has_loaded(const std::string& sid) {
        return on_executor(
            [&] { return node_.registry().contains(session::session_id::parse_key(sid).value()); });
    }
    std::size_t forwarded() const { return node_.requests().forwarded(); }
    const std::string& id() const { return options_.worker_id; }
    app::node& node() { return node_; }
    // The store the node commits through: hold_commits() stalls its disk.
    storage::faulty_store& store() { return stalling_store_; }
    ownership::lease_store& leases() { return leases_; }
    // The lease store the node acquires through: hold() makes its acquisitions wait.
    holding_lease& lease_gate() { return holding_leases_; }

  private:
    app::node::provider_factory provider_factory() const {
        auto script = providers::parse_script(options_.script).value();
        return [script](runtime::clock& clk) {
            return std::make_unique<providers::scripted_provider>(script, clk);
        };
    }
    app::node_options broker_options() const {
        app::node_options o;
        o.worker_id = options_.worker_id;
        o.server.prefix = options_.prefix;
        o.server.max_reply_bytes = options_.max_reply_bytes;
        o.server.tenancy = options_.tenancy;
        o.drain_timeout = options_.drain_timeout;
        o.store_threads = 2;
        if (options_.loop) {
            o.loop = *options_.loop;
        }
        o.metrics_addr = options_.metrics_addr;
        if (options_.tune) {
            options_.tune(o);
        }
        return o;
    }

    node_options options_;
    storage::sqlite_store store_;
    storage::faulty_store stalling_store_;
    ownership::sqlite_lease leases_;
    holding_lease holding_leases_;
    nats::connection nats_;
    app::node node_;
    std::thread thread_;
};

}  // namespace wuhu::testing
