#include "outbox/app/options.hpp"

#include <charconv>
#include <functional>
#include <map>
#include <sstream>

#include "outbox/outbox/topic_template.hpp"

namespace outbox::app {
namespace {

std::chrono::milliseconds parse_duration(const std::string& flag, const std::string& text) {
  std::uint64_t n = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, n);
  std::string unit(p, end);
  std::uint64_t ms = 0;
  if (ec != std::errc() || p == text.data()) {
    ms = 0;
    unit = "?";
  } else if (unit == "ms") {
    ms = n;
  } else if (unit == "s" || unit.empty()) {
    ms = n * 1000;
  } else if (unit == "m" || unit == "min") {
    ms = n * 60'000;
  } else if (unit == "h") {
    ms = n * 3'600'000;
  } else {
    unit = "?";
  }
  if (unit == "?" || (flag == "--status-interval" && ms == 0)) {
    throw UsageError(flag + ": invalid duration '" + text + "' (expected e.g. 500ms, 10s, 1m" +
                     (flag == "--status-interval" ? ", more than 0)" : ")"));
  }
  return std::chrono::milliseconds(ms);
}

std::uint64_t parse_size(const std::string& flag, const std::string& text, bool bytes) {
  std::uint64_t n = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, n);
  std::string unit(p, end);
  std::uint64_t mult = 0;
  if (ec == std::errc() && p != text.data()) {
    if (unit.empty()) mult = 1;
    if (bytes && (unit == "KiB" || unit == "k" || unit == "K")) mult = 1ULL << 10;
    if (bytes && (unit == "MiB" || unit == "M" || unit == "m")) mult = 1ULL << 20;
    if (bytes && (unit == "GiB" || unit == "G" || unit == "g")) mult = 1ULL << 30;
  }
  if (mult == 0 || n == 0) {
    throw UsageError(flag + ": invalid " + (bytes ? "size" : "count") + " '" + text +
                     (bytes ? "' (expected e.g. 268435456, 512KiB, 256MiB, 1GiB)"
                            : "' (expected a positive integer)"));
  }
  return n * mult;
}

}  // namespace

