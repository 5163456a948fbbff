// Issue 30, with real processes: one client floods one paused session with 60 KiB follow-ups at
// full speed (256 in flight), another creates 10,000 new sessions, a subscriber never reads
// its socket, and a calm client keeps enqueueing into a session of its own. The worker never
// dies; every reply is ok or one of the documented refusals; every acknowledged item and
// session is found afterwards (counted); the worker's resident memory stays under the bound
// docs/operations.md states (checked in the release build: scripts/bench runs this test;
// AddressSanitizer's own memory makes the figure meaningless here, where it is printed). The
// calm client's latency is printed against its unloaded figure (a benchmark's figure, not a
// timed test's). A second test publishes 120 MB of events past a subscriber that never reads.
#include "client/client.hpp"
#include "tests/support/burst.hpp"
#include "tests/support/http_get.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {



std::string item(const std::string& id, const std::string& content) {
    return json::serialize(json::object{{"lane", "followUp"},
                                        {"id", id},
                                        {"author", {{"id", "u1"}, {"name", "Ann"}, {"kind", "human"}}},
                                        {"content", content}});
}

// "ok", or the reply's error code ("no_reply" when none came).
std::string code_of(const std::optional<std::string>& reply) {
    if (!reply) {
        return "no_reply";
    }
    auto v = json::parse(*reply);
    if (v.at("ok") == true) {
        return "ok";
    }
    return std::string(v.at("error").at("code").as_string());
}

const std::set<std::string> refusals = {"overloaded", "lane_full", "rate_limited",
                                        "quota_exceeded"};

// A NATS subscriber that never reads its socket (nats-server cuts it off as a slow consumer).
int stalled_subscriber(int port, const std::string& subject) {
    const int fd = connect_local("127.0.0.1:" + std::to_string(port));
    if (fd < 0) {
        return -1;
    }
    const std::string hello =
        "CONNECT {\"verbose\":false,\"pedantic\":false}\r\nSUB " + subject + " 1\r\nPING\r\n";
    if (send(fd, hello.data(), hello.size(), 0) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// The ids of every item a session holds: materialized (a transcript entry names its item) or
// pending (an enqueued fact of the journal: a patch from the start coalesces the facts of
// materialized items away). Read by a subscribe from the start (reassembled by the client
// library when it comes in chunks).
std::set<std::string> enqueued_ids(client::client& c, const std::string& sid) {
    std::set<std::string> out;
    auto r = c.subscribe(sid);
    if (!r) {
        ADD_FAILURE() << "subscribe " << sid << ": " << r.error().code << " " << r.error().message;
        return out;
    }
    for (const auto& e : r->at("patch").at("transcript").as_array()) {
        if (const auto* id = e.as_object().if_contains("item")) {
            out.insert(std::string(id->as_string()));  // materialized
        }
    }
    for (const auto& j : r->at("patch").at("journal").at("followUp").as_array()) {
        if (j.at("fact") == "enqueued") {
            out.insert(std::string(j.at("item").at("id").as_string()));
        }
    }
    return out;
}

// Enqueues `n` items into `sid`, one after another, retrying refusals; the latency of each
// first attempt's reply in ms. Every item must be acknowledged.
std::vector<double> calm_enqueues(nats::connection& nc, const std::string& subject,
                                  const std::string& tag, int n, std::set<std::string>& acked) {
    std::vector<double> ms;
    for (int i = 0; i < n; ++i) {
        const std::string id = tag + std::to_string(i);
        for (int attempt = 0; attempt < 100; ++attempt) {
            const auto t0 = std::chrono::steady_clock::now();
            auto r = nc.request(subject, item(id, "calm"), 30s);
            if (attempt == 0) {
                ms.push_back(std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - t0)
                                 .count());
            }
            const auto code = code_of(r);
            if (code == "ok") {
                acked.insert(id);
                break;
            }
            EXPECT_TRUE(refusals.contains(code)) << code;
            std::this_thread::sleep_for(20ms);
        }
    }
    return ms;
}

}  // namespace

