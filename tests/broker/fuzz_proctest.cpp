// A bounded fuzz test of the NATS surface: two live wuhu-worker processes (the sanitizer build
// under scripts/test) on one SQLite data directory get more than 20,000 random and malformed
// requests (bad subjects, NUL bytes over a raw socket, broken and hostile bodies) mixed with
// valid traffic, `delete` included. It checks that no worker crashes or reports a sanitizer
// error, that every request with a reply subject is answered (or refused with a documented
// code), that no malformed request is accepted, and that sessions no valid write addressed are
// unchanged (bystanders keep their state, random ids leave nothing behind). It prints its
// counts. WUHU_FUZZ_SEED replays a run.
#include "tests/support/burst.hpp"
#include "tests/support/process.hpp"
#include "tests/support/raw_nats.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>

namespace wuhu::testing {

namespace json = boost::json;
using namespace std::chrono_literals;
using namespace std::string_literals;

namespace {

// docs/protocol.md's error table (`internal`, a bug, is not allowed here).
const std::set<std::string> documented_codes = {
    "invalid_session_id", "unknown_command",  "invalid_json",     "invalid_utf8",
    "invalid_type",       "missing_field",    "unknown_field",    "invalid_lane",
    "invalid_source",     "invalid_author",   "invalid_item_id",  "invalid_participant_id",
    "content_too_large",  "invalid_content",  "invalid_settings", "invalid_version",
    "not_cancelable",     "item_not_found",   "lease_lost",       "unavailable",
    "conflict",           "corrupt",          "owner_changed",    "worker_stopping",
    "invalid_query",      "session_not_found", "lane_full",        "overloaded",
    "rate_limited",       "quota_exceeded"};

enum class kind { valid_write, valid_read, malformed };

struct request : burst_request {
    kind what = kind::malformed;
    request(kind k, std::string subject, std::string body)
        : burst_request{std::move(subject), std::move(body)}, what(k) {}
};

// Makes requests at random: valid ones for the `live` sessions, and malformed ones that no
// decoder may accept (each carries at least one certain fault).
class generator {
  public:
    generator(std::uint64_t seed, std::string prefix, std::vector<std::string> live,
              std::vector<std::string> bystanders)
        : rng_(seed),
          prefix_(std::move(prefix)),
          live_(std::move(live)),
          bystanders_(std::move(bystanders)) {}

    request next() {
        const int roll = pick(100);
        if (roll < 22) {
            return valid_write();
        }
        if (roll < 32) {
            return valid_read();
        }
        return malformed();
    }

    // A malformed request whose subject has a NUL byte (for the raw socket).
    request nul_subject() {
        static const char* verbs[] = {"enqueue", "configure", "delete", "subscribe", "pause"};
        std::string sid = one_of(bystanders_);
        const std::string head = prefix_ + ".session.";
        std::string subject = head + sid + "." + verbs[pick(5)];
        // Anywhere after the head (before it, the subject is not the workers' to receive).
        const std::size_t at =
            head.size() +
            static_cast<std::size_t>(pick(static_cast<int>(subject.size() - head.size() + 1)));
        subject.insert(at, 1, '\0');
        if (pick(2) == 0) {
            subject += "\0zz"s;
        }
        return {kind::malformed, subject, R"({"lane":"steer","content":"x"})"};
    }

    const std::vector<std::string>& random_ids() const { return random_ids_; }

  private:
    int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
    template <class C>
    const typename C::value_type& one_of(const C& c) {
        return c[static_cast<std::size_t>(pick(static_cast<int>(c.size())))];
    }
    std::string subject(const std::string& sid, const std::string& verb) const {
        return prefix_ + ".session." + sid + "." + verb;
    }
    std::string text(std::size_t max) {
        static const char* words[] = {"hi", "build", "ünïcödé", "😀", "done", "a\\\"b", "x"};
        std::string out;
        const auto n = static_cast<std::size_t>(pick(static_cast<int>(max)) + 1);
        while (out.size() < n) {
            out += words[pick(7)];
        }
        return out;
    }

