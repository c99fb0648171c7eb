#include "outbox/app/options.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>

#include "flags.hpp"
#include "outbox/mapping/mapper.hpp"
#include "outbox/mapping/topic_template.hpp"

namespace outbox::app {

// ---------------------------------------------------------------------------------------------
// The table-driven parser (flags.hpp).
namespace flags {

UsageError invalid(const std::string& flag, const std::string& noun, const std::string& text,
                   const std::string& expected) {
  return UsageError(flag + ": invalid " + noun + " '" + text + "' (" + expected + ")");
}

UsageError unknown(const std::string& flag, const std::string& noun, const std::string& text,
                   const std::vector<std::string>& choices) {
  return UsageError(flag + ": unknown " + noun + " '" + text + "' (expected " + one_of(choices) +
                    ")");
}

UsageError malformed(const std::string& flag, const std::string& form, const std::string& text) {
  return UsageError(flag + ": expected " + form + ", got '" + text + "'");
}

UsageError rejected(const std::string& flag, const std::string& reason) {
  return UsageError(flag + ": " + reason);
}

std::string one_of(const std::vector<std::string>& words) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

void append_row(std::string& out, const std::string& label, const std::string& text) {
  constexpr std::size_t kColumn = 33;
  std::string line = "  " + label;
  if (line.size() + 1 > kColumn) {
    out += line + "\n";
    line.clear();
  }
  line.resize(kColumn, ' ');
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = text.find('\n', begin);
    out += line + text.substr(begin, end - begin) + "\n";
    if (end == std::string::npos) break;
    line.assign(kColumn, ' ');
    begin = end + 1;
  }
}

std::string help(const Table& table) {
  std::string out;
  for (const Flag& f : table) {
    append_row(out, f.metavar.empty() ? f.name : f.name + " " + f.metavar, f.help);
  }
  return out;
}

std::string env_name(const Flag& flag) {
  if (!flag.from_env || flag.stops || flag.name.rfind("--", 0) != 0) return "";
  std::string out = kEnvPrefix;
  for (char c : flag.name.substr(2)) {
    out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

void parse(const std::vector<std::string>& args, const Table& table, const Environment& env) {
  const auto find = [&](const std::string& arg) -> const Flag* {
    for (const Flag& f : table) {
      if (f.name == arg || f.alias == arg) return &f;
    }
    return nullptr;
  };
  std::vector<const Flag*> given;                        // rows whose last value was not empty
  std::vector<std::pair<const Flag*, UsageError>> late;  // errors of deferred rows
  bool stopped = false;
  // The environment first, so that the command line wins.
  for (const Flag& f : table) {
    const std::string var = env ? env_name(f) : "";
    if (var.empty()) continue;
    const std::optional<std::string> value = env(var);
    if (!value) continue;
    const std::string label = var + " (" + f.name + ")";
    if (f.metavar.empty()) {
      static const char* const kYes[] = {"1", "true", "yes", "on"};
      static const char* const kNo[] = {"", "0", "false", "no", "off"};
      const auto is = [&](const auto& words) {
        return std::find(std::begin(words), std::end(words), *value) != std::end(words);
      };
      if (is(kNo)) continue;
      if (!is(kYes))
        throw invalid(label, "switch value", *value, "expected 1, true, yes or 0, false, no");
    }
    try {
      f.apply(label, *value);
    } catch (const UsageError& e) {
      if (!f.deferred) throw;
      late.emplace_back(&f, e);
    }
    if (f.metavar.empty() || !value->empty()) given.push_back(&f);
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::optional<std::string> inline_value;
    if (arg.rfind("--", 0) == 0) {
      if (auto eq = arg.find('='); eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
    } else if (arg.size() > 2 && arg[0] == '-') {
      if (const Flag* f = find(arg.substr(0, 2)); f && !f->metavar.empty()) {
        inline_value = arg.substr(2);
        arg = arg.substr(0, 2);
      }
    }
    const Flag* f = find(arg);
    if (!f) {
      throw UsageError((arg.rfind("-", 0) == 0 ? "unknown flag " : "unexpected argument ") + arg +
                       " (see --help)");
    }
    if (f->metavar.empty()) {
      if (inline_value) throw rejected(arg, "takes no value");
    } else if (!inline_value) {
      if (i + 1 >= args.size()) throw rejected(arg, "missing value");
      inline_value = args[++i];
    }
    const std::string value = inline_value.value_or("");
    std::erase_if(late, [&](const auto& e) { return e.first == f; });
    try {
      f->apply(f->name, value);
    } catch (const UsageError& e) {
      if (!f->deferred) throw;
      late.emplace_back(f, e);
    }
    std::erase(given, f);
    if (f->metavar.empty() || !value.empty()) given.push_back(f);
    stopped = stopped || f->stops;
  }
  if (stopped) return;
  for (const Flag& f : table) {
    if (!f.required.empty() && std::find(given.begin(), given.end(), &f) == given.end()) {
      throw rejected(f.name, "required (" + f.required + ")");
    }
  }
  for (const Flag& f : table) {
    for (const auto& [row, error] : late) {
      if (row == &f) throw error;
    }
  }
}

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

namespace {
// librdkafka's property names: lower case words, dots, underscores, digits. Anything else is no
// property of librdkafka, whose error would quote it (maybe a secret typed in the wrong place).
bool property_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}
}  // namespace

Flag property(std::string name, std::vector<std::pair<std::string, std::string>>& target,
              std::string help) {
  return Flag(std::move(name), "PROPERTY=VALUE", std::move(help),
              [&target](const std::string& flag, const std::string& value) {
                auto eq = value.find('=');
                if (eq == std::string::npos || eq == 0) {
                  throw rejected(flag,
                                 "expected PROPERTY=VALUE (the value is not shown: it may "
                                 "hold a secret)");
                }
                if (!property_name(std::string_view(value).substr(0, eq))) {
                  throw rejected(flag,
                                 "expected PROPERTY=VALUE with a librdkafka property name "
                                 "(lower case, digits, '.', '_') before '=' (the value is "
                                 "not shown: it may hold a secret)");
                }
                target.emplace_back(value.substr(0, eq), value.substr(eq + 1));
              })
      .argv_only();
}

void check_kafka_properties(const std::vector<std::pair<std::string, std::string>>& properties,
                            bool allowed, const std::string& source) {
  if (allowed) return;
  struct Unsafe {
    std::string_view name;
    std::string_view does;
  };
  static constexpr Unsafe kUnsafe[] = {
      {"plugin.library.paths", "loads shared libraries into the relay"},
      {"sasl.kerberos.kinit.cmd", "is a shell command librdkafka runs"},
      {"ssl.engine.location", "loads an OpenSSL engine library into the relay"},
      {"ssl.providers", "loads OpenSSL provider modules into the relay"},
  };
  for (const auto& [key, value] : properties) {
    for (const Unsafe& u : kUnsafe) {
      if (key == u.name) {
        throw rejected(source, "property " + key + " " + std::string(u.does) +
                                   ": refused unless --unsafe-kafka-config is given");
      }
    }
    // The default sasl.kerberos.kinit.cmd passes both to /bin/sh.
    if (key == "sasl.kerberos.principal" || key == "sasl.kerberos.keytab") {
      const bool plain = std::all_of(value.begin(), value.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) ||
               std::string_view("._-/@:+=,").find(c) != std::string_view::npos;
      });
      if (!plain) {
        throw rejected(source, "property " + key +
                                   " holds shell metacharacters, and librdkafka's kinit command "
                                   "passes it to /bin/sh: refused unless --unsafe-kafka-config "
                                   "is given (the value is not shown)");
      }
    }
  }
}

Flag properties_file(std::string name, std::vector<std::pair<std::string, std::string>>& target,
                     std::vector<std::string>& warnings, std::string help) {
  return {std::move(name), "FILE", std::move(help),
          [&target, &warnings](const std::string& flag, const std::string& path) {
            if (path.empty()) throw rejected(flag, "must not be empty");
            // Without blocking: a FIFO would wait for a writer. Checked on what was opened.
            const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
            if (fd < 0) {
              throw rejected(flag, "cannot read " + path + ": " + std::strerror(errno));
            }
            struct stat st {};
            const int stat_rc = ::fstat(fd, &st);
            const int stat_errno = errno;
            if (stat_rc != 0 || !S_ISREG(st.st_mode)) {
              ::close(fd);
              throw rejected(flag, stat_rc != 0
                                       ? "cannot read " + path + ": " + std::strerror(stat_errno)
                                       : path + " is not a regular file");
            }
            // Its group may read it only when that is the relay's own primary group (a
            // Kubernetes secret volume with fsGroup: mode 0440, group = the pod's).
            const bool group_reads = (st.st_mode & S_IRGRP) != 0 && st.st_gid != ::getegid();
            if ((st.st_mode & S_IROTH) != 0 || group_reads) {
              warnings.push_back(flag + ": " + path +
                                 " may be read by its group or by others (it may hold secrets: "
                                 "chmod 600 it, or use systemd credentials)");
            }
            std::string content;
            char buf[4096];
            for (;;) {
              const ssize_t n = ::read(fd, buf, sizeof buf);
              if (n < 0 && errno == EINTR) continue;
              if (n < 0) {
                const int read_errno = errno;
                ::close(fd);
                throw rejected(flag, "cannot read " + path + ": " + std::strerror(read_errno));
              }
              if (n == 0) break;
              content.append(buf, static_cast<std::size_t>(n));
              if (content.size() > (1u << 20)) {
                ::close(fd);
                throw rejected(flag, path + " is larger than 1 MiB");
              }
            }
            ::close(fd);
            std::istringstream in(content);
            const auto trim = [](std::string_view s) {
              const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
              while (!s.empty() && blank(s.front())) s.remove_prefix(1);
              while (!s.empty() && blank(s.back())) s.remove_suffix(1);
              return std::string(s);
            };
            std::vector<std::pair<std::string, std::string>> read;
            std::string line;
            for (std::size_t number = 1; std::getline(in, line); ++number) {
              const std::string text = trim(line);
              if (text.empty() || text[0] == '#') continue;
              const auto eq = text.find('=');
              const std::string where = path + ":" + std::to_string(number);
              // The line itself is never shown: it may hold a password.
              if (eq == std::string::npos) {
                throw rejected(flag, where + ": expected PROPERTY=VALUE (the line is not shown)");
              }
              std::string key = trim(std::string_view(text).substr(0, eq));
              if (key.empty()) throw rejected(flag, where + ": no property name before '='");
              if (!property_name(key)) {
                throw rejected(flag, where + ": not a librdkafka property name before '=' (the " +
                                         "line is not shown)");
              }
              read.emplace_back(std::move(key), trim(std::string_view(text).substr(eq + 1)));
            }
            if (in.bad()) {
              throw rejected(flag, "cannot read " + path + ": " + std::strerror(errno));
            }
            target = std::move(read);
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
                  state->error = rejected(flag, "table " + s + "." + t + " given twice");
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

Table mapping_flags(mapping::MapperConfig& m, std::string table_help) {
  return {
      flags::tables("--table", m.schema, m.table, m.more_tables, std::move(table_help)),
      flags::topic_template("--topic", m.topic_template,
                            "topic template over columns (default "
                            "'outbox.event.${aggregatetype}')"),
      flags::text("--column-id", "NAME", m.column_id,
                  "event id column, sent as header \"id\" (default id)"),
      flags::text("--column-aggregatetype", "NAME", m.column_aggregatetype,
                  "aggregate type column (default aggregatetype)"),
      flags::text("--column-aggregateid", "NAME", m.column_aggregateid,
                  "aggregate id column, the record key (default aggregateid)"),
      flags::text("--column-type", "NAME", m.column_type,
                  "event type column, sent as header \"type\" (default type)"),
      flags::text("--column-payload", "NAME", m.column_payload,
                  "payload column, the record value (default payload)"),
      flags::on("--require-json", m.require_json,
                "reject payloads that are not valid JSON (default off)"),
      flags::placement("--additional-placement", m.additional_placements,
                       "send one more column as a header (its text; ALIAS names the header,\n"
                       "default the column), or choose the partition by an integer column;\n"
                       "repeatable (Debezium's table.fields.additional.placement)")
          .argv_only(),
      flags::text("--column-timestamp", "NAME", m.column_timestamp,
                  "timestamp or timestamptz column that gives the record timestamp; NULL\n"
                  "falls back to the commit time (default: the commit time)"),
      flags::on("--tombstone-on-empty-payload", m.tombstone_on_empty_payload,
                "a NULL (or empty) payload gives a tombstone: the key and a null value\n"
                "(default: a NULL payload is a mapping error)"),
      flags::choice("--format", "debezium|cloudevents", m.format, "format",
                    {{"debezium", mapping::Format::kDebezium},
                     {"cloudevents", mapping::Format::kCloudEvents}},
                    "record layout: debezium (default; Debezium's outbox event router), or\n"
                    "cloudevents (CloudEvents 1.0, Kafka binary mode: ce_* headers and\n"
                    "content-type beside id and type, the payload as the value)"),
      flags::topic_template(
          "--ce-source", m.ce_source,
          "ce_source of --format cloudevents, a template over columns as --topic\n"
          "(default '/outbox/${aggregatetype}', the --column-aggregatetype)"),
      {"--content-type", "MEDIA-TYPE",
       "content-type header of --format cloudevents (default application/json,\n"
       "or application/octet-stream for a bytea payload column)",
       [&m](const std::string& flag, const std::string& v) {
         // TYPE/SUBTYPE without blanks, then parameters; printable ASCII only (a header value).
         const auto slash = v.find('/');
         const auto end = std::min(v.find(';'), v.size());
         bool ok = slash != std::string::npos && slash > 0 && slash + 1 < end;
         for (std::size_t i = 0; i < v.size(); ++i) {
           const auto c = static_cast<unsigned char>(v[i]);
           ok = ok && c >= (i < end ? 0x21 : 0x20) && c <= 0x7e;
         }
         if (!ok) {
           throw flags::invalid(flag, "media type", v,
                                "expected TYPE/SUBTYPE[;PARAMETER], e.g. application/x-protobuf");
         }
         m.content_type = v;
       }},
      flags::text("--column-traceparent", "NAME", m.column_traceparent,
                  "column sent as W3C header traceparent (NULL: none; an invalid value is\n"
                  "not sent and counted in outbox_relay_invalid_traceparent_total)"),
      flags::text("--column-tracestate", "NAME", m.column_tracestate,
                  "column sent as header tracestate with a valid traceparent (NULL or\n"
                  "empty: none); needs --column-traceparent"),
  };
}

void check_mapping(const mapping::MapperConfig& m) {
  if (m.format != mapping::Format::kCloudEvents) {
    if (!m.ce_source.empty()) throw rejected("--ce-source", "needs --format cloudevents");
    if (!m.content_type.empty()) throw rejected("--content-type", "needs --format cloudevents");
  }
  if (!m.column_tracestate.empty() && m.column_traceparent.empty()) {
    throw rejected("--column-tracestate",
                   "needs --column-traceparent (a tracestate is read only with its "
                   "traceparent)");
  }
}

}  // namespace flags

// ---------------------------------------------------------------------------------------------
// The commands' tables.
namespace {

using flags::Below;
using flags::Flag;
using flags::Table;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

Flag pg_flag(std::string& target, std::string help = "libpq conninfo string or URI [required]") {
  return flags::text("--pg", "CONNINFO", target, std::move(help))
      .require("a libpq conninfo or URI");
}

Flag help_flag(bool& target) { return flags::stop("--help", target, "this text").also("-h"); }

// A non-empty name (flags::name) shown with another metavar.
Flag named(Flag row, std::string metavar) {
  row.metavar = std::move(metavar);
  return row;
}

// The row, noting in `given` that it was given.
Flag noting(Flag row, bool& given) {
  row.apply = [&given, apply = std::move(row.apply)](const std::string& f, const std::string& v) {
    given = true;
    apply(f, v);
  };
  return row;
}

Table run_flags(Options& o) {
  auto& r = o.relay;
  auto& m = r.mapper;
  Table table = {
      pg_flag(r.conninfo,
              "libpq conninfo string or URI (replication=database is added) [required]"),
      // Required unless --nats (parse_options).
      flags::text("--brokers", "HOST:PORT[,...]", r.producer.brokers,
                  "Kafka bootstrap servers [required]"),
      flags::name("--slot", r.slot, "logical replication slot (default outbox_relay)"),
      flags::name("--publication", r.publication, "publication (default outbox_relay)"),
      flags::off("--no-create", r.create,
                 "do not create a missing publication or slot: fail instead"),
      flags::on("--failover", o.failover,
                "a failover slot (PostgreSQL 17+), kept by standbys with\n"
                "sync_replication_slots; warns when synchronized_standby_slots does not\n"
                "protect it (docs/failover.md)"),
      flags::text("--standby", "CONNINFO", o.standby,
                  "a standby whose synced copy of the slot is checked every 10s:\n"
                  "outbox_relay_failover_ready in /metrics (docs/failover.md)"),
      flags::properties_file(
          "--kafka-config", o.kafka_config, o.warnings,
          "librdkafka properties from a file (PROPERTY=VALUE lines, # comments,\n"
          "as kcat -F), e.g. security.protocol, sasl.username, sasl.password;\n"
          "-X overrides it; a regular file (warned when group or others may read it)"),
      flags::on("--unsafe-kafka-config", o.unsafe_kafka_config,
                "accept librdkafka properties that run a command or load code\n"
                "(plugin.library.paths, sasl.kerberos.kinit.cmd, ssl.engine.location,\n"
                "ssl.providers): refused without it")
          .argv_only(),
  };
  // The mapping rows, shared with reconcile; run notes whether --table was given (--messages
  // alone relays no table).
  for (Flag& f :
       flags::mapping_flags(m,
                            "outbox table (default public.outbox; none with --messages alone);\n"
                            "repeatable: the tables' events are relayed in one commit order\n"
                            "through one slot, mapped alike")) {
    table.push_back(f.name == "--table" ? noting(std::move(f), o.table_given) : std::move(f));
  }
  table.push_back(named(flags::name("--messages", m.message_prefix,
                                    "also relay transactional logical decoding messages with this "
                                    "prefix\n(pg_logical_emit_message(true, PREFIX, envelope), "
                                    "PostgreSQL 14+);\nwithout --table, only them (default: none);"
                                    "\nrefused while PUBLIC may emit (setup --messages)"),
                        "PREFIX"));
  table.push_back(
      flags::choice("--message-format", "auto|json|protobuf", m.message_format, "format",
                    {{"auto", mapping::MessageFormat::kAuto},
                     {"json", mapping::MessageFormat::kJson},
                     {"protobuf", mapping::MessageFormat::kProtobuf}},
                    "envelope of --messages: protobuf outbox.v1.Event, a JSON object, or auto\n"
                    "(JSON when the content starts with '{', else protobuf; the default)"));
  Table rest = {
      flags::property("-X", r.producer.properties,
                      "librdkafka producer property, repeatable (e.g. -X linger.ms=10)"),
      flags::duration("--status-interval", r.status_interval,
                      "standby status update period while idle (default 10s);\n"
                      "acknowledged events are confirmed within about a second\n"
                      "whatever it is",
                      {milliseconds(1), Below::kInvalid}),
      flags::duration("--read-pause", r.read_pause,
                      "while the stream is busy, pause up to this long before reading\n"
                      "the socket again, so WAL arrives in large segments (default\n"
                      "500us; 0 reads at once)"),
      flags::duration("--shutdown-timeout", r.shutdown_timeout,
                      "how long a stop may take: up to half of it reading on to the\n"
                      "end of the transaction at hand, the rest for deliveries\n"
                      "(default 30s)"),
      flags::duration("--publication-check-interval", r.publication_check_interval,
                      "longest time between two checks, while streaming, that the\n"
                      "publication publishes every insert into --table (default 30s;\n"
                      "the slot is never confirmed past the last check that passed)",
                      {seconds(1), Below::kIsBelow}),
      flags::count("--max-inflight-events", r.max_inflight_events,
                   "stop reading WAL beyond this many unacknowledged events (default 20000)"),
      flags::size("--max-inflight-bytes", r.max_inflight_bytes,
                  "... or beyond this many unacknowledged bytes (default 16MiB)"),
      flags::choice("--on-error", "fail|dlq", r.on_error, "policy",
                    {{"fail", relay::OnError::kFail}, {"dlq", relay::OnError::kDlq}},
                    "an event that cannot be mapped or delivered for good: stop with exit code 3\n"
                    "(fail, the default), or publish it to --dlq-topic with the error (dlq)"),
      flags::name("--dlq-topic", r.dlq_topic,
                  "dead-letter topic for --on-error dlq (default outbox.dlq)"),
      flags::choice("--delivery", "at-least-once|exactly-once", r.delivery, "delivery",
                    {{"at-least-once", relay::DeliveryMode::kAtLeastOnce},
                     {"exactly-once", relay::DeliveryMode::kExactlyOnce}},
                    "at-least-once (default), or exactly-once: Kafka transactions carrying\n"
                    "whole PostgreSQL transactions and a checkpoint (read them with\n"
                    "isolation.level=read_committed)"),
      flags::text("--transactional-id", "ID", r.producer.transactional_id,
                  "transactional.id for --delivery exactly-once (default outbox-relay.SLOT);\n"
                  "the relay also uses ID#2 (two producers take turns)"),
      flags::name("--checkpoint-topic", r.checkpoint_topic,
                  "compacted topic of --delivery exactly-once's checkpoints (default\n"
                  "outbox-relay.checkpoints)"),
      flags::duration("--transaction-interval", r.transaction_interval,
                      "longest time a Kafka transaction stays open while events flow, for\n"
                      "--delivery exactly-once (default 100ms)",
                      {milliseconds(1), Below::kInvalid}),
      {"--metrics-addr", "HOST:PORT|off",
       "HTTP listener for /metrics, /healthz, /readyz (default 127.0.0.1:9187;\n"
       "when the default address is taken the relay runs without it)",
       [&o](const std::string& flag, const std::string& v) {
         o.metrics_addr_explicit = true;
         if (v == "off") {
           o.metrics_addr.reset();
         } else {
           o.metrics_addr = parse_listen_address(flag, v);
         }
       }},
      flags::choice<std::string>("--log-level", "LEVEL", o.log_level, "level",
                                 {{"trace", "trace"},
                                  {"debug", "debug"},
                                  {"info", "info"},
                                  {"warn", "warn"},
                                  {"error", "error"},
                                  {"off", "off"}},
                                 "trace, debug, info, warn, error or off (default info)"),
      flags::choice("--log-format", "text|json", o.log_format, "format",
                    {{"text", LogFormat::kText}, {"json", LogFormat::kJson}},
                    "log line format on stderr (default text)"),
      flags::duration("--summary-interval", o.summary_interval,
                      "period of the summary log line while streaming, 0 for none (default 1m)"),
      flags::duration("--backlog-interval", o.backlog_interval,
                      "period of the backlog count for /metrics (pending events and the age of\n"
                      "the oldest, from a temporary copy of the slot, as `status` counts\n"
                      "them), 0 for none (default 1m)"),
      flags::count("--backlog-scan-limit", o.backlog_scan_limit,
                   "pgoutput messages one backlog count reads at most; beyond it the count is\n"
                   "a lower bound, the oldest event's age stays exact (default 10000)"),
      flags::text("--nats", "URL[,URL...]", r.nats.urls,
                  "NATS JetStream servers (nats:// or tls://) to publish to instead of\n"
                  "--brokers: subject = the topic template, Nats-Msg-Id = the event id\n"
                  "(docs/jetstream.md)"),
      flags::text("--nats-creds", "FILE", r.nats.credentials_file,
                  "NATS credentials file (user JWT and NKey seed) for --nats"),
      flags::text("--nats-nkey", "FILE", r.nats.nkey_seed_file,
                  "file holding the NATS user NKey seed (SU...) for --nats"),
      flags::text("--nats-tls-ca", "FILE", r.nats.tls_ca_file,
                  "CA certificates (PEM) to verify the NATS servers with; implies TLS"),
      flags::text("--nats-tls-cert", "FILE", r.nats.tls_cert_file,
                  "client certificate (PEM) for NATS mutual TLS, with --nats-tls-key"),
      flags::text("--nats-tls-key", "FILE", r.nats.tls_key_file,
                  "private key (PEM) of --nats-tls-cert"),
      help_flag(o.help),
      flags::stop("--version", o.version, "print the version"),
  };
  table.insert(table.end(), std::make_move_iterator(rest.begin()),
               std::make_move_iterator(rest.end()));
  return table;
}

Table setup_flags(SetupOptions& o) {
  return {
      pg_flag(o.conninfo),
      flags::name("--slot", o.slot, "logical replication slot (default outbox_relay)"),
      flags::name("--publication", o.publication, "publication (default outbox_relay)"),
      noting(flags::table("--table", o.schema, o.table,
                          "outbox table (default public.outbox; none with --messages alone)"),
             o.table_given),
      flags::on("--create-table", o.create_table, "create the outbox table if it does not exist"),
      flags::on("--failover", o.failover,
                "create the slot as a failover slot (PostgreSQL 17+); refused unless the\n"
                "primary's synchronized_standby_slots protects it (docs/failover.md)"),
      named(flags::name("--messages", o.message_prefix,
                        "install outbox.emit(), which emits messages with this prefix for\n"
                        "`outbox-relay --messages PREFIX`; without --table no table is needed\n"
                        "and the publication is created empty; revokes EXECUTE on\n"
                        "pg_logical_emit_message from PUBLIC (needs a superuser)"),
            "PREFIX"),
      Flag("--message-writer", "ROLE",
           "with --messages: a role that may emit messages (EXECUTE on\n"
           "pg_logical_emit_message and outbox.emit); repeatable",
           [&o](const std::string& flag, const std::string& value) {
             if (value.empty()) throw flags::rejected(flag, "must not be empty");
             o.message_writers.push_back(value);
           })
          .argv_only(),
      help_flag(o.help),
  };
}

Table status_flags(StatusOptions& o) {
  return {
      pg_flag(o.conninfo),
      flags::name("--slot", o.slot, "logical replication slot (default outbox_relay)"),
      flags::name("--publication", o.publication,
                  "publication the relay reads (default outbox_relay)"),
      flags::table("--table", o.schema, o.table,
                   "outbox table; inserts into its partitions count too (default public.outbox)"),
      flags::on("--json", o.json, "one JSON object instead of the table"),
      flags::text("--standby", "CONNINFO", o.standby,
                  "a standby: unhealthy unless it holds a synced, persistent copy of the\n"
                  "failover slot (docs/failover.md)"),
      flags::size("--max-retained", o.max_retained_bytes,
                  "unhealthy when the slot retains more WAL than this (default 1GiB)"),
      flags::count("--max-pending", o.max_pending,
                   "unhealthy when more than N events are pending (default: no limit)"),
      flags::duration("--max-age", o.max_age,
                      "unhealthy when the oldest pending event committed longer ago than\n"
                      "this, e.g. 5m (default: no limit)"),
      flags::count("--scan-limit", o.scan_limit,
                   "read at most about N changes (pgoutput messages) when counting;\n"
                   "past it the counts are lower bounds, shown as \">= N\" (default 100000)"),
      help_flag(o.help),
  };
}

Table drop_flags(DropOptions& o) {
  return {
      pg_flag(o.conninfo),
      flags::name("--slot", o.slot, "logical replication slot (default outbox_relay)"),
      flags::name("--publication", o.publication, "publication (default outbox_relay)"),
      flags::on("--yes", o.yes, "really drop (refuses without it)").argv_only(),
      help_flag(o.help),
  };
}

Table prune_flags(PruneOptions& o) {
  return {
      pg_flag(o.conninfo),
      flags::name("--slot", o.slot,
                  "logical replication slot the relay uses (default outbox_relay)"),
      flags::table("--table", o.schema, o.table, "outbox table (default public.outbox)"),
      flags::duration("--older-than", o.older_than, "retention, e.g. 7d, 12h, 30m [required]")
          .require("the retention, e.g. 7d; rows younger are kept"),
      flags::name("--column-time", o.column_time,
                  "timestamp column of the outbox the retention is measured on\n"
                  "(default created_at; prune refuses when the table has no such column)"),
      flags::count("--batch", o.batch, "rows per DELETE transaction (default 1000)"),
      flags::duration("--pause", o.pause, "pause between two batches (default 100ms)"),
      flags::on("--dry-run", o.dry_run, "only count what would be deleted or dropped"),
      help_flag(o.help),
  };
}

template <class Opts>
Opts parse_with(Table (*table_of)(Opts&), const std::vector<std::string>& args,
                const flags::Environment& env) {
  Opts o;
  flags::parse(args, table_of(o), env);
  return o;
}

template <class Opts>
std::string flag_help(Table (*table_of)(Opts&)) {
  Opts o;
  return flags::help(table_of(o));
}

struct CommandWord {
  const char* word;
  Command command;
  const char* summary;
};

const CommandWord kCommands[] = {
    {"run", Command::kRun, "relay events (the default)"},
    {"setup", Command::kSetup,
     "create the publication and the slot (and the table with --create-table)"},
    {"status", Command::kStatus,
     "show the slot's state and the pending events; exit 1 when it is missing,\n"
     "lost, retains too much WAL, or the backlog exceeds --max-pending/--max-age"},
    {"drop", Command::kDrop, "drop the slot and the publication (needs --yes)"},
    {"reconcile", Command::kReconcile,
     "list (and with --repair publish) outbox rows of a time window missing from Kafka"},
    {"prune", Command::kPrune,
     "delete outbox rows past a retention that the slot certainly confirmed"},
};

}  // namespace

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

std::string usage() {
  std::string commands;
  for (const CommandWord& c : kCommands) flags::append_row(commands, c.word, c.summary);
  return R"(outbox-relay: relays committed inserts of a PostgreSQL outbox table to Kafka, in commit order,
confirming the replication slot only after the broker acknowledged every event up to it.

usage: outbox-relay [run] --pg CONNINFO --brokers HOST:PORT[,...] [flags]
       outbox-relay setup|status|drop|reconcile|prune --pg CONNINFO [flags]
                                         (see outbox-relay COMMAND --help)

commands:
)" + commands +
         R"(
flags of run:
)" + flag_help(run_flags) +
         R"(
environment: every flag --NAME-X but -X and --additional-placement (repeatable), --help, --version,
drop --yes and reconcile --repair can also be set as OUTBOX_RELAY_NAME_X (e.g.
OUTBOX_RELAY_KAFKA_CONFIG, OUTBOX_RELAY_PG); the command line wins. libpq reads PGPASSWORD
and PGPASSFILE (~/.pgpass) for the --pg password.

exit codes: 0 stopped by a signal, 1 error, 2 bad flags, 3 event could not be mapped or delivered,
            4 replication slot lost, 5 the publication or table would hide outbox inserts (or the
            publication was altered while streaming): nothing past them is confirmed
)";
}

