#include "outbox/app/options.hpp"

#include <boost/asio/ip/address.hpp>
#include <charconv>
#include <functional>
#include <map>
#include <sstream>

#include "outbox/mapping/topic_template.hpp"

namespace outbox::app {
namespace {

std::chrono::microseconds parse_micros(const std::string& flag, const std::string& text) {
  std::uint64_t n = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, n);
  std::string unit(p, end);
  std::uint64_t us = 0;
  if (ec != std::errc() || p == text.data()) {
    unit = "?";
  } else if (unit == "us") {
    us = n;
  } else if (unit == "ms") {
    us = n * 1000;
  } else if (unit == "s" || unit.empty()) {
    us = n * 1'000'000;
  } else if (unit == "m" || unit == "min") {
    us = n * 60'000'000;
  } else if (unit == "h") {
    us = n * 3'600'000'000;
  } else if (unit == "d") {
    us = n * 86'400'000'000;
  } else {
    unit = "?";
  }
  if (unit == "?" || (flag == "--status-interval" && us < 1000)) {
    throw UsageError(flag + ": invalid duration '" + text + "' (expected e.g. 500ms, 10s, 1m, 7d" +
                     (flag == "--status-interval" ? ", at least 1ms)" : ")"));
  }
  return std::chrono::microseconds(us);
}

std::chrono::milliseconds parse_duration(const std::string& flag, const std::string& text) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(parse_micros(flag, text));
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

// A count where 0 is meaningful (e.g. --max-pending 0: any pending event is a problem).
std::uint64_t parse_count(const std::string& flag, const std::string& text) {
  std::uint64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty()) {
    throw UsageError(flag + ": invalid count '" + text + "' (expected a non-negative integer)");
  }
  return n;
}

using Setter = std::function<void(const std::string&)>;
using ValuedFlags = std::map<std::string, Setter>;
using Switches = std::map<std::string, std::function<void()>>;

// Applies `args` to the flag tables: "--flag value", "--flag=value", "-Xvalue", switches.
void apply_flags(const std::vector<std::string>& args, const ValuedFlags& valued,
                 const Switches& switches) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::optional<std::string> inline_value;
    if (arg.rfind("--", 0) == 0) {
      if (auto eq = arg.find('='); eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
    } else if (arg.rfind("-X", 0) == 0 && arg.size() > 2 && valued.count("-X")) {
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
}

// "SCHEMA.TABLE" or "TABLE" (schema public).
std::pair<std::string, std::string> parse_table(const std::string& flag, const std::string& text) {
  auto dot = text.find('.');
  std::string schema = dot == std::string::npos ? "public" : text.substr(0, dot);
  std::string table = dot == std::string::npos ? text : text.substr(dot + 1);
  if (schema.empty() || table.empty() || table.find('.') != std::string::npos) {
    throw UsageError(flag + ": expected SCHEMA.TABLE or TABLE, got '" + text + "'");
  }
  return {schema, table};
}

void require_name(const std::string& flag, const std::string& value) {
  if (value.empty()) throw UsageError(flag + ": must not be empty");
}

void require_conninfo(bool given, const std::string& conninfo) {
  if (!given || conninfo.empty()) throw UsageError("--pg: required (a libpq conninfo or URI)");
}

}  // namespace

ListenAddress parse_listen_address(const std::string& flag, const std::string& text) {
  const std::string expected = "' (expected HOST:PORT with an IP address, e.g. " +
                               std::string(kDefaultMetricsAddr) + ", [::1]:9187, :9187, or off)";
  auto colon = text.rfind(':');
  if (colon == std::string::npos) throw UsageError(flag + ": invalid address '" + text + expected);
  std::string host = text.substr(0, colon);
  std::string port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    throw UsageError(flag + ": invalid address '" + text + expected);
  }
  if (host.empty()) host = "0.0.0.0";
  unsigned port = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  boost::system::error_code bad_host;
  boost::asio::ip::make_address(host, bad_host);
  if (ec != std::errc() || p != port_text.data() + port_text.size() || port_text.empty() ||
      port > 65535 || bad_host) {
    throw UsageError(flag + ": invalid address '" + text + expected);
  }
  return {host, static_cast<std::uint16_t>(port)};
}

