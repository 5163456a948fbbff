#include "nats/identity.hpp"

#include "nats/nkey.hpp"
#include "runtime/secrets.hpp"

#include <nats/nats.h>

#include <fstream>
#include <iterator>
#include <stdexcept>

namespace wuhu::nats {

namespace {

// An inbox prefix: a subject that can be published to, without an empty or a wildcard token
// (libnats's rule).
bool valid_inbox_prefix(std::string_view prefix) {
    if (!valid_publish_subject(prefix) || prefix.size() > 200) {
        return false;
    }
    for (;;) {
        const auto dot = prefix.find('.');
        const auto token = prefix.substr(0, dot);
        if (token.empty() || token == "*" || token == ">") {
            return false;
        }
        if (dot == std::string_view::npos) {
            return true;
        }
        prefix.remove_prefix(dot + 1);
    }
}

// The servers of a comma-separated list, each trimmed of spaces.
std::vector<std::string> servers_of(std::string_view list) {
    std::vector<std::string> out;
    for (;;) {
        const auto comma = list.find(',');
        auto one = list.substr(0, comma);
        while (!one.empty() && one.front() == ' ') {
            one.remove_prefix(1);
        }
        while (!one.empty() && one.back() == ' ') {
            one.remove_suffix(1);
        }
        if (!one.empty()) {
            out.emplace_back(one);
        }
        if (comma == std::string_view::npos) {
            return out;
        }
        list.remove_prefix(comma + 1);
    }
}

}  // namespace

natsOptions* identity_options(const options& o) {
    if (!valid_inbox_prefix(o.inbox_prefix)) {
        throw std::invalid_argument(
            "the inbox prefix must be a subject without wildcards or empty tokens: " +
            o.inbox_prefix);
    }
    const auto& a = o.auth;
    const int kinds = static_cast<int>(!a.user.empty() || !a.password.empty()) +
                      static_cast<int>(!a.token.empty()) +
                      static_cast<int>(!a.credentials_file.empty()) +
                      static_cast<int>(!a.nkey_seed_file.empty());
    if (kinds > 1) {
        throw std::invalid_argument(
            "NATS credentials: give one of a user and password, a token, a credentials file "
            "or an NKey seed file");
    }
    const auto servers = servers_of(o.url);
    if (servers.empty()) {
        throw std::invalid_argument("no NATS server given");
    }
    natsOptions* opts = nullptr;
    if (natsOptions_Create(&opts) != NATS_OK) {
        throw std::runtime_error("nats options: out of memory");
    }
    std::vector<const char*> list;
    for (const auto& one : servers) {
        list.push_back(one.c_str());
    }
    natsStatus set = natsOptions_SetServers(opts, list.data(), static_cast<int>(list.size()));
    if (set == NATS_OK && (!a.user.empty() || !a.password.empty())) {
        set = natsOptions_SetUserInfo(opts, a.user.c_str(), a.password.c_str());
    }
    if (set == NATS_OK && !a.token.empty()) {
        set = natsOptions_SetToken(opts, a.token.c_str());
    }
    if (set == NATS_OK && !a.credentials_file.empty()) {
        set = natsOptions_SetUserCredentialsFromFiles(opts, a.credentials_file.c_str(), nullptr);
    }
    if (set == NATS_OK && !a.nkey_seed_file.empty()) {
        // libnats signs with the seed file, but sends the public key it is given.
        std::ifstream f(a.nkey_seed_file);
        std::string seed((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        const auto public_key = f ? nkey_public_of_seed(seed) : std::nullopt;
        std::fill(seed.begin(), seed.end(), '\0');
        if (!public_key || !public_key->starts_with("U")) {
            natsOptions_Destroy(opts);
            throw std::invalid_argument(
                !f ? "cannot read the NKey seed file " + a.nkey_seed_file
                   : "the NKey seed file " + a.nkey_seed_file + " holds no user's NKey seed");
        }
        set = natsOptions_SetNKeyFromSeed(opts, public_key->c_str(), a.nkey_seed_file.c_str());
    }
    if (set == NATS_OK && o.inbox_prefix != "_INBOX") {
        set = natsOptions_SetCustomInboxPrefix(opts, o.inbox_prefix.c_str());
    }
    if (set != NATS_OK) {
        natsOptions_Destroy(opts);
        throw std::invalid_argument("NATS options for " + runtime::redacted_url(o.url) + ": " +
                                    natsStatus_GetText(set));
    }
    return opts;
}

}  // namespace wuhu::nats
