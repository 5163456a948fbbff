#include "nats/nkey.hpp"

#include <openssl/evp.h>

#include <array>
#include <cctype>
#include <cstdint>
#include <memory>
#include <vector>

namespace wuhu::nats {

namespace {

constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
constexpr std::uint8_t seed_prefix = 18 << 3;  // 'S'

// CRC-16/XMODEM, as NKeys check their encodings.
std::uint16_t crc16(const std::uint8_t* data, std::size_t n) {
    std::uint16_t crc = 0;
    for (std::size_t i = 0; i < n; ++i) {
        crc ^= static_cast<std::uint16_t>(data[i] << 8);
        for (int b = 0; b < 8; ++b) {
            crc = (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                                      : static_cast<std::uint16_t>(crc << 1);
        }
    }
    return crc;
}

std::optional<std::vector<std::uint8_t>> base32_decode(std::string_view text) {
    std::vector<std::uint8_t> out;
    std::uint32_t buffer = 0;
    int bits = 0;
    for (char c : text) {
        const auto v = alphabet.find(c);
        if (v == std::string_view::npos) {
            return std::nullopt;
        }
        buffer = (buffer << 5) | static_cast<std::uint32_t>(v);
        bits += 5;
        if (bits >= 8) {
            out.push_back(static_cast<std::uint8_t>(buffer >> (bits - 8)));
            bits -= 8;
        }
    }
    return out;
}

std::string base32_encode(const std::vector<std::uint8_t>& data) {
    std::string out;
    std::uint32_t buffer = 0;
    int bits = 0;
    for (auto byte : data) {
        buffer = (buffer << 8) | byte;
        bits += 8;
        while (bits >= 5) {
            out.push_back(alphabet[(buffer >> (bits - 5)) & 31]);
            bits -= 5;
        }
    }
    if (bits > 0) {
        out.push_back(alphabet[(buffer << (5 - bits)) & 31]);
    }
    return out;
}

}  // namespace

std::optional<std::string> nkey_public_of_seed(std::string_view seed) {
    while (!seed.empty() && std::isspace(static_cast<unsigned char>(seed.back())) != 0) {
        seed.remove_suffix(1);
    }
    while (!seed.empty() && std::isspace(static_cast<unsigned char>(seed.front())) != 0) {
        seed.remove_prefix(1);
    }
    auto raw = base32_decode(seed);
    // Two prefix bytes, the 32-byte Ed25519 seed, the checksum.
    if (!raw || raw->size() != 36) {
        return std::nullopt;
    }
    const auto sum = static_cast<std::uint16_t>((*raw)[34] | ((*raw)[35] << 8));
    if (crc16(raw->data(), 34) != sum || ((*raw)[0] & 0xF8) != seed_prefix) {
        return std::nullopt;
    }
    const auto kind = static_cast<std::uint8_t>((((*raw)[0] & 7) << 5) | (((*raw)[1] & 0xF8) >> 3));
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
        EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, raw->data() + 2, 32),
        EVP_PKEY_free);
    std::array<std::uint8_t, 32> pub{};
    std::size_t len = pub.size();
    const bool ok = key != nullptr && EVP_PKEY_get_raw_public_key(key.get(), pub.data(), &len) == 1;
    std::fill(raw->begin(), raw->end(), 0);  // the private key leaves no copy behind
    if (!ok || len != pub.size()) {
        return std::nullopt;
    }
    std::vector<std::uint8_t> encoded{kind};
    encoded.insert(encoded.end(), pub.begin(), pub.end());
    const auto check = crc16(encoded.data(), encoded.size());
    encoded.push_back(static_cast<std::uint8_t>(check & 0xFF));
    encoded.push_back(static_cast<std::uint8_t>(check >> 8));
    return base32_encode(encoded);
}

}  // namespace wuhu::nats