std::string usage() {
  return R"(outbox-relay: relays committed inserts of a PostgreSQL outbox table to Kafka, in commit order,
confirming the replication slot only after the broker acknowledged every event up to it.

usage: outbox-relay [run] --pg CONNINFO --brokers HOST:PORT[,...] [flags]
       outbox-relay setup|status|drop|prune --pg CONNINFO [flags]   (see outbox-relay COMMAND --help)

commands:
  run                            relay events (the default)
  setup                          create the publication and the slot (and the table with --create-table)
  status                         show the slot's state and the pending events; exit 1 when it is missing,
                                 lost, retains too much WAL, or the backlog exceeds --max-pending/--max-age
  drop                           drop the slot and the publication (needs --yes)
  reconcile                      list (and with --repair publish) outbox rows of a time window missing from Kafka
  prune                          delete outbox rows past a retention that the slot certainly confirmed

flags of run:
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
  --read-pause DURATION          while the stream is busy, pause up to this long before reading
                                 the socket again, so WAL arrives in large segments (default
                                 500us; 0 reads at once)
  --shutdown-timeout DURATION    how long a stop waits for in-flight deliveries (default 30s)
  --publication-check-interval DURATION
                                 longest time between two checks, while streaming, that the
                                 publication publishes every insert into --table (default 30s;
                                 the slot is never confirmed past the last check that passed)
  --max-inflight-events N        stop reading WAL beyond this many unacknowledged events (default 20000)
  --max-inflight-bytes SIZE      ... or beyond this many unacknowledged bytes (default 16MiB)
  --on-error fail|dlq            an event that cannot be mapped or delivered for good: stop with exit code 3
                                 (fail, the default), or publish it to --dlq-topic with the error (dlq)
  --dlq-topic NAME               dead-letter topic for --on-error dlq (default outbox.dlq)
  --metrics-addr HOST:PORT|off   HTTP listener for /metrics, /healthz, /readyz (default 127.0.0.1:9187;
                                 when the default address is taken the relay runs without it)
  --log-level LEVEL              trace, debug, info, warn, error or off (default info)
  --log-format text|json         log line format on stderr (default text)
  --summary-interval DURATION    period of the summary log line while streaming, 0 for none (default 1m)
  --backlog-interval DURATION    period of the backlog count for /metrics (pending events and the age of
                                 the oldest, from a temporary copy of the slot, as `status` counts
                                 them), 0 for none (default 1m)
  --backlog-scan-limit N         pgoutput messages one backlog count reads at most; beyond it the count is
                                 a lower bound, the oldest event's age stays exact (default 10000)
  --help                         this text
  --version                      print the version

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

  --pg CONNINFO                  libpq conninfo string or URI [required]
  --slot NAME                    logical replication slot (default outbox_relay)
  --publication NAME             publication (default outbox_relay)
  --table SCHEMA.TABLE           outbox table (default public.outbox)
  --create-table                 create the outbox table if it does not exist
  --help                         this text

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

  --pg CONNINFO                  libpq conninfo string or URI [required]
  --slot NAME                    logical replication slot (default outbox_relay)
  --publication NAME             publication the relay reads (default outbox_relay)
  --table SCHEMA.TABLE           outbox table; inserts into its partitions count too (default public.outbox)
  --json                         one JSON object instead of the table
  --max-retained SIZE            unhealthy when the slot retains more WAL than this (default 1GiB)
  --max-pending N                unhealthy when more than N events are pending (default: no limit)
  --max-age DURATION             unhealthy when the oldest pending event committed longer ago than
                                 this, e.g. 5m (default: no limit)
  --scan-limit N                 read at most about N changes (pgoutput messages) when counting;
                                 past it the counts are lower bounds, shown as ">= N" (default 100000)
  --help                         this text

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

  --pg CONNINFO                  libpq conninfo string or URI [required]
  --slot NAME                    logical replication slot (default outbox_relay)
  --publication NAME             publication (default outbox_relay)
  --yes                          really drop (refuses without it)
  --help                         this text

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

  --pg CONNINFO                  libpq conninfo string or URI [required]
  --slot NAME                    logical replication slot the relay uses (default outbox_relay)
  --table SCHEMA.TABLE           outbox table (default public.outbox)
  --older-than DURATION          retention, e.g. 7d, 12h, 30m [required]
  --column-time NAME             timestamp column of the outbox the retention is measured on
                                 (default created_at; prune refuses when the table has no such column)
  --batch N                      rows per DELETE transaction (default 1000)
  --pause DURATION               pause between two batches (default 100ms)
  --dry-run                      only count what would be deleted or dropped
  --help                         this text

exit codes: 0 done (also when nothing was prunable), 1 refused or error, 2 bad flags
)";
  }
  return usage();
}

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  auto& r = o.relay;
  auto& m = r.mapper;
  std::string table = "public.outbox";
  bool have_pg = false, have_brokers = false;

  const ValuedFlags valued = {
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
      {"--read-pause",
       [&](const std::string& v) { r.read_pause = parse_micros("--read-pause", v); }},
      {"--shutdown-timeout",
       [&](const std::string& v) { r.shutdown_timeout = parse_duration("--shutdown-timeout", v); }},
      {"--publication-check-interval",
       [&](const std::string& v) {
         r.publication_check_interval = parse_duration("--publication-check-interval", v);
         if (r.publication_check_interval < std::chrono::seconds(1)) {
           throw UsageError("--publication-check-interval: '" + v + "' is below 1s");
         }
       }},
      {"--max-inflight-events",
       [&](const std::string& v) {
         r.max_inflight_events = parse_size("--max-inflight-events", v, false);
       }},
      {"--max-inflight-bytes",
       [&](const std::string& v) {
         r.max_inflight_bytes = parse_size("--max-inflight-bytes", v, true);
       }},
      {"--on-error",
       [&](const std::string& v) {
         if (v == "fail") {
           r.on_error = relay::OnError::kFail;
         } else if (v == "dlq") {
           r.on_error = relay::OnError::kDlq;
         } else {
           throw UsageError("--on-error: unknown policy '" + v + "' (expected fail or dlq)");
         }
       }},
      {"--dlq-topic", [&](const std::string& v) { r.dlq_topic = v; }},
      {"--metrics-addr",
       [&](const std::string& v) {
         o.metrics_addr_explicit = true;
         if (v == "off") {
           o.metrics_addr.reset();
         } else {
           o.metrics_addr = parse_listen_address("--metrics-addr", v);
         }
       }},
      {"--summary-interval",
       [&](const std::string& v) { o.summary_interval = parse_duration("--summary-interval", v); }},
      {"--backlog-interval",
       [&](const std::string& v) { o.backlog_interval = parse_duration("--backlog-interval", v); }},
      {"--backlog-scan-limit",
       [&](const std::string& v) {
         o.backlog_scan_limit = parse_size("--backlog-scan-limit", v, false);
       }},
      {"--log-format",
       [&](const std::string& v) {
         if (v == "text") {
           o.log_format = LogFormat::kText;
         } else if (v == "json") {
           o.log_format = LogFormat::kJson;
         } else {
           throw UsageError("--log-format: unknown format '" + v + "' (expected text or json)");
         }
       }},
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
  const Switches switches = {
      {"--no-create", [&] { r.create = false; }},
      {"--require-json", [&] { m.require_json = true; }},
      {"--help", [&] { o.help = true; }},
      {"-h", [&] { o.help = true; }},
      {"--version", [&] { o.version = true; }},
  };
  apply_flags(args, valued, switches);

  if (o.help || o.version) return o;
  require_conninfo(have_pg, r.conninfo);
  if (!have_brokers || r.producer.brokers.empty()) {
    throw UsageError("--brokers: required (HOST:PORT[,...])");
  }
  std::tie(m.schema, m.table) = parse_table("--table", table);
  require_name("--slot", r.slot);
  require_name("--publication", r.publication);
  require_name("--dlq-topic", r.dlq_topic);
  try {
    mapping::TopicTemplate check(m.topic_template);
    (void)check;
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--topic: ") + e.what());
  }
  return o;
}

