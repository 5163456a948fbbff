// NKeys (NATS's Ed25519 identities): the public key of a seed, as `nats-server` expects it in
// CONNECT. libnats signs the server's nonce with the seed file itself, but needs the public key
// given; a user gives only the seed file (as `nk -gen user` writes it).
//
// Pure computation over OpenSSL's Ed25519; any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace wuhu::nats {

// The public key ("U…" for a user) of an encoded seed ("SU…"), or nullopt when it is not one
// (bad base32, a bad checksum, not a seed). Surrounding whitespace is ignored.
std::optional<std::string> nkey_public_of_seed(std::string_view seed);

}  // namespace wuhu::nats