std::string usage(Command command) {
  switch (command) {
    case Command::kRun:
      return usage();
    case Command::kSetup:
      return R"(outbox-relay setup: creates the publication (FOR TABLE the outbox table, inserts only, partitions
under the table's name) and checks that it publishes every insert into the table, then creates the
logical replication slot (pgoutput) the relay uses; with --create-table also the outbox table with
the default columns (id uuid, aggregatetype, aggregateid, type, payload jsonb). Prints what it did.
Idempotent: what exists is left as it is.

usage: outbox-relay setup --pg CONNINFO [flags]

)" + flag_help(setup_flags) +
             R"(
exit codes: 0 done (or nothing to do), 1 error (the message names the object and the server's error),
            2 bad flags, 5 the publication would hide inserts into the table from the relay
)";
    case Command::kStatus:
      return R"(outbox-relay status: the slot's state from pg_replication_slots and pg_stat_replication: active
and by which PID, confirmed_flush_lsn, restart_lsn, WAL retained for it, wal_status, lag; and the
backlog: the outbox events committed but not yet confirmed by the slot, and the commit time and
age of the oldest. The backlog is counted without moving the slot, also while a relay holds it:
the slot is copied to a temporary slot (it needs one free replication slot) and the copy is
decoded up to the current WAL position, at most --scan-limit changes.

usage: outbox-relay status --pg CONNINFO [flags]

)" + flag_help(status_flags) +
             R"(
