// Runs `rounds` rounds of the SIGKILL crash test against the store at `url` (see store_for.hpp):
// each round starts the crash child, kills it after a random few milliseconds of acknowledged
// work, reopens the store as a new owner and checks every acknowledged item is there.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace wuhu::testing {

void crash_rounds(const std::string& url, const std::string& name, int rounds);

}  // namespace wuhu::testing
