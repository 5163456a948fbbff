// One worker in-process for the NATS tests: a SQLite store and the SQLite catalog lease in
// `data_dir` (several nodes on one dir are workers of one host), the scripted model, a server
// on its own NATS connection, and a thread running its io_context.
#pragma once

#include "broker/server.hpp"
#include "ownership/sqlite_lease.hpp"
#include "storage/sqlite_store.hpp"
#include "worker/scripted_provider.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <future>
#include <thread>

namespace wuhu::testing {

struct node_options {
    std::string nats_url;
    std::string prefix;
    std::filesystem::path data_dir;
    std::string worker_id = "w1";
    std::string script;
    std::size_t max_reply_bytes = 0;
};

class worker_node {
  public:
    explicit worker_node(node_options o)
        : options_(std::move(o)),
          store_(storage::sqlite_options{options_.data_dir}),
          leases_(options_.data_dir),
          keeper_(leases_, options_.worker_id, std::chrono::seconds(15)),
          nats_(options_.nats_url, options_.worker_id) {
        worker::add_builtin_tools(tools_);
        broker::server_options so;
        so.prefix = options_.prefix;
        so.max_reply_bytes = options_.max_reply_bytes;
        server_ = std::make_unique<broker::server>(io_.get_executor(), nats_, keeper_, so);
        registry_ = std::make_unique<worker::session_registry>(
            io_.get_executor(), store_,
            [this] {
                return std::make_unique<worker::scripted_provider>(
                    worker::parse_script(options_.script).value(), clock_);
            },
            tools_, clock_, loop_options(), server_->epochs(), server_->publisher());
        server_->start(*registry_);
        thread_ = std::thread([this] { io_.run(); });
    }
    worker_node(const worker_node&) = delete;

    // Stops every session loop and releases the leases (a graceful shutdown).
    ~worker_node() {
        on_executor([this] {
            server_->stop();
            registry_->stop();
        });
        // Let the loops return (a commit in flight on the store pool completes first).
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (on_executor([this] { return registry_->running(); }) > 0 &&
               std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        on_executor([this] { keeper_.release_all(); });
        work_.reset();
        io_.stop();
        thread_.join();
        store_pool_.join();
        registry_.reset();
    }

    // Runs `f` on the node's executor and waits for it.
    template <class F>
    auto on_executor(F f) -> decltype(f()) {
        std::packaged_task<decltype(f())()> task(std::move(f));
        auto done = task.get_future();
        boost::asio::post(io_, [&task] { task(); });
        return done.get();
    }

    bool has_loaded(const std::string& sid) {
        return on_executor(
            [&] { return registry_->contains(session::session_id::parse(sid).value()); });
    }
    std::size_t forwarded() const { return server_->forwarded(); }
    const std::string& id() const { return options_.worker_id; }

  private:
    // As in wuhu-worker: client commands commit on a store pool.
    worker::loop_options loop_options() {
        worker::loop_options o;
        o.store_executor = store_pool_.get_executor();
        return o;
    }

    node_options options_;
    boost::asio::io_context io_;
    boost::asio::thread_pool store_pool_{2};
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
        io_.get_executor()};
    worker::system_clock clock_;
    worker::tool_registry tools_;
    storage::sqlite_store store_;
    ownership::sqlite_lease leases_;
    ownership::keeper keeper_;
    broker::nats_client nats_;
    std::unique_ptr<broker::server> server_;
    std::unique_ptr<worker::session_registry> registry_;
    std::thread thread_;
};

}  // namespace wuhu::testing
