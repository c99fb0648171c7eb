#include "outbox/pg/conninfo.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "libpq_handles.hpp"

namespace outbox::pg {
namespace {

std::mutex secrets_mutex;
std::vector<std::string>& secrets() {
  static std::vector<std::string> all;
  return all;
}

void remember(std::string secret) {
  if (secret.empty()) return;
  std::lock_guard lock(secrets_mutex);
  auto& all = secrets();
  if (std::find(all.begin(), all.end(), secret) != all.end()) return;
  all.push_back(std::move(secret));
  // Longest first: a secret that contains another is replaced whole.
  std::sort(all.begin(), all.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

// libpq's own test (recognized_connection_string): a URI, or text with '='; anything else is a
// database name.
std::size_t uri_prefix_length(std::string_view s) {
  for (std::string_view p : {"postgresql://", "postgres://"}) {
    if (s.starts_with(p)) return p.size();
  }
  return 0;
}

// Our words for libpq's parse errors, which quote the text they could not read.
std::string parse_problem(std::string_view libpq_message) {
  struct Known {
    std::string_view starts;
    std::string_view says;
  };
  static constexpr Known kKnown[] = {
      {"invalid percent-encoded token",
       "a '%' not followed by two hex digits (write a literal % as %25)"},
      {"forbidden value %00", "%00 in a percent-encoded value"},
      {"missing \"=\" after", "a word without '=' (quote a value holding blanks in single quotes)"},
      {"unterminated quoted string", "a quoted value without its closing quote"},
      {"invalid connection option", "an unknown keyword"},
      {"invalid URI query parameter", "a malformed URI query parameter"},
      {"missing key/value separator", "a malformed URI query parameter"},
      {"extra key/value separator", "a malformed URI query parameter"},
      {"unexpected character", "an unexpected character after the URI's host"},
      {"IPv6 host address may not be empty", "an empty IPv6 host in the URI"},
      {"end of string reached when looking for matching", "an unterminated IPv6 host in the URI"},
      {"out of memory", "out of memory"},
  };
  for (const Known& k : kKnown) {
    if (libpq_message.starts_with(k.starts)) return std::string(k.says);
  }
  return "libpq cannot parse it";
}

std::string refused(const std::string& what) {
  return "cannot use the connection string: " + what +
         " (its text is not shown: it may hold a password)";
}

}  // namespace

std::string check_conninfo(const std::string& conninfo) {
  const std::size_t prefix = uri_prefix_length(conninfo);
  if (prefix == 0 && conninfo.find('=') == std::string::npos) return "";  // a database name
  if (prefix > 0) {
    // The authority ends at the first '/' or '?'; libpq takes its user info up to the first '@'
    // and the host from there, so a second '@' puts the rest of the password in the host name.
    const std::string_view rest = std::string_view(conninfo).substr(prefix);
    const std::string_view authority = rest.substr(0, rest.find_first_of("/?"));
    const std::size_t at = authority.find('@');
    if (at != std::string_view::npos) {
      const std::string_view userinfo = authority.substr(0, at);
      if (const std::size_t colon = userinfo.find(':'); colon != std::string_view::npos) {
        remember(std::string(userinfo.substr(colon + 1)));
      }
      if (authority.find('@', at + 1) != std::string_view::npos) {
        remember(std::string(authority.substr(at + 1)));
        return refused("an '@' in the URI's user info (write it as %40)");
      }
    }
  }
  char* error = nullptr;
  CHandle<PQconninfoOption, &PQconninfoFree> options(PQconninfoParse(conninfo.c_str(), &error));
  BufferHandle message(error);
  if (!options) return refused(parse_problem(message ? message.get() : "out of memory"));
  std::string problem;
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string_view key = o->keyword;
    if (key == "password" || key == "sslpassword") remember(o->val);
    // A port that is not a number is quoted by libpq when it connects; in a URI it may be the
    // part of a password before an unencoded '/' or '?'.
    if (key == "port" && problem.empty()) {
      const std::string_view ports = o->val;
      const bool digits = std::all_of(ports.begin(), ports.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) || c == ',';
      });
      if (!digits) problem = refused("a port that is not a number");
    }
  }
  return problem;
}

std::string redact(std::string text) {
  std::lock_guard lock(secrets_mutex);
  for (const std::string& s : secrets()) {
    for (std::size_t p = 0; (p = text.find(s, p)) != std::string::npos; p += 3) {
      text.replace(p, s.size(), "***");
    }
  }
  return text;
}

namespace {

std::vector<std::string> split_commas(const char* value) {
  std::vector<std::string> parts;
  if (value == nullptr) return parts;
  std::string cur;
  for (const char* c = value;; ++c) {
    if (*c == ',' || *c == '\0') {
      parts.push_back(cur);
      cur.clear();
      if (*c == '\0') break;
    } else {
      cur += *c;
    }
  }
  return parts;
}

std::string conninfo_value(const std::string& v) {
  std::string out = "'";
  for (char c : v) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

}  // namespace

std::string pin_conninfo(const std::string& conninfo, const std::string& host,
                         const std::string& hostaddr, const std::string& port) {
  char* error = nullptr;
  CHandle<PQconninfoOption, &PQconninfoFree> options(PQconninfoParse(conninfo.c_str(), &error));
  BufferHandle message(error);
  if (!options) return "";
  std::string out;
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string_view key = o->keyword;
    if (key == "host" || key == "hostaddr" || key == "port" || key == "load_balance_hosts") {
      continue;
    }
    out += std::string(o->keyword) + "=" + conninfo_value(o->val) + " ";
  }
  if (!host.empty()) out += "host=" + conninfo_value(host) + " ";
  if (!hostaddr.empty()) out += "hostaddr=" + conninfo_value(hostaddr) + " ";
  if (!port.empty()) out += "port=" + conninfo_value(port) + " ";
  return out;
}

std::vector<std::string> per_host_conninfos(const std::string& conninfo) {
  char* error = nullptr;
  CHandle<PQconninfoOption, &PQconninfoFree> options(PQconninfoParse(conninfo.c_str(), &error));
  BufferHandle message(error);
  if (!options) return {};
  std::vector<std::string> hosts, addrs, ports;
  std::string rest;
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string_view key = o->keyword;
    if (key == "host") {
      hosts = split_commas(o->val);
    } else if (key == "hostaddr") {
      addrs = split_commas(o->val);
    } else if (key == "port") {
      ports = split_commas(o->val);
    } else if (key != "target_session_attrs" && key != "load_balance_hosts") {
      rest += std::string(o->keyword) + "=" + conninfo_value(o->val) + " ";
    }
  }
  const std::size_t n = std::max(hosts.size(), addrs.size());
  if (n < 2) return {};
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) {
    std::string one = rest;
    if (i < hosts.size() && !hosts[i].empty()) one += "host=" + conninfo_value(hosts[i]) + " ";
    if (i < addrs.size() && !addrs[i].empty()) one += "hostaddr=" + conninfo_value(addrs[i]) + " ";
    // One port for every host, or one each.
    const std::string port = ports.size() == 1 ? ports[0] : i < ports.size() ? ports[i] : "";
    if (!port.empty()) one += "port=" + conninfo_value(port) + " ";
    out.push_back(one);
  }
  return out;
}

}  // namespace outbox::pg
