// The web console's files (console/www, embedded in the binary at build time), as the worker's
// HTTP port serves them at /console (metrics/http_endpoint.hpp; docs/console.md).
#pragma once

#include <optional>
#include <string_view>

namespace wuhu::console {

struct file {
    std::string_view content_type;
    std::string_view body;
};

// The file a request's path names: "/console/" (or "/console/index.html") is the page,
// "/console/app.js" a module, and so on. nullopt for any other path, one that climbs
// ("..") or names a directory.
std::optional<file> find(std::string_view path);

// The headers every answer of the console carries: a content security policy that lets the
// page load its own files and open WebSockets only (nothing inline, nothing from elsewhere),
// no sniffing, no referrer, no framing.
inline constexpr std::string_view content_security_policy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' ws: wss:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

}  // namespace wuhu::console
