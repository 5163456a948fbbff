#include "broker/admission.hpp"

#include "broker/server.hpp"
#include "protocol/replies.hpp"
#include "providers/providers_config.hpp"

#include <algorithm>
#include <cmath>

namespace wuhu::broker {

namespace {
// Buckets kept at most (one per tenant that sent lately): past it, the full ones are dropped
// (a full bucket is what a new one would be).
constexpr std::size_t max_buckets = 10'000;
}  // namespace

void token_bucket::refill(clock::time_point now) {
    if (now > last_) {
        tokens_ = std::min(burst_, tokens_ + rate_ * std::chrono::duration<double>(now - last_).count());
        last_ = now;
    }
}

std::optional<std::chrono::milliseconds> token_bucket::take(clock::time_point now) {
    refill(now);
    if (tokens_ >= 1.0) {
        tokens_ -= 1.0;
        return std::nullopt;
    }
    const double seconds = (1.0 - tokens_) / rate_;
    return std::chrono::milliseconds(std::max<long long>(1, std::llround(std::ceil(seconds * 1000))));
}

bool token_bucket::full(clock::time_point now) {
    refill(now);
    return tokens_ >= burst_;
}

std::optional<std::chrono::milliseconds> admission::take(buckets& from, std::string_view tenant,
                                                         double rate, clock::time_point now) {
    if (rate <= 0) {
        return std::nullopt;
    }
    auto it = from.find(tenant);
    if (it == from.end()) {
        if (from.size() >= max_buckets) {
            for (auto b = from.begin(); b != from.end();) {
                b = b->second.full(now) ? from.erase(b) : std::next(b);
            }
        }
        it = from.emplace(std::string(tenant), token_bucket(rate, std::max(1.0, rate), now)).first;
    }
    return it->second.take(now);
}

std::optional<std::chrono::milliseconds> admission::request(std::string_view tenant,
                                                            clock::time_point now) {
    return take(requests_, tenant, limits_.requests_per_second, now);
}

std::optional<std::chrono::milliseconds> admission::new_session(std::string_view tenant,
                                                                clock::time_point now) {
    return take(creations_, tenant, limits_.new_sessions_per_second, now);
}

bool admission::count_needed(std::string_view tenant, clock::time_point now) const {
    if (limits_.max_sessions == 0) {
        return false;
    }
    const auto it = counts_.find(tenant);
    return it == counts_.end() || now - it->second.read >= limits_.count_ttl;
}

void admission::counted(std::string_view tenant, std::size_t sessions, clock::time_point now) {
    if (limits_.max_sessions == 0) {
        return;
    }
    if (counts_.size() >= max_buckets) {
        std::erase_if(counts_, [&](auto& c) { return now - c.second.read >= limits_.count_ttl; });
    }
    counts_.insert_or_assign(std::string(tenant), count{sessions, now});
}

bool admission::at_quota(std::string_view tenant) const {
    const auto it = counts_.find(tenant);
    return limits_.max_sessions > 0 && it != counts_.end() &&
           it->second.sessions >= limits_.max_sessions;
}

void admission::created(std::string_view tenant) {
    if (auto it = counts_.find(tenant); it != counts_.end()) {
        ++it->second.sessions;
    }
}

// ---- the server's admission (server.hpp): its refusals, and the creation of a session

namespace s = wuhu::session;

answer server::refusal(s::errc why, std::optional<std::chrono::milliseconds> retry_after) {
    if (options_.on_refused) {
        options_.on_refused(s::code_name(why));
    }
    return answer::refused(make_error_code(why), retry_after);
}

asio::awaitable<std::optional<answer>> server::admit_creation(
    worker::session_registry& registry, const s::session_id& sid) {
    const auto& limits = admission_.limits();
    if (limits.new_sessions_per_second <= 0 && limits.max_sessions == 0) {
        co_return std::nullopt;
    }
    auto checking = registry.exists(sid);
    auto there = co_await std::move(checking);
    if (!there) {
        co_return answer::error(there.error());
    }
    if (*there) {
        co_return std::nullopt;  // not a new session
    }
    const std::string tenant(sid.tenant());
    if (admission_.count_needed(tenant, std::chrono::steady_clock::now())) {
        storage::catalog_query q;
        q.tenant = tenant;
        auto listing = registry.catalog(std::move(q));
        auto rows = co_await std::move(listing);
        if (!rows) {
            co_return answer::error(rows.error());
        }
        admission_.counted(tenant, rows->size(), std::chrono::steady_clock::now());
    }
    if (admission_.at_quota(tenant)) {
        co_return refusal(s::errc::quota_exceeded, std::nullopt);
    }
    if (auto wait = admission_.new_session(tenant, std::chrono::steady_clock::now())) {
        co_return refusal(s::errc::rate_limited, wait);
    }
    admission_.created(tenant);
    co_return std::nullopt;
}

std::optional<answer> server::refused_settings(const s::session_id& sid,
                                               const protocol::request_body& body) const {
    const auto* update = std::get_if<s::settings_update>(&body);
    if (update == nullptr) {
        return std::nullopt;
    }
    if (update->model) {
        // The rule that routes a model to its endpoint judges it (providers/providers_config).
        if (auto why = providers::unservable_model(*update->model, options_.model_endpoints)) {
            return answer::error(s::code_name(s::errc::invalid_settings),
                                 "the model " + *update->model + " " + *why + " (field: model)");
        }
    }
    if (!update->tools) {
        return std::nullopt;
    }
    for (std::size_t i = 0; i < update->tools->size(); ++i) {
        const auto& name = (*update->tools)[i];
        if (tools_.find(name, {}, tools_.tenant_of(sid)) == nullptr) {
            return answer::error(
                s::code_name(s::errc::invalid_settings),
                "no tool is named " + name + " (field: tools." + std::to_string(i) + ")");
        }
    }
    return std::nullopt;
}

}  // namespace wuhu::broker
