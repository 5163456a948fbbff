#include "session/ledger.hpp"

#include "session/overloaded.hpp"
#include "session/settings.hpp"

#include <array>
#include <variant>

namespace wuhu::session {

namespace {

// Saturating: counts come from providers, and a wrapped total would never reach a budget.
std::uint64_t plus(std::uint64_t a, std::uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

void add(token_usage& to, const token_usage& u) {
    to.input = plus(to.input, u.input);
    to.cached_input = plus(to.cached_input, u.cached_input);
    to.output = plus(to.output, u.output);
    to.cache_write = plus(to.cache_write, u.cache_write);
    to.reasoning = plus(to.reasoning, u.reasoning);
}

}  // namespace

void count(usage_totals& t, const assistant_message& m) {
    add(t.tokens, m.usage);
    t.cost = plus(t.cost, m.cost);
    ++t.turns;
}

void count(usage_totals& t, const entry_body& b) {
    std::visit(overloaded{
                   [&](const assistant_message& m) { count(t, m); },
                   [&](const tool_started&) { ++t.tool_calls; },
                   [&](const compaction& c) {
                       add(t.tokens, c.usage);
                       t.cost = plus(t.cost, c.cost);
                   },
                   [&](const diagnostic& d) {
                       add(t.tokens, d.usage);
                       t.cost = plus(t.cost, d.cost);
                   },
                   [](const auto&) {},
               },
               b);
}

bool counts(const entry_body& b) {
    if (const auto* c = std::get_if<compaction>(&b)) {
        return c->usage != token_usage{} || c->cost != 0;
    }
    if (const auto* d = std::get_if<diagnostic>(&b)) {
        return d->usage != token_usage{} || d->cost != 0;
    }
    return std::holds_alternative<assistant_message>(b) || std::holds_alternative<tool_started>(b);
}

diagnostic billed_attempt(const token_usage& u, std::string model, std::uint64_t cost,
                          std::string_view why) {
    std::string message = "an inference that gave no answer (" + std::string(why) +
                          ") was billed " + std::to_string(u.total()) + " tokens";
    if (cost > 0) {
        message += " ($" + dollars(cost) + ")";
    }
    return diagnostic{std::string(billed_attempt_code), std::move(message), u, std::move(model),
                      cost};
}

bool is_billed_attempt(const entry_body& b) {
    const auto* d = std::get_if<diagnostic>(&b);
    return d != nullptr && d->code == billed_attempt_code;
}

std::uint64_t cost_of(const token_usage& u, const model_prices& p) {
    // Per million tokens: n * price / 1e6, summed exactly in 128 bits, rounded once.
    const unsigned __int128 sum = static_cast<unsigned __int128>(u.input) * p.input +
                                  static_cast<unsigned __int128>(u.cached_input) * p.cached_input +
                                  static_cast<unsigned __int128>(u.cache_write) * p.cache_write +
                                  static_cast<unsigned __int128>(u.output) * p.output;
    const unsigned __int128 nano = (sum + 500'000) / 1'000'000;
    return nano > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(nano);
}

std::string dollars(std::uint64_t nano) {
    std::string frac = std::to_string(nano % 1'000'000'000);
    frac.insert(0, 9 - frac.size(), '0');
    while (frac.size() > 2 && frac.back() == '0') {
        frac.pop_back();
    }
    return std::to_string(nano / 1'000'000'000) + "." + frac;
}

namespace {

std::uint64_t total_of(const token_usage& u) {
    return plus(plus(u.input, u.cached_input), plus(u.cache_write, u.output));
}

// The limits of `b` with the totals that count against each, in the order they are checked.
std::array<budget_limit, 4> limits_of(const usage_totals& t, const budget& b) {
    return {budget_limit{"turns", t.turns, b.turns},
            budget_limit{"tool_calls", t.tool_calls, b.tool_calls},
            budget_limit{"tokens", total_of(t.tokens), b.tokens},
            budget_limit{"cost", t.cost, b.cost}};
}

std::string amount(const budget_limit& l, std::uint64_t n) {
    return l.name == "cost" ? "$" + dollars(n) : std::to_string(n);
}

}  // namespace

budget effective(const budget& session, const budget& fleet) {
    auto pick = [](std::uint64_t own, std::uint64_t dflt) { return own != 0 ? own : dflt; };
    budget out;
    out.tokens = pick(session.tokens, fleet.tokens);
    out.cost = pick(session.cost, fleet.cost);
    out.turns = pick(session.turns, fleet.turns);
    out.tool_calls = pick(session.tool_calls, fleet.tool_calls);
    out.soft_percent = session.soft_percent != 0 ? session.soft_percent
                       : fleet.soft_percent != 0 ? fleet.soft_percent
                                                 : 80;
    return out;
}

std::optional<budget_limit> exhausted(const usage_totals& t, const budget& b) {
    for (const auto& l : limits_of(t, b)) {
        if (l.max != 0 && l.used >= l.max) {
            return l;
        }
    }
    return std::nullopt;
}

std::vector<budget_limit> nearly_exhausted(const usage_totals& t, const budget& b) {
    std::vector<budget_limit> out;
    if (b.soft_percent == 0 || b.soft_percent >= 100) {
        return out;
    }
    for (const auto& l : limits_of(t, b)) {
        // used >= max * percent / 100, without overflow or rounding down the threshold.
        if (l.max != 0 && l.used < l.max &&
            static_cast<unsigned __int128>(l.used) * 100 >=
                static_cast<unsigned __int128>(l.max) * b.soft_percent) {
            out.push_back(l);
        }
    }
    return out;
}

diagnostic budget_exhausted_report(const budget_limit& l) {
    return diagnostic{"budget_exhausted",
                      "the session's budget of " + amount(l, l.max) + " " + std::string(l.name) +
                          " is spent (" + amount(l, l.used) +
                          " used): it is paused, its queued input kept, until a configure "
                          "changes its budget"};
}

std::string budget_notice_id(const budget_limit& l) {
    return "budget-" + std::string(l.name) + "-" + std::to_string(l.max);
}

std::string budget_notice_text(const budget_limit& l, std::uint32_t percent) {
    return "Budget notice: this session has used " + amount(l, l.used) + " of its " +
           amount(l, l.max) + " " + std::string(l.name) + " (" + std::to_string(percent) +
           "% or more). It stops at the limit; finish what matters most.";
}

}  // namespace wuhu::session