std::string usage() {
  return R"(outbox-relay: relays committed inserts of a PostgreSQL outbox table to Kafka, in commit order,
confirming the replication slot only after the broker acknowledged every event up to it.

usage: outbox-relay --pg CONNINFO --brokers HOST:PORT[,...] [flags]

  --pg CONNINFO                  libpq conninfo string or URI (replication=database is added) [required]
  --brokers HOST:PORT[,...]      Kafka bootstrap servers [required]
  --slot NAME                    logical replication slot (default outbox_relay)
  --publication NAME             publication (default outbox_relay)
  --table SCHEMA.TABLE           outbox table (default public.outbox)
  --topic TEMPLATE               topic template over columns (default 'outbox.event.${aggregatetype}')
  --no-create                    do not create a missing publication or slot: fail instead
  --column-id NAME               event id column, sent as header "id" (default id)
  --column-aggregatetype NAME    aggregate type column (default aggregatetype)
  --column-aggregateid NAME      aggregate id column, the record key (default aggregateid)
  --column-type NAME             event type column, sent as header "type" (default type)
  --column-payload NAME          payload column, the record value (default payload)
  --require-json                 reject payloads that are not valid JSON (default off)
  -X PROPERTY=VALUE              librdkafka producer property, repeatable (e.g. -X linger.ms=10)
  --status-interval DURATION     standby status update period (default 10s)
  --shutdown-timeout DURATION    how long a stop waits for in-flight deliveries (default 30s)
  --max-inflight-events N        stop reading WAL beyond this many unacknowledged events (default 100000)
  --max-inflight-bytes SIZE      ... or beyond this many unacknowledged bytes (default 256MiB)
  --log-level LEVEL              trace, debug, info, warn, error or off (default info)
  --help                         this text
  --version                      print the version

exit codes: 0 stopped by a signal, 1 error, 2 bad flags, 3 event could not be mapped or delivered,
            4 replication slot lost
)";
}

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  auto& r = o.relay;
  auto& m = r.mapper;
  std::string table = "public.outbox";
  bool have_pg = false, have_brokers = false;

  using Setter = std::function<void(const std::string&)>;
  const std::map<std::string, Setter> valued = {
      {"--pg", [&](const std::string& v) { r.conninfo = v, have_pg = true; }},
      {"--brokers", [&](const std::string& v) { r.producer.brokers = v, have_brokers = true; }},
      {"--slot", [&](const std::string& v) { r.slot = v; }},
      {"--publication", [&](const std::string& v) { r.publication = v; }},
      {"--table", [&](const std::string& v) { table = v; }},
      {"--topic", [&](const std::string& v) { m.topic_template = v; }},
      {"--column-id", [&](const std::string& v) { m.column_id = v; }},
      {"--column-aggregatetype", [&](const std::string& v) { m.column_aggregatetype = v; }},
      {"--column-aggregateid", [&](const std::string& v) { m.column_aggregateid = v; }},
      {"--column-type", [&](const std::string& v) { m.column_type = v; }},
      {"--column-payload", [&](const std::string& v) { m.column_payload = v; }},
      {"-X",
       [&](const std::string& v) {
         auto eq = v.find('=');
         if (eq == std::string::npos || eq == 0) {
           throw UsageError("-X: expected PROPERTY=VALUE, got '" + v + "'");
         }
         r.producer.properties.emplace_back(v.substr(0, eq), v.substr(eq + 1));
       }},
      {"--status-interval",
       [&](const std::string& v) { r.status_interval = parse_duration("--status-interval", v); }},
      {"--shutdown-timeout",
       [&](const std::string& v) { r.shutdown_timeout = parse_duration("--shutdown-timeout", v); }},
      {"--max-inflight-events",
       [&](const std::string& v) { r.max_inflight_events = parse_size("--max-inflight-events", v, false); }},
      {"--max-inflight-bytes",
       [&](const std::string& v) { r.max_inflight_bytes = parse_size("--max-inflight-bytes", v, true); }},
      {"--log-level",
       [&](const std::string& v) {
         static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
         for (const char* l : kLevels) {
           if (v == l) {
             o.log_level = v;
             return;
           }
         }
         throw UsageError("--log-level: unknown level '" + v +
                          "' (expected trace, debug, info, warn, error or off)");
       }},
  };
  const std::map<std::string, std::function<void()>> switches = {
      {"--no-create", [&] { r.create = false; }},
      {"--require-json", [&] { m.require_json = true; }},
      {"--help", [&] { o.help = true; }},
      {"-h", [&] { o.help = true; }},
      {"--version", [&] { o.version = true; }},
  };

  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::optional<std::string> inline_value;
    if (arg.rfind("--", 0) == 0) {
      if (auto eq = arg.find('='); eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
    } else if (arg.rfind("-X", 0) == 0 && arg.size() > 2) {
      inline_value = arg.substr(2);
      arg = "-X";
    }
    if (auto s = switches.find(arg); s != switches.end()) {
      if (inline_value) throw UsageError(arg + ": takes no value");
      s->second();
      continue;
    }
    auto v = valued.find(arg);
    if (v == valued.end()) {
      throw UsageError((arg.rfind("-", 0) == 0 ? "unknown flag " : "unexpected argument ") + arg +
                       " (see --help)");
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) throw UsageError(arg + ": missing value");
      inline_value = args[++i];
    }
    v->second(*inline_value);
  }
  if (o.help || o.version) return o;
  if (!have_pg || r.conninfo.empty()) throw UsageError("--pg: required (a libpq conninfo or URI)");
  if (!have_brokers || r.producer.brokers.empty()) {
    throw UsageError("--brokers: required (HOST:PORT[,...])");
  }
  auto dot = table.find('.');
  m.schema = dot == std::string::npos ? "public" : table.substr(0, dot);
  m.table = dot == std::string::npos ? table : table.substr(dot + 1);
  if (m.schema.empty() || m.table.empty() || m.table.find('.') != std::string::npos) {
    throw UsageError("--table: expected SCHEMA.TABLE or TABLE, got '" + table + "'");
  }
  for (const auto* name : {&r.slot, &r.publication}) {
    if (name->empty()) throw UsageError((name == &r.slot ? "--slot" : "--publication") + std::string(": must not be empty"));
  }
  try {
    outbox::TopicTemplate check(m.topic_template);
    (void)check;
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--topic: ") + e.what());
  }
  return o;
}

}  // namespace outbox::app
