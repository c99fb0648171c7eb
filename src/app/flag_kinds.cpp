// The value kinds of the flag tables (flag_kinds.hpp): each parses, bounds and stores one kind of
// value. Pure: no I/O (the one kind that reads a file is in properties_file.cpp).
#include "flag_kinds.hpp"

#include <boost/asio/ip/address.hpp>
#include <cctype>
#include <charconv>
#include <memory>
#include <optional>
#include <string_view>

#include "outbox/common/qualified_name.hpp"
#include "outbox/mapping/topic_template.hpp"

namespace outbox::app {
namespace flags {

namespace {

std::optional<std::uint64_t> read_number(const std::string& text) {
  std::uint64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty()) return std::nullopt;
  return n;
}

// A number and a unit; nullopt when the text does not start with a number.
std::optional<std::pair<std::uint64_t, std::string>> read_quantity(const std::string& text) {
  std::uint64_t n = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, n);
  if (ec != std::errc() || p == text.data()) return std::nullopt;
  return std::pair{n, std::string(p, end)};
}

std::optional<std::chrono::microseconds> read_duration(const std::string& text) {
  static const std::pair<const char*, std::uint64_t> kUnits[] = {
      {"us", 1},         {"ms", 1000},        {"s", 1'000'000},     {"", 1'000'000},
      {"m", 60'000'000}, {"min", 60'000'000}, {"h", 3'600'000'000}, {"d", 86'400'000'000}};
  const auto q = read_quantity(text);
  if (!q) return std::nullopt;
  for (const auto& [unit, per] : kUnits) {
    if (q->second == unit) return std::chrono::microseconds(q->first * per);
  }
  return std::nullopt;
}

// The bound as the user writes it: "1ms", "1s".
std::string format_duration(std::chrono::microseconds d) {
  static const std::pair<const char*, std::int64_t> kUnits[] = {{"d", 86'400'000'000},
                                                                {"h", 3'600'000'000},
                                                                {"m", 60'000'000},
                                                                {"s", 1'000'000},
                                                                {"ms", 1000}};
  for (const auto& [unit, per] : kUnits) {
    if (d.count() % per == 0) return std::to_string(d.count() / per) + unit;
  }
  return std::to_string(d.count()) + "us";
}

Flag duration_row(std::string name, std::string help, MinDuration bound,
                  std::function<void(std::chrono::microseconds)> store) {
  auto apply = [bound, store = std::move(store)](const std::string& flag,
                                                 const std::string& value) {
    const bool named_bound = bound.below == Below::kInvalid && bound.min.count() > 0;
    const auto d = read_duration(value);
    if (!d || (named_bound && *d < bound.min)) {
      throw invalid(flag, "duration", value,
                    "expected e.g. 500ms, 10s, 1m, 7d" +
                        (named_bound ? ", at least " + format_duration(bound.min) : ""));
    }
    if (*d < bound.min) {
      throw rejected(flag, bound.below == Below::kIsBelow
                               ? "'" + value + "' is below " + format_duration(bound.min)
                               : "must be positive");
    }
    store(*d);
  };
  return {std::move(name), "DURATION", std::move(help), std::move(apply)};
}

std::chrono::milliseconds to_millis(std::chrono::microseconds d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d);
}

Flag count_row(std::string name, std::string help, std::uint64_t min,
               std::function<void(std::uint64_t)> store) {
  auto apply = [min, store = std::move(store)](const std::string& flag, const std::string& value) {
    const auto n = read_number(value);
    if (!n || *n < min) {
      throw invalid(flag, "count", value,
                    min == 0   ? "expected a non-negative integer"
                    : min == 1 ? "expected a positive integer"
                               : "expected an integer of at least " + std::to_string(min));
    }
    store(*n);
  };
  return {std::move(name), "N", std::move(help), std::move(apply)};
}

}  // namespace

Flag text(std::string name, std::string metavar, std::string& target, std::string help) {
  return {std::move(name), std::move(metavar), std::move(help),
          [&target](const std::string&, const std::string& value) { target = value; }};
}

Flag name(std::string name, std::string& target, std::string help) {
  return Flag(std::move(name), "NAME", std::move(help),
              [&target](const std::string& flag, const std::string& value) {
                if (value.empty()) throw rejected(flag, "must not be empty");
                target = value;
              })
      .defer();
}

Flag on(std::string name, bool& target, std::string help) {
  return {std::move(name), "", std::move(help),
          [&target](const std::string&, const std::string&) { target = true; }};
}

Flag off(std::string name, bool& target, std::string help) {
  return {std::move(name), "", std::move(help),
          [&target](const std::string&, const std::string&) { target = false; }};
}

Flag stop(std::string name, bool& target, std::string help) {
  Flag f = on(std::move(name), target, std::move(help));
  f.stops = true;
  return f;
}

Flag duration(std::string name, std::chrono::microseconds& target, std::string help,
              MinDuration bound) {
  return duration_row(std::move(name), std::move(help), bound,
                      [&target](std::chrono::microseconds d) { target = d; });
}

Flag duration(std::string name, std::chrono::milliseconds& target, std::string help,
              MinDuration bound) {
  return duration_row(std::move(name), std::move(help), bound,
                      [&target](std::chrono::microseconds d) { target = to_millis(d); });
}

Flag duration(std::string name, std::optional<std::chrono::milliseconds>& target, std::string help,
              MinDuration bound) {
  return duration_row(std::move(name), std::move(help), bound,
                      [&target](std::chrono::microseconds d) { target = to_millis(d); });
}

Flag count(std::string name, std::uint64_t& target, std::string help, std::uint64_t min) {
  return count_row(std::move(name), std::move(help), min,
                   [&target](std::uint64_t n) { target = n; });
}

Flag count(std::string name, std::optional<std::uint64_t>& target, std::string help,
           std::uint64_t min) {
  return count_row(std::move(name), std::move(help), min,
                   [&target](std::uint64_t n) { target = n; });
}

Flag size(std::string name, std::uint64_t& target, std::string help) {
  static const std::pair<const char*, std::uint64_t> kUnits[] = {
      {"", 1},           {"KiB", 1ULL << 10}, {"k", 1ULL << 10},
      {"K", 1ULL << 10}, {"MiB", 1ULL << 20}, {"M", 1ULL << 20},
      {"m", 1ULL << 20}, {"GiB", 1ULL << 30}, {"G", 1ULL << 30},
      {"g", 1ULL << 30}};
  return {std::move(name), "SIZE", std::move(help),
          [&target](const std::string& flag, const std::string& value) {
            const auto q = read_quantity(value);
            for (const auto& [unit, per] : kUnits) {
              if (q && q->first > 0 && q->second == unit) {
                target = q->first * per;
                return;
              }
            }
            throw invalid(flag, "size", value, "expected e.g. 268435456, 512KiB, 256MiB, 1GiB");
          }};
}

Flag table(std::string name, std::string& schema, std::string& table, std::string help) {
  return Flag(std::move(name), "SCHEMA.TABLE", std::move(help),
              [&schema, &table](const std::string& flag, const std::string& value) {
                auto dot = value.find('.');
                std::string s = dot == std::string::npos ? "public" : value.substr(0, dot);
                std::string t = dot == std::string::npos ? value : value.substr(dot + 1);
                if (s.empty() || t.empty() || t.find('.') != std::string::npos) {
                  throw malformed(flag, "SCHEMA.TABLE or TABLE", value);
                }
                schema = std::move(s);
                table = std::move(t);
              })
      .defer();
}

Flag topic_template(std::string name, std::string& target, std::string help) {
  return Flag(std::move(name), "TEMPLATE", std::move(help),
              [&target](const std::string& flag, const std::string& value) {
                try {
                  mapping::TopicTemplate check(value);
                  (void)check;
                } catch (const std::invalid_argument& e) {
                  throw rejected(flag, e.what());
                }
                target = value;
              })
      .defer();
}

Flag tables(std::string name, std::string& schema, std::string& table,
            std::vector<std::pair<std::string, std::string>>& more, std::string help) {
  struct State {
    bool first = true;
    std::optional<UsageError> error;  // kept: a later good value does not clear it
  };
  auto state = std::make_shared<State>();
  return Flag(std::move(name), "SCHEMA.TABLE", std::move(help),
              [&schema, &table, &more, state](const std::string& flag, const std::string& value) {
                if (state->error) throw *state->error;
                const auto dot = value.find('.');
                std::string s = dot == std::string::npos ? "public" : value.substr(0, dot);
                std::string t = dot == std::string::npos ? value : value.substr(dot + 1);
                if (s.empty() || t.empty() || t.find('.') != std::string::npos) {
                  state->error = malformed(flag, "SCHEMA.TABLE or TABLE", value);
                  throw *state->error;
                }
                if (state->first) {
                  state->first = false;
                  schema = std::move(s);
                  table = std::move(t);
                  return;
                }
                bool twice = s == schema && t == table;
                for (const auto& [ms, mt] : more) twice = twice || (ms == s && mt == t);
                if (twice) {
                  state->error = rejected(
                      flag, "table " + common::QualifiedName{s, t}.text() + " given twice");
                  throw *state->error;
                }
                more.emplace_back(std::move(s), std::move(t));
              })
      .defer();
}

Flag placement(std::string name, std::vector<mapping::Placement>& target, std::string help) {
  return {std::move(name), "COLUMN:header|partition[:ALIAS]", std::move(help),
          [&target](const std::string& flag, const std::string& value) {
            constexpr const char* kForm = "COLUMN:header|partition[:ALIAS]";
            std::size_t start = 0;
            while (start <= value.size()) {
              const std::size_t comma = std::min(value.find(',', start), value.size());
              const std::string item = value.substr(start, comma - start);
              start = comma + 1;
              const std::size_t c1 = item.find(':');
              const std::size_t c2 = c1 == std::string::npos ? c1 : item.find(':', c1 + 1);
              if (c1 == std::string::npos || c1 == 0 ||
                  (c2 != std::string::npos &&
                   (c2 + 1 == item.size() || item.find(':', c2 + 1) != std::string::npos))) {
                throw malformed(flag, kForm, item);
              }
              mapping::Placement p;
              p.column = item.substr(0, c1);
              std::string kind = item.substr(c1 + 1, c2 == std::string::npos ? c2 : c2 - c1 - 1);
              for (char& ch : kind)
                ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
              if (kind == "header") {
                p.kind = mapping::Placement::Kind::kHeader;
              } else if (kind == "partition") {
                p.kind = mapping::Placement::Kind::kPartition;
                for (const mapping::Placement& other : target) {
                  if (other.kind == mapping::Placement::Kind::kPartition) {
                    throw rejected(flag, "a second partition placement ('" + item +
                                             "' after column " + other.column +
                                             "): one column chooses the partition");
                  }
                }
              } else if (kind == "envelope") {
                throw rejected(flag, "'" + item +
                                         "': envelope placement is not supported (the record "
                                         "value is the payload column as it is)");
              } else {
                throw unknown(flag, "placement", kind, {"header", "partition"});
              }
              p.alias = c2 == std::string::npos ? p.column : item.substr(c2 + 1);
              target.push_back(std::move(p));
            }
          }};
}

Flag time_bound(std::string name, std::optional<TimeBound>& target, std::string help) {
  return {std::move(name), "AGE|TIMESTAMP", std::move(help),
          [&target](const std::string& flag, const std::string& value) {
            target = parse_time_bound(flag, value);
          }};
}

Flag time_bound(std::string name, TimeBound& target, std::string help) {
  return {std::move(name), "AGE|TIMESTAMP", std::move(help),
          [&target](const std::string& flag, const std::string& value) {
            target = parse_time_bound(flag, value);
          }};
}

}  // namespace flags

ListenAddress parse_listen_address(const std::string& flag, const std::string& text) {
  const auto bad = [&] {
    return flags::invalid(flag, "address", text,
                          "expected HOST:PORT with an IP address, e.g. " +
                              std::string(kDefaultMetricsAddr) + ", [::1]:9187, :9187, or off");
  };
  auto colon = text.rfind(':');
  if (colon == std::string::npos) throw bad();
  std::string host = text.substr(0, colon);
  std::string port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    throw bad();
  }
  if (host.empty()) host = "0.0.0.0";
  unsigned port = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  boost::system::error_code bad_host;
  boost::asio::ip::make_address(host, bad_host);
  if (ec != std::errc() || p != port_text.data() + port_text.size() || port_text.empty() ||
      port > 65535 || bad_host) {
    throw bad();
  }
  return {host, static_cast<std::uint16_t>(port)};
}

}  // namespace outbox::app