    request valid_write() {
        const std::string sid = one_of(live_);
        const std::string id = "i" + std::to_string(pick(40));
        switch (pick(10)) {
            case 0:
            case 1:
            case 2:
                return {kind::valid_write, subject(sid, "enqueue"),
                        R"({"lane":")" + std::string(pick(2) == 0 ? "steer" : "followUp") +
                            R"(","id":")" + id + R"(","content":")" + text(40) + "\"}"};
            case 3:
                return {kind::valid_write, subject(sid, "system"),
                        R"({"id":")" + id + R"(","source":"asyncBashCallback","content":")" +
                            text(20) + "\"}"};
            case 4:
                return {kind::valid_write, subject(sid, "cancel"),
                        R"({"lane":"followUp","id":")" + id + "\"}"};
            case 5:
                return {kind::valid_write, subject(sid, "configure"),
                        R"({"model":"m)" + std::to_string(pick(5)) + "\"}"};
            case 6:
                return {kind::valid_write, subject(sid, pick(2) == 0 ? "pause" : "resume"), "{}"};
            case 7:
                return {kind::valid_write, subject(sid, "abort"), R"({"reason":"fuzz"})"};
            case 8:
                return {kind::valid_write, subject(sid, "delete"), "{}"};
            default:
                return {kind::valid_write, subject(sid, "enqueue"),
                        R"({"lane":"steer","content":")" + text(10) + "\"}"};
        }
    }

    request valid_read() {
        std::string sid;
        switch (pick(3)) {
            case 0:
                sid = one_of(live_);
                break;
            case 1:
                sid = one_of(bystanders_);
                break;
            default:
                sid = random_id();
                break;
        }
        return {kind::valid_read, subject(sid, "subscribe"), pick(2) == 0 ? "{}" : ""};
    }

    std::string random_id() {
        std::string id = "rnd" + std::to_string(pick(500));
        random_ids_.push_back(id);
        return id;
    }

    // Certain faults of a subject: never a valid session id or verb.
    std::string bad_subject() {
        switch (pick(8)) {
            case 0:
                return prefix_ + ".session.a.b." + "enqueue";  // a dot in the id
            case 1:
                return prefix_ + ".session." + std::string(65 + pick(40), 'x') + ".enqueue";
            case 2:
                return prefix_ + ".session.*.delete";
            case 3:
                return prefix_ + ".session." + one_of(bystanders_) + ".explode";
            case 4:
                return prefix_ + ".session." + one_of(bystanders_);  // no verb
            case 5:
                return prefix_ + ".session.ünï.enqueue";
            case 6:
                return prefix_ + ".session..enqueue";  // an empty id
            default:
                return prefix_ + ".session." + one_of(bystanders_) + ".delete.more";
        }
    }

    // A body no decoder accepts for `verb`.
    std::string bad_body(const std::string& verb) {
        switch (pick(12)) {
            case 0:
                return "{not json";
            case 1:
                return "[1,2,3]";
            case 2:
                return R"({"lane":"steer","content":"x","zz":1})";  // unknown field
            case 3:
                return "{\"lane\":\"steer\",\"content\":\"\xFF\xFE\"}";  // invalid UTF-8
            case 4: {
                std::string deep(200, '[');
                return deep;
            }
            case 5:
                return R"({"zz":)" + std::to_string(pick(1000)) + "}";
            case 6: {
                std::string noise;
                for (int i = 0, n = pick(64) + 1; i < n; ++i) {
                    noise.push_back(static_cast<char>(pick(256)));
                }
                return "\x01" + noise;  // never JSON
            }
            case 7:
                return R"({"since":{"transcript":-1,"system":0,"steer":0,"followUp":0}})";
            case 8:
                return R"({"lane":"steer","content":")" + std::string(300 * 1024, 'q') +
                       R"(","zz":0})";
            case 9:
                return R"({"model":"a\u0000b","zz":true})";
            case 10:
                return R"({"lane":"system","id":"x","content":"y","zz":[]})";
            default:
                return verb == "subscribe" ? R"({"since":3})" : R"({"lane":7})";
        }
    }

    request malformed() {
        static const std::vector<std::string> verbs = {"enqueue",   "system", "cancel",
                                                       "configure", "abort",  "pause",
                                                       "resume",    "delete", "subscribe"};
        const std::string verb = one_of(verbs);
        std::string sid;
        switch (pick(3)) {
            case 0:
                sid = one_of(bystanders_);
                break;
            case 1:
                sid = random_id();
                break;
            default:
                sid = one_of(live_);
                break;
        }
        request r{kind::malformed, subject(sid, verb), bad_body(verb)};
        if (pick(5) == 0) {
            r.subject = bad_subject();
        }
        if (verb == "subscribe" && r.body.find("since") == std::string::npos &&
            r.body.find("zz") == std::string::npos && r.body[0] == '{') {
            r.body = R"({"zz":1})";  // a subscribe body must carry a certain fault too
        }
        r.wants_reply = pick(50) != 0;
        return r;
    }

    std::mt19937_64 rng_;
    std::string prefix_;
    std::vector<std::string> live_;
    std::vector<std::string> bystanders_;
    std::vector<std::string> random_ids_;
};

