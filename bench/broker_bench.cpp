// The broker on loopback, against the limits of the same machine measured in the same run:
//
//   * raw NATS request-reply round trip (an echo responder that sends at once),
//   * raw store commit (one SQLite FULL insert-and-commit),
//   * enqueue acknowledgement latency (p50, p99) through a worker: the request crosses NATS,
//     the worker commits it to its session's SQLite file, then replies. Its floor is one
//     round trip plus one commit;
//   * enqueue throughput with 8 clients on 8 sessions, against the raw commit rate;
//   * streaming delta latency: from the provider handing a text delta to the loop to a NATS
//     subscriber receiving it;
//   * the fleet view (`wuhu.admin.sessions`) with two workers of 10,000 loaded sessions each
//     (WUHU_BENCH_FLEET sets the number): a first page, a filtered page, and every page.
//
// Needs a nats-server: WUHU_BENCH_NATS_URL (or WUHU_TEST_NATS_URL); scripts/bench starts one.
//
//   broker_bench [requests]
#include "app/node.hpp"
#include "ownership/sqlite_lease.hpp"
#include "runtime/log.hpp"
#include "storage/memory_store.hpp"
#include "storage/sqlite_db.hpp"
#include "storage/sqlite_store.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

namespace {

namespace asio = boost::asio;
namespace json = boost::json;
namespace s = wuhu::session;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct stats {
    double p50_us = 0, p99_us = 0;
};

stats percentiles(std::vector<double> us) {
    std::sort(us.begin(), us.end());
    auto at = [&](double q) { return us[static_cast<std::size_t>(q * (us.size() - 1))]; };
    return {at(0.50), at(0.99)};
}

double micros(clock_type::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
}

std::filesystem::path temp_dir(const char* name) {
    std::random_device rd;
    auto p = std::filesystem::temp_directory_path() /
             (std::string(name) + "-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(p);
    return p;
}

// A provider that streams `n` deltas, each carrying the steady-clock time it was handed over.
class clock_provider final : public wuhu::providers::provider {
  public:
    explicit clock_provider(int n) : n_(n) {}
    asio::awaitable<wuhu::providers::inference_outcome> infer(
        wuhu::providers::inference_request, wuhu::providers::stream_sink& sink) override {
        asio::steady_timer t(co_await asio::this_coro::executor);
        for (int i = 0; i < n_; ++i) {
            t.expires_after(2ms);
            co_await t.async_wait(asio::use_awaitable);
            sink.text(std::to_string(clock_type::now().time_since_epoch().count()) + ";");
        }
        s::assistant_message m;
        m.text = "done";
        co_return m;
    }
    asio::awaitable<wuhu::providers::summary_outcome> summarize(
        wuhu::providers::summary_request) override {
        co_return wuhu::providers::summary_answer{"summary", {}, {}, 0};
    }

  private:
    int n_;
};

// A worker in this process (the node wuhu-worker runs): the given store, the SQLite lease, the
// clock provider, its own connection, its own thread.
struct worker {
    worker(const std::string& url, const std::filesystem::path& dir,
           wuhu::storage::session_store& store, int deltas, const std::string& id = "bench-worker",
           const std::string& prefix = "wuhu_bench")
        : leases(dir),
          nats(url, id),
          node(
              store, leases, nats,
              [deltas](wuhu::runtime::clock&) { return std::make_unique<clock_provider>(deltas); },
              options(id, prefix), quiet_logger()) {
        thread = std::thread([this] { node.run(); });
    }
    ~worker() {
        node.stop();
        thread.join();
    }
    static wuhu::app::node_options options(const std::string& id, const std::string& prefix) {
        wuhu::app::node_options o;
        o.worker_id = id;
        o.server.prefix = prefix;
        return o;
    }
    static std::shared_ptr<spdlog::logger> quiet_logger() {
        auto log = wuhu::runtime::json_logger("bench-worker");
        log->set_level(spdlog::level::warn);
        return log;
    }
    wuhu::ownership::sqlite_lease leases;
    wuhu::nats::connection nats;
    wuhu::app::node node;
    std::thread thread;
};

std::string enqueue_body(const std::string& id) {
    return R"({"lane":"steer","id":")" + id + R"(","content":"benchmark input"})";
}

}  // namespace

int main(int argc, char** argv) {
    const char* url_env = std::getenv("WUHU_BENCH_NATS_URL");
    if (url_env == nullptr || *url_env == '\0') {
        url_env = std::getenv("WUHU_TEST_NATS_URL");
    }
    if (url_env == nullptr || *url_env == '\0') {
        std::fprintf(stderr, "broker_bench: set WUHU_BENCH_NATS_URL (scripts/bench does)\n");
        return 2;
    }
    const std::string url = url_env;
    const int n = argc > 1 ? std::atoi(argv[1]) : 2000;
    const auto dir = temp_dir("wuhu-broker-bench");

    // 1. Raw NATS request-reply: an echo responder on its own connection.
    stats raw_rtt;
    {
        wuhu::nats::connection responder(url, "bench-echo");
        wuhu::nats::connection requester(url, "bench-requester");
        responder.subscribe("wuhu_bench_echo", [&responder](wuhu::nats::message m) {
            responder.publish(m.reply, m.data);
        });
        responder.flush();
        const std::string body = enqueue_body("x");
        std::vector<double> us;
        for (int i = 0; i < n; ++i) {
            auto t0 = clock_type::now();
            if (!requester.request("wuhu_bench_echo", body, 5s)) {
                std::fprintf(stderr, "broker_bench: the echo responder did not answer\n");
                return 1;
            }
            us.push_back(micros(clock_type::now() - t0));
        }
        raw_rtt = percentiles(us);
    }

    // 2. Raw store commit: one row per transaction, SQLite WAL + synchronous=FULL.
    stats raw_commit;
    double raw_commit_rate = 0;
    {
        wuhu::storage::sqlite::db db((dir / "raw.sqlite").string(), "FULL", 5000);
        db.exec("CREATE TABLE t (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)");
        std::vector<double> us;
        auto start = clock_type::now();
        for (int i = 0; i < n; ++i) {
            auto t0 = clock_type::now();
            wuhu::storage::sqlite::transaction tx(db);
            db.prepare("INSERT INTO t (body) VALUES (?1)")
                .bind(1, std::string_view(R"({"x":1})"))
                .run();
            tx.commit();
            us.push_back(micros(clock_type::now() - t0));
        }
        raw_commit_rate = n / std::chrono::duration<double>(clock_type::now() - start).count();
        raw_commit = percentiles(us);
    }

    wuhu::nats::connection client(url, "bench-client");
    // Enqueue ack latency: a paused session (input is persisted, nothing is inferred), one
    // request at a time.
    auto ack_latency = [&](const std::string& sid) -> std::optional<stats> {
        // configure creates the session (pause only changes an existing one).
        if (!client.request("wuhu_bench.session." + sid + ".configure", "{}", 10s) ||
            !client.request("wuhu_bench.session." + sid + ".pause", "{}", 10s)) {
            std::fprintf(stderr, "broker_bench: the worker did not answer\n");
            return std::nullopt;
        }
        std::vector<double> us;
        for (int i = 0; i < n; ++i) {
            auto t0 = clock_type::now();
            auto r = client.request("wuhu_bench.session." + sid + ".enqueue",
                                    enqueue_body("l" + std::to_string(i)), 10s);
            us.push_back(micros(clock_type::now() - t0));
            if (!r || r->find("\"ok\":true") == std::string::npos) {
                std::fprintf(stderr, "broker_bench: enqueue failed: %s\n",
                             r ? r->c_str() : "no reply");
                return std::nullopt;
            }
        }
        return percentiles(us);
    };

    // 3a. The same through a worker on the in-memory store: the broker's own cost.
    stats ack_memory;
    {
        wuhu::storage::memory_store memory;
        worker w(url, dir / "memory-worker", memory, 50);
        auto a = ack_latency("mem");
        if (!a) {
            return 1;
        }
        ack_memory = *a;
    }

    wuhu::storage::sqlite_store sqlite(wuhu::storage::sqlite_options{dir / "worker"});
    worker w(url, dir / "worker", sqlite, 50);
    // 3b. Through a worker on per-session SQLite.
    stats ack;
    if (auto a = ack_latency("lat")) {
        ack = *a;
    } else {
        return 1;
    }

    // 4. Throughput: 8 clients, each on its own session, each request after the previous ack.
    double throughput = 0;
    {
        constexpr int clients = 8;
        std::vector<std::unique_ptr<wuhu::nats::connection>> conns;
        for (int c = 0; c < clients; ++c) {
            conns.push_back(
                std::make_unique<wuhu::nats::connection>(url, "bench-c" + std::to_string(c)));
            const std::string sid = "wuhu_bench.session.tp" + std::to_string(c);
            conns.back()->request(sid + ".configure", "{}", 10s);
            conns.back()->request(sid + ".pause", "{}", 10s);
        }
        std::atomic<int> done{0};
        std::vector<std::thread> threads;
        auto start = clock_type::now();
        for (int c = 0; c < clients; ++c) {
            threads.emplace_back([&, c] {
                const std::string subject =
                    "wuhu_bench.session.tp" + std::to_string(c) + ".enqueue";
                for (int i = 0; i < n / clients; ++i) {
                    if (conns[c]->request(subject, enqueue_body("t" + std::to_string(i)), 10s)) {
                        ++done;
                    }
                }
            });
        }
        for (auto& t : threads) {
            t.join();
        }
        throughput = done / std::chrono::duration<double>(clock_type::now() - start).count();
    }

    // 5. Delta latency: provider -> loop -> NATS -> subscriber, 50 deltas per message.
    stats delta;
    std::size_t deltas_seen = 0;
    {
        // Owned by the subscription's handler too: events (status patches, late deltas) keep
        // coming after this section, and must not reach its stack frame once it is gone.
        struct seen {
            std::mutex mu;
            std::condition_variable cv;
            std::vector<double> us;
            bool committed = false;
        };
        auto st = std::make_shared<seen>();
        const auto token =
            client.subscribe("wuhu_bench.events.stream.>", [st](wuhu::nats::message m) {
                const auto now = clock_type::now().time_since_epoch().count();
                auto v = json::parse(m.data);
                std::lock_guard lock(st->mu);
                if (m.subject.ends_with(".delta") && v.at("type") == "text.delta") {
                    const std::string text(v.at("text").as_string());
                    st->us.push_back(static_cast<double>(now - std::stoll(text)) / 1000.0);
                } else if (m.subject.ends_with(".patch") &&
                           m.data.find("assistant_message") != std::string::npos) {
                    st->committed = true;
                }
                st->cv.notify_all();
            });
        client.flush();
        for (int round = 0; round < 10; ++round) {
            {
                std::lock_guard lock(st->mu);
                st->committed = false;
            }
            client.request("wuhu_bench.session.stream.enqueue",
                           R"({"lane":"followUp","id":"d)" + std::to_string(round) +
                               R"(","content":"stream"})",
                           10s);
            std::unique_lock lock(st->mu);
            st->cv.wait_for(lock, 30s, [&] { return st->committed; });
        }
        client.unsubscribe(token);
        std::lock_guard lock(st->mu);
        deltas_seen = st->us.size();
        if (st->us.empty()) {
            std::fprintf(stderr, "broker_bench: no deltas arrived\n");
            return 1;
        }
        delta = percentiles(st->us);
    }
    // 6. The fleet view: two workers (in-memory store, one lease catalog), each owning
    // `per_worker` loaded sessions, among `in_store` sessions in the store (the others have no
    // owner; every tenth waits on a timer a day away).
    const char* fleet_env = std::getenv("WUHU_BENCH_FLEET");
    const int per_worker = fleet_env != nullptr ? std::atoi(fleet_env) : 10'000;
    const int in_store = std::max(2 * per_worker, per_worker * 10);
    stats first_page, filtered_page, middle_page, unowned_page, owner_page, unowned_state_page;
    double all_pages_ms = 0;
    std::size_t rows_seen = 0, pages = 0;
    {
        wuhu::storage::memory_store fleet_store;
        const auto fleet_dir = dir / "fleet";
        std::filesystem::create_directories(fleet_dir);
        // A fleet of its own (its own prefix): the workers above are still serving theirs.
        for (int i = 0; i < in_store - 2 * per_worker; ++i) {
            auto log = fleet_store
                           .open(wuhu::session::session_id::parse("fleet-u-" + std::to_string(i))
                                     .value(),
                                 wuhu::session::lease_epoch{1})
                           .value();
            if (i % 10 == 0) {
                wuhu::session::session_state st;
                wuhu::session::timer t{
                    wuhu::session::queue_item_id::parse("t" + std::to_string(i)).value(),
                    wuhu::session::unix_ms{wuhu::ownership::system_now().value + 86'400'000},
                    wuhu::session::system_source::parse("scheduledCallback").value(), "later"};
                if (!log->schedule_timer(st, t, wuhu::ownership::system_now())) {
                    std::fprintf(stderr, "broker_bench: could not schedule a timer\n");
                    return 1;
                }
            }
        }
        worker w1(url, fleet_dir, fleet_store, 1, "fleet-1", "wuhu_fleet");
        worker w2(url, fleet_dir, fleet_store, 1, "fleet-2", "wuhu_fleet");
        for (const char* owner : {"fleet-1", "fleet-2"}) {
            for (int start = 0; start < per_worker; start += 1000) {
                std::vector<std::string> subjects;
                for (int i = start; i < std::min(per_worker, start + 1000); ++i) {
                    subjects.push_back(std::string("wuhu_fleet.worker.") + owner + ".session." +
                                       owner + "-" + std::to_string(i) + ".configure");
                }
                for (const auto& r : client.request_all(subjects, "{}", 60s)) {
                    if (!r || r->find("\"ok\":true") == std::string::npos) {
                        std::fprintf(stderr, "broker_bench: a fleet session was not created\n");
                        return 1;
                    }
                }
            }
        }
        auto time_query = [&](const std::string& body, int times) {
            std::vector<double> us;
            for (int i = 0; i < times; ++i) {
                auto t0 = clock_type::now();
                auto r = client.request("wuhu_fleet.admin.sessions", body, 30s);
                us.push_back(micros(clock_type::now() - t0));
                if (!r || r->find("\"ok\":true") == std::string::npos) {
                    std::fprintf(stderr, "broker_bench: the fleet view did not answer\n");
                    std::exit(1);
                }
            }
            return percentiles(us);
        };
        first_page = time_query("{}", 20);
        filtered_page = time_query(R"({"state":"idle","limit":1000})", 10);
        middle_page = time_query(R"({"after":"fleet-2-5000"})", 20);
        unowned_page = time_query(R"({"after":"fleet-u-40000"})", 20);
        owner_page = time_query(R"({"owner":"fleet-2","after":"fleet-2-2000"})", 20);
        unowned_state_page = time_query(R"({"state":"unowned","limit":1000})", 10);
        // Every page, 1000 rows each (chunked replies reassembled).
        std::string after;
        auto start = clock_type::now();
        for (;;) {
            json::object q{{"limit", 1000}};
            if (!after.empty()) {
                q["after"] = after;
            }
            std::string text;
            bool whole = client.request_many(
                "wuhu_fleet.admin.sessions", json::serialize(q), 30s, [&](std::string m) {
                    auto v = json::parse(m).as_object();
                    if (!v.contains("chunk")) {
                        text = std::move(m);
                        return false;
                    }
                    text += v.at("part").as_string();
                    return v.at("chunk").to_number<int>() + 1 < v.at("chunks").to_number<int>();
                });
            if (!whole) {
                std::fprintf(stderr, "broker_bench: a fleet page did not arrive\n");
                return 1;
            }
            auto page = json::parse(text).as_object();
            rows_seen += page.at("sessions").as_array().size();
            ++pages;
            if (!page.contains("next")) {
                break;
            }
            after = json::value_to<std::string>(page.at("next"));
        }
        all_pages_ms = std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
    }
    std::filesystem::remove_all(dir);

    const double floor_us = raw_rtt.p50_us + raw_commit.p50_us;
    std::printf("broker_bench (%d requests per measurement, loopback NATS, SQLite FULL)\n", n);
    std::printf("  raw NATS round trip          p50 %8.1f us   p99 %8.1f us\n", raw_rtt.p50_us,
                raw_rtt.p99_us);
    std::printf("  raw SQLite commit            p50 %8.1f us   p99 %8.1f us   %6.0f commits/s\n",
                raw_commit.p50_us, raw_commit.p99_us, raw_commit_rate);
    std::printf(
        "  enqueue ack, memory store    p50 %8.1f us   p99 %8.1f us   (broker cost p50 %.1f us)\n",
        ack_memory.p50_us, ack_memory.p99_us, ack_memory.p50_us - raw_rtt.p50_us);
    std::printf("  enqueue ack, SQLite          p50 %8.1f us   p99 %8.1f us\n", ack.p50_us,
                ack.p99_us);
    std::printf("    floor = round trip + commit  %8.1f us   ratio p50/floor %.2f\n", floor_us,
                ack.p50_us / floor_us);
    std::printf("  enqueue throughput (8 clients)   %6.0f acks/s   ratio to raw commit rate %.2f\n",
                throughput, throughput / raw_commit_rate);
    std::printf(
        "  delta latency, provider -> subscriber  p50 %6.1f us   p99 %6.1f us  (%zu deltas)\n",
        delta.p50_us, delta.p99_us, deltas_seen);
    std::printf("  fleet view, %d sessions in the store, 2 workers x %d loaded:\n", in_store,
                per_worker);
    const stats* timed[] = {&first_page,   &filtered_page, &middle_page,
                            &unowned_page, &owner_page,    &unowned_state_page};
    const char* names[] = {"first page (100 rows)       ", "state=idle, 1000 rows       ",
                           "a page among loaded ones    ", "a page among unowned ones   ",
                           "owner=fleet-2, 100 rows     ", "state=unowned, 1000 rows    "};
    bool met = true;
    for (std::size_t i = 0; i < std::size(timed); ++i) {
        std::printf("    %s   p50 %8.1f ms   p99 %8.1f ms   (%.0fx a round trip)\n", names[i],
                    timed[i]->p50_us / 1000, timed[i]->p99_us / 1000,
                    timed[i]->p50_us / raw_rtt.p50_us);
        met = met && timed[i]->p99_us < 1e6;
    }
    std::printf(
        "    every page (1000 rows each)    %zu rows in %zu pages, %.0f ms (%.1f ms a page)\n",
        rows_seen, pages, all_pages_ms, all_pages_ms / static_cast<double>(pages));
    std::printf("    goal: a page within 1 s: %s\n", met ? "(met)" : "(NOT met)");
    return 0;
}
