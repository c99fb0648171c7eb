#include "outbox/app/reconcile_options.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iterator>

#include "flags.hpp"

namespace outbox::app {
namespace {

// Reads exactly `digits` decimal digits at `pos`; advances it.
bool read_fixed(const std::string& s, std::size_t& pos, std::size_t digits, int& out) {
  if (pos + digits > s.size()) return false;
  out = 0;
  for (std::size_t i = 0; i < digits; ++i) {
    const char c = s[pos + i];
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  pos += digits;
  return true;
}

std::optional<std::int64_t> parse_timestamp(const std::string& s) {
  std::size_t pos = 0;
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  if (!read_fixed(s, pos, 4, y) || pos >= s.size() || s[pos++] != '-' ||
      !read_fixed(s, pos, 2, mo) || pos >= s.size() || s[pos++] != '-' ||
      !read_fixed(s, pos, 2, d)) {
    return std::nullopt;
  }
  const std::chrono::year_month_day date{std::chrono::year(y), std::chrono::month(mo),
                                         std::chrono::day(d)};
  if (!date.ok()) return std::nullopt;
  std::int64_t micros = 0;
  if (pos < s.size() && (s[pos] == 'T' || s[pos] == 't' || s[pos] == ' ')) {
    ++pos;
    if (!read_fixed(s, pos, 2, h) || pos >= s.size() || s[pos++] != ':' ||
        !read_fixed(s, pos, 2, mi)) {
      return std::nullopt;
    }
    if (pos < s.size() && s[pos] == ':') {
      ++pos;
      if (!read_fixed(s, pos, 2, sec)) return std::nullopt;
      if (pos < s.size() && s[pos] == '.') {
        ++pos;
        std::int64_t scale = 100'000;
        const std::size_t first = pos;
        while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
          micros += (s[pos] - '0') * scale;  // digits beyond microseconds are dropped
          scale /= 10;
          ++pos;
        }
        if (pos == first) return std::nullopt;
      }
    }
    if (h > 23 || mi > 59 || sec > 59) return std::nullopt;
  }
  std::int64_t offset_minutes = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    const int sign = s[pos++] == '-' ? -1 : 1;
    int oh = 0, om = 0;
    if (!read_fixed(s, pos, 2, oh)) return std::nullopt;
    if (pos < s.size() && s[pos] == ':') ++pos;
    if (pos < s.size() && !read_fixed(s, pos, 2, om)) return std::nullopt;
    if (oh > 23 || om > 59) return std::nullopt;
    offset_minutes = sign * (oh * 60 + om);
  }
  if (pos != s.size()) return std::nullopt;
  const std::int64_t days = std::chrono::sys_days(date).time_since_epoch().count();
  const std::int64_t seconds = days * 86'400 + h * 3600 + mi * 60 + sec - offset_minutes * 60;
  return seconds * 1'000'000 + micros;
}

std::optional<std::chrono::microseconds> parse_age(const std::string& s) {
  std::uint64_t n = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, n);
  if (ec != std::errc() || p == s.data()) return std::nullopt;
  const std::string unit(p, end);
  std::uint64_t per = 0;
  if (unit == "ms") per = 1000;
  if (unit == "s") per = 1'000'000;
  if (unit == "m" || unit == "min") per = 60'000'000;
  if (unit == "h") per = 3'600'000'000;
  if (unit == "d") per = 86'400'000'000;
  // At most about 290 years: the result stays within 64 bits.
  if (per == 0 || n > 9'000'000'000'000'000ULL / per) return std::nullopt;
  return std::chrono::microseconds(static_cast<std::int64_t>(n * per));
}

}  // namespace

TimeBound parse_time_bound(const std::string& flag, const std::string& text) {
  TimeBound bound;
  bound.text = text;
  if (auto age = parse_age(text)) {
    bound.ago = *age;
    return bound;
  }
  if (auto at = parse_timestamp(text)) {
    bound.epoch_us = *at;
    return bound;
  }
  throw flags::invalid(flag, "time", text,
                       "expected an age such as 30m, 2h, 7d, or a timestamp such as "
                       "2026-11-30T10:00:00Z; without an offset, UTC");
}

std::string format_utc(std::int64_t epoch_us) {
  using namespace std::chrono;
  const sys_time<microseconds> t{microseconds(epoch_us)};
  const sys_days day = floor<days>(t);
  const year_month_day ymd(day);
  std::int64_t rest = (t - day).count();  // microseconds into the day
  const int us = static_cast<int>(rest % 1'000'000);
  rest /= 1'000'000;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d.%06dZ",
                static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                static_cast<unsigned>(ymd.day()), static_cast<int>(rest / 3600),
                static_cast<int>(rest / 60 % 60), static_cast<int>(rest % 60), us);
  return buf;
}

