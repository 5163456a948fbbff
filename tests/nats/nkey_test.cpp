// nats/nkey.hpp: the public key of an NKey seed, checked against a pair the NATS team's
// nkeys.js made.
#include "nats/nkey.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

TEST(NKey, ThePublicKeyOfASeedIsTheOneNkeysJsGives) {
    EXPECT_EQ(nats::nkey_public_of_seed("SUAKQVEBVRK4SMWOWRJACZSP44R6HMJ665Y67NKA7AA4Q6TB6EYYHJ6TOQ\n"),
              std::optional<std::string>("UDRM4Z5TEHNULRTB5A7V3KW7Z5HGI45ZR7SOE4NHWKSKNP2CYZWXMABN"));
}

TEST(NKey, WhatIsNoSeedHasNoPublicKey) {
    // A changed character (the checksum), a public key, base32 it is not, the empty text.
    for (const char* bad : {"SUAKQVEBVRK4SMWOWRJACZSP44R6HMJ665Y67NKA7AA4Q6TB6EYYHJ6TOA",
                            "UDRM4Z5TEHNULRTB5A7V3KW7Z5HGI45ZR7SOE4NHWKSKNP2CYZWXMABN",
                            "not a seed", ""}) {
        EXPECT_FALSE(nats::nkey_public_of_seed(bad).has_value()) << bad;
    }
}

}  // namespace wuhu::testing
