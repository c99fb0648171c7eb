// The client options the publisher and the blocking sessions share: URLs, credentials, NKey
// seeds (the public key derived with OpenSSL), TLS files, and -X options by name.
#include <nats/nats.h>
#include <openssl/evp.h>

#include <charconv>
#include <fstream>
#include <optional>
#include <string_view>

#include "session.hpp"

namespace outbox::nats::detail {

namespace {

std::vector<std::string> split_urls(const std::string& urls) {
  std::vector<std::string> out;
  std::string_view rest = urls;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    std::string_view one = rest.substr(0, comma);
    while (!one.empty() && one.front() == ' ') one.remove_prefix(1);
    while (!one.empty() && one.back() == ' ') one.remove_suffix(1);
    if (!one.empty()) out.emplace_back(one);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

std::int64_t parse_int(const std::string& name, const std::string& value) {
  std::int64_t v = 0;
  const auto* end = value.data() + value.size();
  auto [p, ec] = std::from_chars(value.data(), end, v);
  if (ec != std::errc{} || p != end || v < 0) {
    throw ConfigError("NATS option " + name + ": not a non-negative integer: '" + value + "'");
  }
  return v;
}

// ---- NKeys: the public key of a user seed (base32 "SU...": prefix, Ed25519 seed, CRC16) ----
constexpr std::string_view kBase32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

std::optional<std::vector<unsigned char>> base32_decode(std::string_view in) {
  std::vector<unsigned char> out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : in) {
    const auto pos = kBase32.find(c);
    if (pos == std::string_view::npos) return std::nullopt;
    buffer = (buffer << 5) | static_cast<unsigned>(pos);
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<unsigned char>((buffer >> bits) & 0xff));
    }
  }
  return out;
}

std::string base32_encode(const std::vector<unsigned char>& in) {
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (unsigned char b : in) {
    buffer = (buffer << 8) | b;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out.push_back(kBase32[(buffer >> bits) & 31]);
    }
  }
  if (bits > 0) out.push_back(kBase32[(buffer << (5 - bits)) & 31]);
  return out;
}

std::uint16_t crc16(const unsigned char* data, std::size_t n) {  // CRC-16/XMODEM
  std::uint16_t crc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= static_cast<std::uint16_t>(data[i]) << 8;
    for (int b = 0; b < 8; ++b) {
      crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<std::uint16_t>(crc << 1);
    }
  }
  return crc;
}

// Reads the first line starting with "SU" from `file` and returns the user's public key.
// The seed itself stays in nats.c, which reads the file again (and clears it after use).
std::string nkey_public_key(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw ConfigError("NATS NKey seed file " + file + ": cannot be read");
  std::string line;
  std::string seed;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.rfind("SU", 0) == 0) {
      seed = line;
      break;
    }
  }
  const std::string bad = "NATS NKey seed file " + file + ": no user seed (a line SU...) in it";
  if (seed.empty()) throw ConfigError(bad);
  auto raw = base32_decode(seed);
  if (!raw || raw->size() != 36) throw ConfigError(bad);
  const auto& r = *raw;
  const std::uint16_t want = static_cast<std::uint16_t>(r[34] | (r[35] << 8));
  if (crc16(r.data(), 34) != want) throw ConfigError(bad + " (checksum)");
  constexpr unsigned char kUserPrefix = 20 << 3;  // 'U'
  const unsigned char prefix = static_cast<unsigned char>(((r[0] & 7) << 5) | (r[1] >> 3));
  if (prefix != kUserPrefix) throw ConfigError(bad + " (not a user seed)");
  std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>> key(
      EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, r.data() + 2, 32));
  std::vector<unsigned char> pub(1 + 32 + 2);
  std::size_t len = 32;
  if (!key || EVP_PKEY_get_raw_public_key(key.get(), pub.data() + 1, &len) != 1 || len != 32) {
    throw ConfigError(bad + " (not an Ed25519 seed)");
  }
  pub[0] = kUserPrefix;
  const std::uint16_t crc = crc16(pub.data(), 33);
  pub[33] = static_cast<unsigned char>(crc & 0xff);
  pub[34] = static_cast<unsigned char>(crc >> 8);
  return base32_encode(pub);
}

}  // namespace