namespace {

using flags::Flag;

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

flags::Table reconcile_flags(ReconcileOptions& o) {
  flags::Table table = {
      flags::text("--pg", "CONNINFO", o.conninfo, "libpq conninfo string or URI [required]")
          .require("a libpq conninfo or URI"),
      flags::text("--brokers", "HOST:PORT[,...]", o.brokers, "Kafka bootstrap servers [required]")
          .require("HOST:PORT[,...]"),
      flags::text("--column-time", "NAME", o.column_time,
                  "the rows' time column (timestamptz; timestamp is read in the\n"
                  "server's time zone) [required]")
          .require("the rows' time column, e.g. created_at"),
      time_bound("--since", o.since,
                 "window start, inclusive: 2h (two hours ago), 7d, or\n"
                 "2026-11-30T10:00:00Z (no offset: UTC) [required]")
          .require("an age such as 2h, or a timestamp"),
      time_bound("--until", o.until,
                 "window end, exclusive (default: now). With a relay running, end\n"
                 "the window a little in the past (e.g. --until 1m) so that events\n"
                 "still on their way are not reported"),
      flags::on("--repair", o.repair,
                "publish the missing events, then exit 0 if all were acknowledged")
          .argv_only(),
      flags::duration("--margin", o.margin,
                      "read Kafka from records stamped since - margin (default 1h); records\n"
                      "are stamped with their commit time, at or after the time column\n"
                      "when it is set by the database clock in the inserting transaction;\n"
                      "with --column-timestamp the topics are read from their beginning"),
      flags::duration("--timeout", o.timeout,
                      "longest wait for Kafka without progress (default 60s)",
                      {std::chrono::milliseconds(1), flags::Below::kPositive})
          .defer(),
      flags::properties_file(
          "--kafka-config", o.kafka_config, o.warnings,
          "librdkafka properties from a file (PROPERTY=VALUE lines, # comments,\n"
          "as kcat -F); -X overrides it"),
      flags::on("--unsafe-kafka-config", o.unsafe_kafka_config,
                "accept librdkafka properties that run a command or load code")
          .argv_only(),
      flags::property("-X", o.properties,
                      "librdkafka property for the consumer and the producer, repeatable"),
      flags::stop("--help", o.help, "this text").also("-h"),
  };
  // The relay's mapping rows (run's), so that a repaired record is built as the relay builds it.
  flags::Table mapping =
      flags::mapping_flags(o.mapper,
                           "outbox table (default public.outbox); repeatable, as the relay's:\n"
                           "every table's window is checked, mapped alike");
  const auto after_repair =
      std::find_if(table.begin(), table.end(), [](const Flag& f) { return f.name == "--repair"; });
  table.insert(after_repair + 1, std::make_move_iterator(mapping.begin()),
               std::make_move_iterator(mapping.end()));
  return table;
}

}  // namespace

flags::Table flags::reconcile_table(ReconcileOptions& o) { return reconcile_flags(o); }

ReconcileOptions parse_reconcile(const std::vector<std::string>& args, const Environment& env) {
  ReconcileOptions o;
  flags::parse(args, reconcile_flags(o), env);
  if (!o.help) flags::check_mapping(o.mapper);
  // The file's properties first: -X overrides them.
  o.properties.insert(o.properties.begin(), o.kafka_config.begin(), o.kafka_config.end());
  if (o.help) return o;
  flags::check_kafka_properties(o.properties, o.unsafe_kafka_config, "-X, --kafka-config");
  // Both ages or both timestamps: the order is known now (mixed ones are checked when run).
  if (o.until && o.since.ago.has_value() == o.until->ago.has_value() &&
      o.since.resolve(0) >= o.until->resolve(0)) {
    throw flags::rejected("--until", o.until->text + " is not after --since " + o.since.text);
  }
  return o;
}

std::string reconcile_usage() {
  ReconcileOptions o;
  return R"(outbox-relay reconcile: checks that every outbox row of a time window is in Kafka. Reads the rows
still in the table whose --column-time is in [--since, --until), computes each row's topic with the
relay's template and columns, reads those topics (from the first record stamped at or after
since - --margin), matches records to rows by the "id" header and prints every row Kafka lacks
(id, aggregate id, topic, time) and a summary. With --repair it publishes the missing events in
commit order (idempotent producer, acks=all, murmur2_random) and waits for every acknowledgement.
Each row goes through the relay's own mapper, fed the row's text as pgoutput sends it: given the
relay's mapping flags (--table repeated, --topic, --column-*, --require-json,
--additional-placement, --column-timestamp, --tombstone-on-empty-payload, --format, --ce-source,
--content-type, --column-traceparent, --column-tracestate; OUTBOX_RELAY_* variables too), a
repaired record is the relay's in topic, key, value, headers, partition and timestamp. Without
--column-timestamp the record is stamped with the commit time when track_commit_timestamp is on,
else with the --column-time value. A row the mapper rejects is listed as unmappable with the
relay's reason, never repaired. Not supported: events without a table (logical messages).
Use it after exit code 4 (slot lost), exit code 5 (publication or table refused), a database
restore, or a move from Debezium. Progress goes to stderr.

usage: outbox-relay reconcile --pg CONNINFO --brokers HOST:PORT[,...] --column-time NAME
                              --since AGE|TIMESTAMP [--until AGE|TIMESTAMP] [--repair] [flags]

)" + flags::help(reconcile_flags(o)) +
         R"(
exit codes: 0 nothing missing (or, with --repair, everything missing was published), 1 rows missing
            or unmappable, or an error, 2 bad flags
)";
}

}  // namespace outbox::app
