// Where a connection goes and who it is (nats/connection.hpp's options): the servers of a
// comma-separated list, one kind of credentials (user and password, token, credentials file,
// NKey seed file, whose public key libnats needs beside it), and the inbox prefix, set on a new
// libnats options object. The connection adds its own settings and destroys the object.
#pragma once

#include "nats/connection.hpp"

struct __natsOptions;

namespace wuhu::nats {

// A new libnats options object for `o`, or std::invalid_argument naming what cannot work (two
// kinds of credentials, no server, an inbox prefix with a wildcard or an empty token, a seed
// file that holds no user's seed); its message holds no secret.
__natsOptions* identity_options(const options& o);

}  // namespace wuhu::nats