exit codes: 0 healthy, 1 slot missing, lost, retaining more than --max-retained, or more pending
            events than --max-pending or older than --max-age (or an error), 2 bad flags
)";
    case Command::kReconcile:
      return reconcile_usage();
    case Command::kDrop:
      return R"(outbox-relay drop: drops the logical replication slot and the publication. The server then
frees the WAL the slot retained; events committed but not yet relayed are not relayed any more.
Stop the relay first: a slot in use cannot be dropped.

usage: outbox-relay drop --pg CONNINFO --yes [flags]

)" + flag_help(drop_flags) +
             R"(
exit codes: 0 dropped (or already absent), 1 error or --yes missing, 2 bad flags
)";
    case Command::kPrune:
      return R"(outbox-relay prune: deletes outbox rows older than --older-than (by --column-time) that the slot
has certainly confirmed, so certainly relayed: rows whose inserting transaction (xmin) is older
than the slot's catalog_xmin. Every transaction older than catalog_xmin committed before a WAL
position the slot has confirmed. Rows of transactions the slot may still send are never deleted.
Deletes run in batches of --batch rows, each its own short transaction, with --pause between them.
On a partitioned outbox, a range partition on --column-time that ends before the cutoff and whose
rows are all prunable is dropped whole instead (after locking it and checking again, with a 1s
lock timeout: a busy partition is pruned row by row; list, hash and default partitions never go).
Refuses when the slot does not exist, is lost, or has no catalog_xmin: then nothing is known.