// The options shared by the publisher and the blocking sessions (connect_blocking()).
OptionsPtr make_options(const PublisherConfig& config) {
  natsOptions* raw = nullptr;
  check(natsOptions_Create(&raw), "NATS options");
  OptionsPtr opts(raw);
  const auto urls = split_urls(config.urls);
  if (urls.empty()) throw ConfigError("NATS: no server URL given");
  std::vector<const char*> ptrs;
  bool tls = config.tls || !config.tls_ca_file.empty() || !config.tls_cert_file.empty();
  for (const auto& u : urls) {
    ptrs.push_back(u.c_str());
    if (u.rfind("tls://", 0) == 0) tls = true;
  }
  check(natsOptions_SetServers(opts.get(), ptrs.data(), static_cast<int>(ptrs.size())),
        "NATS server URLs '" + config.urls + "'");
  check(natsOptions_SetName(opts.get(), "outbox-relay"), "NATS client name");
  if (!config.credentials_file.empty() && !config.nkey_seed_file.empty()) {
    throw ConfigError("NATS: a credentials file and an NKey seed file exclude each other");
  }
  if (!config.credentials_file.empty()) {
    if (!std::ifstream(config.credentials_file)) {
      throw ConfigError("NATS credentials file " + config.credentials_file + ": cannot be read");
    }
    check(natsOptions_SetUserCredentialsFromFiles(opts.get(), config.credentials_file.c_str(),
                                                  nullptr),
          "NATS credentials file " + config.credentials_file);
  }
  if (!config.nkey_seed_file.empty()) {
    const std::string pub = nkey_public_key(config.nkey_seed_file);
    check(natsOptions_SetNKeyFromSeed(opts.get(), pub.c_str(), config.nkey_seed_file.c_str()),
          "NATS NKey seed file " + config.nkey_seed_file);
  }
  if (tls) check(natsOptions_SetSecure(opts.get(), true), "NATS TLS");
  if (!config.tls_ca_file.empty()) {
    check(natsOptions_LoadCATrustedCertificates(opts.get(), config.tls_ca_file.c_str()),
          "NATS TLS CA file " + config.tls_ca_file);
  }
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    throw ConfigError("NATS TLS: a client certificate needs its key, and a key its certificate");
  }
  if (!config.tls_cert_file.empty()) {
    check(
        natsOptions_LoadCertificatesChain(opts.get(), config.tls_cert_file.c_str(),
                                          config.tls_key_file.c_str()),
        "NATS TLS client certificate " + config.tls_cert_file + " and key " + config.tls_key_file);
  }
  for (const auto& [name, value] : config.options) {
    const std::string what = "NATS option " + name;
    if (name == "name") {
      check(natsOptions_SetName(opts.get(), value.c_str()), what);
    } else if (name == "connect_timeout_ms") {
      check(natsOptions_SetTimeout(opts.get(), parse_int(name, value)), what);
    } else if (name == "ping_interval_ms") {
      check(natsOptions_SetPingInterval(opts.get(), parse_int(name, value)), what);
    } else if (name == "max_pings_out") {
      check(natsOptions_SetMaxPingsOut(opts.get(), static_cast<int>(parse_int(name, value))), what);
    } else if (name == "reconnect_wait_ms") {
      check(natsOptions_SetReconnectWait(opts.get(), parse_int(name, value)), what);
    } else if (name == "write_deadline_ms") {
      check(natsOptions_SetWriteDeadline(opts.get(), parse_int(name, value)), what);
    } else if (name == "tls_hostname") {
      check(natsOptions_SetExpectedHostname(opts.get(), value.c_str()), what);
    } else if (name == "tls_ciphers") {
      check(natsOptions_SetCiphers(opts.get(), value.c_str()), what);
    } else {
      throw ConfigError("unknown NATS option '" + name +
                        "' (known: name, connect_timeout_ms, ping_interval_ms, max_pings_out, "
                        "reconnect_wait_ms, write_deadline_ms, tls_hostname, tls_ciphers)");
    }
  }
  return opts;
}

}  // namespace outbox::nats::detail