namespace {

SetupOptions parse_setup(const std::vector<std::string>& args) {
  SetupOptions o;
  bool have_pg = false;
  std::string table = "public.outbox";
  apply_flags(args,
              {
                  {"--pg", [&](const std::string& v) { o.conninfo = v, have_pg = true; }},
                  {"--slot", [&](const std::string& v) { o.slot = v; }},
                  {"--publication", [&](const std::string& v) { o.publication = v; }},
                  {"--table", [&](const std::string& v) { table = v; }},
              },
              {
                  {"--create-table", [&] { o.create_table = true; }},
                  {"--help", [&] { o.help = true; }},
                  {"-h", [&] { o.help = true; }},
              });
  if (o.help) return o;
  require_conninfo(have_pg, o.conninfo);
  require_name("--slot", o.slot);
  require_name("--publication", o.publication);
  std::tie(o.schema, o.table) = parse_table("--table", table);
  return o;
}

StatusOptions parse_status(const std::vector<std::string>& args) {
  StatusOptions o;
  bool have_pg = false;
  std::string table = "public.outbox";
  apply_flags(
      args,
      {
          {"--pg", [&](const std::string& v) { o.conninfo = v, have_pg = true; }},
          {"--slot", [&](const std::string& v) { o.slot = v; }},
          {"--publication", [&](const std::string& v) { o.publication = v; }},
          {"--table", [&](const std::string& v) { table = v; }},
          {"--max-retained",
           [&](const std::string& v) {
             o.max_retained_bytes = parse_size("--max-retained", v, true);
           }},
          {"--max-pending",
           [&](const std::string& v) { o.max_pending = parse_count("--max-pending", v); }},
          {"--max-age", [&](const std::string& v) { o.max_age = parse_duration("--max-age", v); }},
          {"--scan-limit",
           [&](const std::string& v) { o.scan_limit = parse_size("--scan-limit", v, false); }},
      },
      {
          {"--json", [&] { o.json = true; }},
          {"--help", [&] { o.help = true; }},
          {"-h", [&] { o.help = true; }},
      });
  if (o.help) return o;
  require_conninfo(have_pg, o.conninfo);
  require_name("--slot", o.slot);
  require_name("--publication", o.publication);
  std::tie(o.schema, o.table) = parse_table("--table", table);
  return o;
}

PruneOptions parse_prune(const std::vector<std::string>& args) {
  PruneOptions o;
  bool have_pg = false, have_older_than = false;
  std::string table = "public.outbox";
  apply_flags(
      args,
      {
          {"--pg", [&](const std::string& v) { o.conninfo = v, have_pg = true; }},
          {"--slot", [&](const std::string& v) { o.slot = v; }},
          {"--table", [&](const std::string& v) { table = v; }},
          {"--column-time", [&](const std::string& v) { o.column_time = v; }},
          {"--older-than",
           [&](const std::string& v) {
             o.older_than = parse_duration("--older-than", v);
             have_older_than = true;
           }},
          {"--batch", [&](const std::string& v) { o.batch = parse_size("--batch", v, false); }},
          {"--pause", [&](const std::string& v) { o.pause = parse_duration("--pause", v); }},
      },
      {
          {"--dry-run", [&] { o.dry_run = true; }},
          {"--help", [&] { o.help = true; }},
          {"-h", [&] { o.help = true; }},
      });
  if (o.help) return o;
  require_conninfo(have_pg, o.conninfo);
  if (!have_older_than) {
    throw UsageError("--older-than: required (the retention, e.g. 7d; rows younger are kept)");
  }
  require_name("--slot", o.slot);
  require_name("--column-time", o.column_time);
  std::tie(o.schema, o.table) = parse_table("--table", table);
  return o;
}

DropOptions parse_drop(const std::vector<std::string>& args) {
  DropOptions o;
  bool have_pg = false;
  apply_flags(args,
              {
                  {"--pg", [&](const std::string& v) { o.conninfo = v, have_pg = true; }},
                  {"--slot", [&](const std::string& v) { o.slot = v; }},
                  {"--publication", [&](const std::string& v) { o.publication = v; }},
              },
              {
                  {"--yes", [&] { o.yes = true; }},
                  {"--help", [&] { o.help = true; }},
                  {"-h", [&] { o.help = true; }},
              });
  if (o.help) return o;
  require_conninfo(have_pg, o.conninfo);
  require_name("--slot", o.slot);
  require_name("--publication", o.publication);
  return o;
}

ReconcileOptions parse_reconcile(const std::vector<std::string>& args) {
  ReconcileOptions o;
  auto& m = o.mapper;
  bool have_pg = false, have_since = false;
  std::string table = "public.outbox";
  apply_flags(
      args,
      {
          {"--pg", [&](const std::string& v) { o.conninfo = v, have_pg = true; }},
          {"--brokers", [&](const std::string& v) { o.brokers = v; }},
          {"--since",
           [&](const std::string& v) {
             o.since = parse_time_bound("--since", v), have_since = true;
           }},
          {"--until", [&](const std::string& v) { o.until = parse_time_bound("--until", v); }},
          {"--column-time", [&](const std::string& v) { o.column_time = v; }},
          {"--table", [&](const std::string& v) { table = v; }},
          {"--topic", [&](const std::string& v) { m.topic_template = v; }},
          {"--column-id", [&](const std::string& v) { m.column_id = v; }},
          {"--column-aggregatetype", [&](const std::string& v) { m.column_aggregatetype = v; }},
          {"--column-aggregateid", [&](const std::string& v) { m.column_aggregateid = v; }},
          {"--column-type", [&](const std::string& v) { m.column_type = v; }},
          {"--column-payload", [&](const std::string& v) { m.column_payload = v; }},
          {"--margin", [&](const std::string& v) { o.margin = parse_duration("--margin", v); }},
          {"--timeout", [&](const std::string& v) { o.timeout = parse_duration("--timeout", v); }},
          {"-X",
           [&](const std::string& v) {
             auto eq = v.find('=');
             if (eq == std::string::npos || eq == 0) {
               throw UsageError("-X: expected PROPERTY=VALUE, got '" + v + "'");
             }
             o.properties.emplace_back(v.substr(0, eq), v.substr(eq + 1));
           }},
      },
      {
          {"--repair", [&] { o.repair = true; }},
          {"--help", [&] { o.help = true; }},
          {"-h", [&] { o.help = true; }},
      });
  if (o.help) return o;
  require_conninfo(have_pg, o.conninfo);
  if (o.brokers.empty()) throw UsageError("--brokers: required (HOST:PORT[,...])");
  if (!have_since) throw UsageError("--since: required (an age such as 2h, or a timestamp)");
  if (o.column_time.empty()) {
    throw UsageError("--column-time: required (the rows' time column, e.g. created_at)");
  }
  std::tie(m.schema, m.table) = parse_table("--table", table);
  for (const auto& [flag, name] : {std::pair{"--column-id", &m.column_id},
                                   {"--column-aggregateid", &m.column_aggregateid},
                                   {"--column-type", &m.column_type},
                                   {"--column-payload", &m.column_payload}}) {
    require_name(flag, *name);
  }
  try {
    mapping::TopicTemplate check(m.topic_template);
    (void)check;
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--topic: ") + e.what());
  }
  // Both ages or both timestamps: the order is known now (mixed ones are checked when run).
  if (o.until && o.since.ago.has_value() == o.until->ago.has_value() &&
      o.since.resolve(0) >= o.until->resolve(0)) {
    throw UsageError("--until: " + o.until->text + " is not after --since " + o.since.text);
  }
  if (o.timeout.count() <= 0) throw UsageError("--timeout: must be positive");
  return o;
}

}  // namespace

CommandLine parse_command_line(const std::vector<std::string>& args) {
  CommandLine cl;
  if (args.empty() || args[0].rfind("-", 0) == 0) {
    cl.run = parse_options(args);
    return cl;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  const std::string& word = args[0];
  if (word == "run") {
    cl.run = parse_options(rest);
  } else if (word == "setup") {
    cl.command = Command::kSetup;
    cl.setup = parse_setup(rest);
  } else if (word == "status") {
    cl.command = Command::kStatus;
    cl.status = parse_status(rest);
  } else if (word == "drop") {
    cl.command = Command::kDrop;
    cl.drop = parse_drop(rest);
  } else if (word == "reconcile") {
    cl.command = Command::kReconcile;
    cl.reconcile = parse_reconcile(rest);
  } else if (word == "prune") {
    cl.command = Command::kPrune;
    cl.prune = parse_prune(rest);
  } else {
    throw UsageError("unknown command " + word +
                     " (expected run, setup, status, drop, reconcile or prune; see --help)");
  }
  return cl;
}

}  // namespace outbox::app