usage: outbox-relay prune --pg CONNINFO --older-than DURATION [flags]

)" + flag_help(prune_flags) +
             R"(
exit codes: 0 done (also when nothing was prunable), 1 refused or error, 2 bad flags
)";
  }
  return usage();
}

namespace {

// The relay publishes to NATS JetStream with --nats (src/nats behind the relay's RecordSink).
constexpr bool kNatsSinkAvailable = true;

// One sink: Kafka (--brokers) or NATS JetStream (--nats), and no flag of the other.
void check_sink(const Options& o) {
  const auto& r = o.relay;
  const auto& n = r.nats;
  if (n.urls.empty()) {
    if (r.producer.brokers.empty())
      throw flags::rejected("--brokers", "required (HOST:PORT[,...])");
    const std::pair<const std::string*, const char*> nats_only[] = {
        {&n.credentials_file, "--nats-creds"},
        {&n.nkey_seed_file, "--nats-nkey"},
        {&n.tls_ca_file, "--nats-tls-ca"},
        {&n.tls_cert_file, "--nats-tls-cert"},
        {&n.tls_key_file, "--nats-tls-key"}};
    for (const auto& [value, flag] : nats_only) {
      if (!value->empty()) throw flags::rejected(flag, "needs --nats");
    }
    return;
  }
  const char* kafka_flag = nullptr;
  if (!r.producer.brokers.empty()) {
    kafka_flag = "--brokers";
  } else if (r.delivery == relay::DeliveryMode::kExactlyOnce) {
    kafka_flag = "--delivery exactly-once";
  } else if (!r.producer.transactional_id.empty()) {
    kafka_flag = "--transactional-id";
  } else if (!o.kafka_config.empty()) {
    kafka_flag = "--kafka-config";
  } else if (!r.producer.properties.empty()) {
    kafka_flag = "-X";
  }
  if (kafka_flag != nullptr) {
    throw flags::rejected("--nats", std::string("cannot be used with ") + kafka_flag +
                                        " (a Kafka setting; JetStream drops re-sent events "
                                        "by Nats-Msg-Id instead)");
  }
  if (!n.credentials_file.empty() && !n.nkey_seed_file.empty()) {
    throw flags::rejected("--nats-creds", "cannot be used with --nats-nkey (one identity)");
  }
  if (n.tls_cert_file.empty() != n.tls_key_file.empty()) {
    throw flags::rejected(n.tls_cert_file.empty() ? "--nats-tls-key" : "--nats-tls-cert",
                          "needs --nats-tls-cert and --nats-tls-key together");
  }
  if (!kNatsSinkAvailable) {
    throw flags::rejected("--nats",
                          "publishing to NATS JetStream is not available in this version of "
                          "outbox-relay; use --brokers");
  }
}

}  // namespace

