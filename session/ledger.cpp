#include "session/ledger.hpp"

#include "session/overloaded.hpp"

#include <variant>

namespace wuhu::session {

namespace {

void add(token_usage& to, const token_usage& u) {
    to.input += u.input;
    to.cached_input += u.cached_input;
    to.output += u.output;
    to.cache_write += u.cache_write;
    to.reasoning += u.reasoning;
}

}  // namespace

void count(usage_totals& t, const entry_body& b) {
    std::visit(overloaded{
                   [&](const assistant_message& m) {
                       add(t.tokens, m.usage);
                       t.cost += m.cost;
                       ++t.turns;
                   },
                   [&](const tool_started&) { ++t.tool_calls; },
                   [](const auto&) {},
               },
               b);
}

bool counts(const entry_body& b) {
    return std::holds_alternative<assistant_message>(b) || std::holds_alternative<tool_started>(b);
}

std::uint64_t cost_of(const token_usage& u, const model_prices& p) {
    // Per million tokens: n * price / 1e6, summed exactly in 128 bits, rounded once.
    const unsigned __int128 sum = static_cast<unsigned __int128>(u.input) * p.input +
                                  static_cast<unsigned __int128>(u.cached_input) * p.cached_input +
                                  static_cast<unsigned __int128>(u.cache_write) * p.cache_write +
                                  static_cast<unsigned __int128>(u.output) * p.output;
    return static_cast<std::uint64_t>((sum + 500'000) / 1'000'000);
}

std::string dollars(std::uint64_t nano) {
    std::string frac = std::to_string(nano % 1'000'000'000);
    frac.insert(0, 9 - frac.size(), '0');
    while (frac.size() > 2 && frac.back() == '0') {
        frac.pop_back();
    }
    return std::to_string(nano / 1'000'000'000) + "." + frac;
}

}  // namespace wuhu::session