TEST(Flood, OneClientFloodingASessionAndAnotherCreatingSessionsLoseNothingAcknowledged) {
    worker_process::config c;
    c.args = {"--max-loaded-sessions", "1000", "--passivate-after", "2s"};
    worker_process w("flood", R"({"responses":[{"text":"ok"}]})", c);
    w.start();
    nats::connection flooder(nats_url(), "flooder");
    nats::connection creator(nats_url(), "creator");
    nats::connection calm(nats_url(), "calm");
    const auto subject = [&](const std::string& sid, const char* verb) {
        return w.prefix() + ".session." + sid + "." + verb;
    };
    ASSERT_EQ(answer_when_up(calm, subject("victim", "configure")).at("ok"), true);
    ASSERT_EQ(answer_when_up(calm, subject("victim", "pause")).at("ok"), true);
    std::set<std::string> calm_acked;
    const auto unloaded = calm_enqueues(calm, subject("calm", "enqueue"), "u", 100, calm_acked);
    const int port = std::stoi(nats_url().substr(nats_url().rfind(':') + 1));
    const int stalled = stalled_subscriber(port, w.prefix() + ".events.>");
    ASSERT_GE(stalled, 0);
    const long start_rss = resident_kib(w.pid());
    std::atomic<long> peak_rss{start_rss};
    std::atomic<bool> flooding{true};

    // One client at full speed into one session: 256 requests of 60 KiB in flight, for 5 s.
    std::map<std::string, int> flood_codes;
    std::set<std::string> flood_acked;
    std::size_t flood_sent = 0;
    std::thread flood([&] {
        burst b(flooder);
        const std::string content(60 * 1024, 'x');
        const auto until = std::chrono::steady_clock::now() + 5s;
        for (int round = 0; std::chrono::steady_clock::now() < until; ++round) {
            std::vector<burst_request> batch;
            std::vector<std::string> ids;
            for (int i = 0; i < 256; ++i) {
                ids.push_back("f" + std::to_string(round) + "-" + std::to_string(i));
                batch.push_back({subject("victim", "enqueue"), item(ids.back(), content)});
            }
            auto replies = b.send(batch, 60s);
            flood_sent += batch.size();
            for (std::size_t i = 0; i < replies.size(); ++i) {
                const auto code = code_of(replies[i]);
                ++flood_codes[code];
                if (code == "ok") {
                    flood_acked.insert(ids[i]);
                }
            }
        }
    });
    // Another creating 10,000 new sessions, 500 at once.
    std::map<std::string, int> create_codes;
    std::set<std::string> created;
    std::thread create([&] {
        burst b(creator);
        for (int from = 0; from < 10000; from += 500) {
            std::vector<burst_request> batch;
            for (int i = from; i < from + 500; ++i) {
                batch.push_back({subject("n" + std::to_string(i), "configure"), "{}"});
            }
            auto replies = b.send(batch, 60s);
            for (std::size_t i = 0; i < replies.size(); ++i) {
                const auto code = code_of(replies[i]);
                ++create_codes[code];
                if (code == "ok") {
                    created.insert("n" + std::to_string(from + static_cast<int>(i)));
                }
            }
        }
    });
    std::thread sample([&] {
        while (flooding) {
            peak_rss = std::max(peak_rss.load(), resident_kib(w.pid()));
            std::this_thread::sleep_for(50ms);
        }
    });
    const auto loaded = calm_enqueues(calm, subject("calm", "enqueue"), "l", 200, calm_acked);
    flood.join();
    create.join();
    flooding = false;
    sample.join();
    close(stalled);
    ASSERT_TRUE(w.running()) << "the worker died under the flood";

    for (const auto* codes : {&flood_codes, &create_codes}) {
        for (const auto& [code, n] : *codes) {
            EXPECT_TRUE(code == "ok" || refusals.contains(code))
                << n << " replies were " << code << ", not a documented refusal";
        }
    }
    EXPECT_GT(flood_codes["lane_full"] + flood_codes["overloaded"], 0)
        << "the flood was never pushed back";
    EXPECT_GT(flood_acked.size(), 0u);

    // Counted: every acknowledged item is in the victim's lane, and nothing else; every calm
    // item in the calm session.
    client::options co;
    co.prefix = w.prefix();
    co.timeout = 60s;
    client::client reader(calm, co);
    EXPECT_EQ(enqueued_ids(reader, "victim"), flood_acked);
    EXPECT_EQ(enqueued_ids(reader, "calm"), calm_acked);
    EXPECT_EQ(calm_acked.size(), 300u);
    // Every acknowledged session exists (the fleet view, in pages).
    std::set<std::string> listed;
    std::string after;
    for (int page = 0; page < 100; ++page) {
        json::object q{{"limit", 1000}};
        if (!after.empty()) {
            q["after"] = after;
        }
        auto v = reader.sessions(q);
        ASSERT_TRUE(v) << v.error().code << " " << v.error().message;
        for (const auto& row : v->at("sessions").as_array()) {
            const std::string id(row.at("id").as_string());
            if (id.starts_with("n")) {
                listed.insert(id);
            }
        }
        if (!v->contains("next")) {
            break;
        }
        after = std::string(v->at("next").as_string());
    }
    EXPECT_EQ(listed, created);
    const long added_mib = (peak_rss.load() - start_rss) / 1024;
    std::cout << "flood: " << flood_sent << " sent, " << flood_acked.size() << " acknowledged ("
              << flood_codes["lane_full"] << " lane_full, " << flood_codes["overloaded"]
              << " overloaded); " << created.size() << " of 10000 sessions created ("
              << create_codes["overloaded"] << " overloaded); resident memory " << start_rss / 1024
              << " MiB -> peak " << peak_rss.load() / 1024 << " MiB (+" << added_mib
              << " MiB); calm enqueue p50/p99 " << percentile(unloaded, 0.5) << "/"
              << percentile(unloaded, 0.99) << " ms unloaded, " << percentile(loaded, 0.5) << "/"
              << percentile(loaded, 0.99) << " ms under the flood (ratio of p99s "
              << percentile(loaded, 0.99) / std::max(0.001, percentile(unloaded, 0.99))
              << ", goal <= 2)"
              << (releases_memory ? "\n" : " (AddressSanitizer: memory not checked)\n");
    if (releases_memory) {
        EXPECT_LT(added_mib, 256) << "docs/operations.md: the flood adds less than 256 MiB";
    }
    EXPECT_EQ(w.stop(), 0) << "a clean stop";
}