Options parse_options(const std::vector<std::string>& args, const Environment& env) {
  Options o = parse_with(run_flags, args, env);
  auto& m = o.relay.mapper;
  if (!o.help && !o.version) {
    check_sink(o);
    // A transactional producer that never initialises its transactions refuses every record.
    if (!o.relay.producer.transactional_id.empty() &&
        o.relay.delivery != relay::DeliveryMode::kExactlyOnce) {
      throw flags::rejected("--transactional-id", "needs --delivery exactly-once");
    }
    flags::check_mapping(m);
    if (!m.message_prefix.empty()) {
      // The envelope has no CloudEvents attributes to map yet: one format for every event.
      if (m.format == mapping::Format::kCloudEvents) {
        throw flags::rejected("--messages", "is not supported with --format cloudevents yet");
      }
      if (!o.table_given) m.table.clear();  // messages only
      try {
        mapping::Mapper check(m);
        (void)check;
      } catch (const std::invalid_argument& e) {
        throw flags::rejected("--topic", e.what());
      }
    }
  }
  // The file's properties first: -X overrides them.
  auto& p = o.relay.producer.properties;
  p.insert(p.begin(), o.kafka_config.begin(), o.kafka_config.end());
  if (!o.help && !o.version) {
    flags::check_kafka_properties(p, o.unsafe_kafka_config, "-X, --kafka-config");
  }
  return o;
}

