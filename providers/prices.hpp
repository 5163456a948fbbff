// The price table of the providers file (issue 33), which turns an inference's usage into its
// cost (session/ledger.hpp):
//
//   {"endpoints": {...},
//    "prices": {"gpt-4o-mini": {"input": 0.15, "cached_input": 0.075, "output": 0.6},
//               "claude-sonnet-4": {"input": 3, "cached_input": 0.3, "cache_write": 3.75,
//                                   "output": 15}}}
//
// Dollars per million tokens of each kind (a kind left out costs nothing; reasoning tokens are
// output). A price's key is the model the provider reports, matched exactly or as its prefix
// followed by `-` (`gpt-4o-mini` prices `gpt-4o-mini-2024-07-18`); the longest key that matches
// wins; a reported model without a price is priced as the model the session asked for. An
// inference of a model priced neither way costs 0 (its tokens are still counted).
#pragma once

#include "session/ledger.hpp"

#include <boost/system/result.hpp>

#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace wuhu::providers {

using price_table = std::map<std::string, session::model_prices, std::less<>>;

// The "prices" of a providers file (empty when it has none), or a message naming what is wrong.
boost::system::result<price_table, std::string> parse_prices(std::string_view json_text);

// The price of `model` (nullptr: none).
const session::model_prices* price_for(const price_table& t, std::string_view model);

// What `u` cost by its reported model's price, or, when that model has no price, the model the
// session asked for (`asked`: an endpoint's name for it; a provider cannot make an answer free
// by reporting a name nobody priced). 0 when neither has a price.
std::uint64_t cost_for(const price_table& t, const session::token_usage& u,
                       std::string_view reported, std::string_view asked = {});
// Sets m.cost (cost_for its usage and model).
void price(session::assistant_message& m, const price_table& t, std::string_view asked = {});

}  // namespace wuhu::providers