std::uint64_t seed() {
    if (const char* s = std::getenv("WUHU_FUZZ_SEED"); s != nullptr && *s != '\0') {
        return std::stoull(s);
    }
    return std::random_device{}();
}

// What a bystander looks like from outside: its version, transcript and settings.
json::value snapshot(nats::connection& nc, const std::string& subject) {
    auto r = answer_when_up(nc, subject);
    if (!r.is_object() || !r.as_object().contains("patch")) {
        return r;
    }
    return json::object{{"to", r.at("patch").at("to")},
                        {"transcript", r.at("patch").at("transcript")},
                        {"settings", r.at("settings")}};
}

}  // namespace

TEST(Fuzz, TwoWorkersAnswerEveryMalformedRequestAndChangeOnlyWhatValidWritesAddress) {
    temp_dir shared;
    const std::string prefix = "wuhu_fuzz" + std::to_string(getpid());
    const char* script = R"({"responses":[{"text":"one"},{"text":"two"},{"text":"three"}]})";
    auto config = [&](const std::string& id) {
        worker_process::config c;
        c.worker_id = id;
        c.data_dir = shared.path() / "data";
        c.prefix = prefix;
        return c;
    };
    worker_process a("fuzza", script, config("A"));
    worker_process b("fuzzb", script, config("B"));
    a.start();
    b.start();
    nats::connection nc(nats_url(), "fuzz-client");

    const std::vector<std::string> live = {"fz0", "fz1", "fz2", "fz3", "fz4", "fz5"};
    const std::vector<std::string> bystanders = {"by0", "by1", "by2", "by3"};
    auto sub = [&](const std::string& sid) { return prefix + ".session." + sid + ".subscribe"; };
    std::map<std::string, json::value> before;
    for (const auto& sid : bystanders) {
        auto r = answer_when_up(nc, prefix + ".session." + sid + ".enqueue",
                                R"({"lane":"followUp","id":"keep","content":"bystander"})");
        ASSERT_EQ(r.at("ok"), true) << json::serialize(r);
    }
    for (const auto& sid : bystanders) {
        // Settled (its turn answered), so that nothing but the fuzz could change it.
        json::value v;
        for (int i = 0; i < 100; ++i) {
            v = answer_when_up(nc, sub(sid));
            if (v.at("status").at("has_work") == false && v.at("status").at("state") == "idle") {
                break;
            }
            std::this_thread::sleep_for(100ms);
        }
        before[sid] = snapshot(nc, sub(sid));
    }

    const auto s = seed();
    std::cout << "fuzz: seed " << s << " (WUHU_FUZZ_SEED replays it)\n";
    generator gen(s, prefix, live, bystanders);
    std::map<std::string, int> counts;
    std::map<std::string, int> codes;
    burst b1(nc);
    constexpr int total = 20'000;
    constexpr int batch_size = 400;
    for (int sent = 0; sent < total; sent += batch_size) {
        std::vector<request> batch;
        std::vector<burst_request> sending;
        for (int i = 0; i < batch_size; ++i) {
            batch.push_back(gen.next());
            sending.push_back(batch.back());
        }
        auto replies = b1.send(sending, 120s);
        ASSERT_TRUE(a.running() && b.running()) << "a worker died after " << sent << " requests";
        for (std::size_t i = 0; i < batch.size(); ++i) {
            const auto& r = batch[i];
            const char* what = r.what == kind::valid_write  ? "valid write"
                               : r.what == kind::valid_read ? "valid read"
                                                            : "malformed";
            ++counts[what];
            if (!r.wants_reply) {
                ++counts["sent without a reply subject"];
                continue;
            }
            ASSERT_TRUE(replies[i].has_value())
                << "no answer to " << r.subject << " " << r.body.substr(0, 80);
            if (replies[i]->empty() && r.subject.find("..") != std::string::npos) {
                // nats-server routes no subject with an empty token: its "no responders"
                // status (an empty message) answers, and no worker sees the request.
                ++codes["refused by nats-server (empty subject token)"];
                continue;
            }
            boost::system::error_code ec;
            auto v = json::parse(*replies[i], ec);
            ASSERT_FALSE(ec) << "a reply that is not JSON: [" << *replies[i] << "] to " << r.subject
                             << " " << r.body.substr(0, 80);
            ASSERT_TRUE(v.is_object() && v.as_object().contains("ok")) << *replies[i];
            if (v.at("ok") == true) {
                ++codes["ok"];
                ASSERT_NE(r.what, kind::malformed)
                    << "accepted: " << r.subject << " " << r.body.substr(0, 120);
                continue;
            }
            const auto code = json::value_to<std::string>(v.at("error").at("code"));
            ++codes[code];
            ASSERT_TRUE(documented_codes.contains(code))
                << code << " for " << r.subject << " " << r.body.substr(0, 80);
            // A read is never refused, but may have to be retried: the session moved between
            // the workers meanwhile (deletes and recreations make it move a lot here).
            ASSERT_TRUE(r.what != kind::valid_read || code == "owner_changed")
                << code << " for a read of " << r.subject;
        }
    }
    // NUL bytes in subjects, over a raw socket (no client library sends them).
    {
        raw_nats raw(nats_url());
        for (int i = 0; i < 300; ++i) {
            auto r = gen.nul_subject();
            auto reply = raw.request(r.subject, r.body, 30s);
            ASSERT_TRUE(reply.has_value()) << "no answer to a subject with a NUL byte";
            auto v = json::parse(*reply);
            ASSERT_EQ(v.at("ok"), false) << *reply;
            ASSERT_EQ(v.at("error").at("code"), "invalid_session_id") << *reply;
            ++counts["malformed (NUL in the subject)"];
            ++codes["invalid_session_id"];
        }
    }
    ASSERT_TRUE(a.running() && b.running());

    // Nothing but valid writes changed anything.
    for (const auto& sid : bystanders) {
        EXPECT_EQ(snapshot(nc, sub(sid)), before[sid]) << sid << " was changed";
    }
    std::set<std::string> expected_files(live.begin(), live.end());
    expected_files.insert(bystanders.begin(), bystanders.end());
    for (const auto& f : std::filesystem::directory_iterator(shared.path() / "data" / "sessions")) {
        auto stem = f.path().filename().string();
        stem = stem.substr(0, stem.find(".sqlite"));
        EXPECT_TRUE(expected_files.contains(stem)) << "a session no valid write made: " << stem;
    }
    int total_sent = 0;
    for (const auto& [what, n] : counts) {
        std::cout << "fuzz: " << n << " " << what << "\n";
        if (what != "sent without a reply subject") {
            total_sent += n;
        }
    }
    for (const auto& [code, n] : codes) {
        std::cout << "fuzz: reply " << code << ": " << n << "\n";
    }
    std::cout << "fuzz: " << total_sent << " requests, " << gen.random_ids().size()
              << " to random ids; no crash, every one answered\n";
    EXPECT_GE(total_sent, 20'000);
    EXPECT_EQ(a.stop(), 0) << "SIGTERM exits 0: no sanitizer report";
    EXPECT_EQ(b.stop(), 0) << "SIGTERM exits 0: no sanitizer report";
    for (const auto* w : {&a, &b}) {
        for (const auto& line : json_lines(w->log())) {
            EXPECT_NE(line.at("level"), "critical") << json::serialize(line);
        }
    }
}

}  // namespace wuhu::testing