CommandLine parse_command_line(const std::vector<std::string>& args, const Environment& env) {
  CommandLine cl;
  if (args.empty() || args[0].rfind("-", 0) == 0) {
    cl.run = parse_options(args, env);
    return cl;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  const CommandWord* found = nullptr;
  std::vector<std::string> words;
  for (const CommandWord& c : kCommands) {
    if (args[0] == c.word) found = &c;
    words.emplace_back(c.word);
  }
  if (!found) {
    throw UsageError("unknown command " + args[0] + " (expected " + flags::one_of(words) +
                     "; see --help)");
  }
  cl.command = found->command;
  switch (cl.command) {
    case Command::kRun:
      cl.run = parse_options(rest, env);
      break;
    case Command::kSetup:
      cl.setup = parse_with(setup_flags, rest, env);
      if (!cl.setup.message_writers.empty() && cl.setup.message_prefix.empty() && !cl.setup.help) {
        throw flags::rejected("--message-writer", "needs --messages PREFIX");
      }
      break;
    case Command::kStatus:
      cl.status = parse_with(status_flags, rest, env);
      break;
    case Command::kDrop:
      cl.drop = parse_with(drop_flags, rest, env);
      break;
    case Command::kReconcile:
      cl.reconcile = parse_reconcile(rest, env);
      break;
    case Command::kPrune:
      cl.prune = parse_with(prune_flags, rest, env);
      break;
  }
  return cl;
}

// The tables for the reference pages (reference.cpp).
void flags::visit_table(Command command, const std::function<void(const Table&)>& visit) {
  CommandLine storage;
  switch (command) {
    case Command::kRun:
      visit(run_flags(storage.run));
      return;
    case Command::kSetup:
      visit(setup_flags(storage.setup));
      return;
    case Command::kStatus:
      visit(status_flags(storage.status));
      return;
    case Command::kDrop:
      visit(drop_flags(storage.drop));
      return;
    case Command::kReconcile:
      visit(flags::reconcile_table(storage.reconcile));
      return;
    case Command::kPrune:
      visit(prune_flags(storage.prune));
      return;
  }
}

}  // namespace outbox::app