// A subscriber that never reads its socket while a worker publishes 120 MB of events (60
// sessions one after another, each streaming an answer of 960 KiB in 60 deltas, then deleted):
// the worker never waits for it (every turn completes) and its resident memory does not grow
// with what it published (nats-server holds what the subscriber has not read, up to its own
// limit, then cuts it off as a slow consumer).
TEST(Flood, ASubscriberThatNeverReadsDoesNotGrowTheWorkersMemory) {
    json::array chunks;
    for (int i = 0; i < 60; ++i) {
        chunks.emplace_back(std::string(16 * 1024, static_cast<char>('a' + i % 26)));
    }
    const std::string script =
        json::serialize(json::object{{"responses", json::array{json::object{{"chunks", chunks}}}}});
    worker_process w("slow", script);
    w.start();
    nats::connection nc(nats_url(), "slow-reader-test");
    const auto subject = [&](const std::string& sid, const char* verb) {
        return w.prefix() + ".session." + sid + "." + verb;
    };
    ASSERT_EQ(answer_when_up(nc, subject("warm", "configure")).at("ok"), true);
    const int port = std::stoi(nats_url().substr(nats_url().rfind(':') + 1));
    const int stalled = stalled_subscriber(port, w.prefix() + ".events.>");
    ASSERT_GE(stalled, 0);
    const auto one_session = [&](const std::string& sid) {
        auto r = nc.request(subject(sid, "enqueue"), item(sid + "-q", "go"), 30s);
        ASSERT_EQ(code_of(r), "ok") << sid;
        ASSERT_TRUE(wait_idle(nc, subject(sid, "subscribe"))) << sid << " never answered";
        ASSERT_EQ(code_of(nc.request(subject(sid, "delete"), "{}", 30s)), "ok") << sid;
    };
    for (int i = 0; i < 10; ++i) {  // warm: the worker's buffers and the store's files
        one_session("w" + std::to_string(i));
    }
    const long warm_rss = resident_kib(w.pid());
    long peak_rss = warm_rss;
    for (int i = 0; i < 60; ++i) {
        one_session("s" + std::to_string(i));
        peak_rss = std::max(peak_rss, resident_kib(w.pid()));
    }
    close(stalled);
    ASSERT_TRUE(w.running());
    const long added_mib = (peak_rss - warm_rss) / 1024;
    std::cout << "slow reader: 60 answers of 960 KiB published past a subscriber that never reads"
              << " (about 120 MB of events); resident memory " << warm_rss / 1024 << " MiB warm -> "
              << peak_rss / 1024 << " MiB at the peak"
              << (releases_memory ? "\n" : " (AddressSanitizer: memory not checked)\n");
    if (releases_memory) {
        EXPECT_LT(added_mib, 32) << "what the worker publishes is not held for a slow reader";
    }
    EXPECT_EQ(w.stop(), 0) << "a clean stop";
}

}  // namespace wuhu::testing
