// The command line of the operating features: subcommands and their flags, the metrics address,
// log format and summary interval; errors name the flag; `run` stays the default.
#include "outbox/app/options.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <sstream>
#include <tuple>

#include "flag_errors.hpp"

namespace outbox::app {
namespace {

TEST(CommandLine, RunIsTheDefaultAndCanBeNamed) {
  for (auto args : {std::vector<std::string>{"--pg", "x", "--brokers", "k:1"},
                    std::vector<std::string>{"run", "--pg", "x", "--brokers", "k:1"}}) {
    CommandLine cl = parse_command_line(args);
    EXPECT_EQ(cl.command, Command::kRun);
    EXPECT_EQ(cl.run.relay.conninfo, "x");
    ASSERT_TRUE(cl.run.metrics_addr);
    EXPECT_EQ(cl.run.metrics_addr->host, "127.0.0.1");
    EXPECT_EQ(cl.run.metrics_addr->port, 9187);
    EXPECT_FALSE(cl.run.metrics_addr_explicit);
    EXPECT_EQ(cl.run.log_format, LogFormat::kText);
    EXPECT_EQ(cl.run.summary_interval, std::chrono::minutes(1));
  }
}

TEST(CommandLine, OperatingFlagsOfRun) {
  CommandLine cl =
      parse_command_line({"--pg", "x", "--brokers", "k:1", "--metrics-addr", "0.0.0.0:9999",
                          "--log-format", "json", "--summary-interval", "15s"});
  ASSERT_TRUE(cl.run.metrics_addr);
  EXPECT_EQ(cl.run.metrics_addr->host, "0.0.0.0");
  EXPECT_EQ(cl.run.metrics_addr->port, 9999);
  EXPECT_TRUE(cl.run.metrics_addr_explicit);
  EXPECT_EQ(cl.run.log_format, LogFormat::kJson);
  EXPECT_EQ(cl.run.summary_interval, std::chrono::seconds(15));

  cl = parse_command_line(
      {"--pg", "x", "--brokers", "k:1", "--metrics-addr=off", "--summary-interval", "0"});
  EXPECT_FALSE(cl.run.metrics_addr);
  EXPECT_EQ(cl.run.summary_interval.count(), 0);
}

TEST(CommandLine, ErrorPolicy) {
  CommandLine cl = parse_command_line({"--pg", "x", "--brokers", "k:1"});
  EXPECT_EQ(cl.run.relay.on_error, relay::OnError::kFail);
  EXPECT_EQ(cl.run.relay.dlq_topic, "outbox.dlq");
  cl = parse_command_line(
      {"--pg", "x", "--brokers", "k:1", "--on-error", "dlq", "--dlq-topic", "dead"});
  EXPECT_EQ(cl.run.relay.on_error, relay::OnError::kDlq);
  EXPECT_EQ(cl.run.relay.dlq_topic, "dead");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--on-error", "skip"}),
            "--on-error: unknown policy 'skip' (expected fail or dlq)");
}

TEST(CommandLine, ListenAddresses) {
  EXPECT_EQ(parse_listen_address("--metrics-addr", "[::1]:80").host, "::1");
  EXPECT_EQ(parse_listen_address("--metrics-addr", ":9187").host, "0.0.0.0");
  EXPECT_EQ(parse_listen_address("--metrics-addr", "127.0.0.1:0").port, 0);
  for (const char* bad :
       {"9187", "localhost:9187", "1.2.3.4:", "1.2.3.4:70000", "::1:80", "1.2.3.4:12ab"}) {
    EXPECT_NE(error_of({"--pg", "x", "--brokers", "k:1", "--metrics-addr", bad})
                  .find("--metrics-addr: invalid address"),
              std::string::npos)
        << bad;
  }
}

TEST(CommandLine, Setup) {
  CommandLine cl = parse_command_line({"setup", "--pg", "dbname=x"});
  EXPECT_EQ(cl.command, Command::kSetup);
  EXPECT_EQ(cl.setup.conninfo, "dbname=x");
  EXPECT_EQ(cl.setup.slot, "outbox_relay");
  EXPECT_EQ(cl.setup.publication, "outbox_relay");
  EXPECT_EQ(cl.setup.schema, "public");
  EXPECT_EQ(cl.setup.table, "outbox");
  EXPECT_FALSE(cl.setup.create_table);

  cl = parse_command_line({"setup", "--pg=p", "--slot", "s", "--publication", "pub", "--table",
                           "app.events", "--create-table"});
  EXPECT_EQ(cl.setup.slot, "s");
  EXPECT_EQ(cl.setup.publication, "pub");
  EXPECT_EQ(cl.setup.schema, "app");
  EXPECT_EQ(cl.setup.table, "events");
  EXPECT_TRUE(cl.setup.create_table);
}

// --failover of run and setup; status --standby.
TEST(CommandLine, Failover) {
  EXPECT_FALSE(parse_command_line({"--pg", "x", "--brokers", "k:1"}).run.failover);
  EXPECT_TRUE(parse_command_line({"--pg", "x", "--brokers", "k:1", "--failover"}).run.failover);
  EXPECT_FALSE(parse_command_line({"setup", "--pg", "x"}).setup.failover);
  EXPECT_TRUE(parse_command_line({"setup", "--pg", "x", "--failover"}).setup.failover);
  EXPECT_EQ(parse_command_line({"status", "--pg", "x", "--standby", "host=b"}).status.standby,
            "host=b");
  EXPECT_NE(error_of({"status", "--pg", "x", "--failover"}).find("--failover"), std::string::npos);
}

TEST(CommandLine, Status) {
  CommandLine cl = parse_command_line({"status", "--pg", "x"});
  EXPECT_EQ(cl.command, Command::kStatus);
  EXPECT_FALSE(cl.status.json);
  EXPECT_EQ(cl.status.max_retained_bytes, 1ULL << 30);
  cl = parse_command_line(
      {"status", "--pg", "x", "--slot", "s", "--json", "--max-retained", "512MiB"});
  EXPECT_TRUE(cl.status.json);
  EXPECT_EQ(cl.status.slot, "s");
  EXPECT_EQ(cl.status.max_retained_bytes, 512ULL << 20);
}

TEST(CommandLine, StatusBacklog) {
  CommandLine cl = parse_command_line({"status", "--pg", "x"});
  EXPECT_EQ(cl.status.publication, "outbox_relay");
  EXPECT_EQ(cl.status.schema, "public");
  EXPECT_EQ(cl.status.table, "outbox");
  EXPECT_EQ(cl.status.scan_limit, 100'000u);
  EXPECT_FALSE(cl.status.max_pending);
  EXPECT_FALSE(cl.status.max_age);
  cl = parse_command_line({"status", "--pg", "x", "--publication", "p", "--table", "app.events",
                           "--max-pending", "0", "--max-age", "5m", "--scan-limit", "500"});
  EXPECT_EQ(cl.status.publication, "p");
  EXPECT_EQ(cl.status.schema, "app");
  EXPECT_EQ(cl.status.table, "events");
  EXPECT_EQ(cl.status.max_pending, 0u);
  EXPECT_EQ(cl.status.max_age, std::chrono::minutes(5));
  EXPECT_EQ(cl.status.scan_limit, 500u);

  EXPECT_EQ(error_of({"status", "--pg", "x", "--max-pending", "-1"}),
            "--max-pending: invalid count '-1' (expected a non-negative integer)");
  EXPECT_EQ(error_of({"status", "--pg", "x", "--max-pending", "12k"}),
            "--max-pending: invalid count '12k' (expected a non-negative integer)");
  EXPECT_EQ(error_of({"status", "--pg", "x", "--max-age", "soon"}),
            "--max-age: invalid duration 'soon' (expected e.g. 500ms, 10s, 1m, 7d)");
  EXPECT_EQ(error_of({"status", "--pg", "x", "--scan-limit", "0"}),
            "--scan-limit: invalid count '0' (expected a positive integer)");
  EXPECT_EQ(error_of({"status", "--pg", "x", "--publication", ""}),
            "--publication: must not be empty");
  EXPECT_EQ(error_of({"status", "--pg", "x", "--table", "."}),
            "--table: expected SCHEMA.TABLE or TABLE, got '.'");
}

// --gap-repair-column: a gap the progress record shows is repaired from the table; it needs Kafka
// or JetStream (reconcile reads it back) and a table (messages leave no rows).
TEST(CommandLine, GapRepair) {
  Options o = parse_options({"--pg", "x", "--brokers", "k:1"});
  EXPECT_TRUE(o.gap_repair_column.empty());
  EXPECT_EQ(o.gap_repair_margin, std::chrono::hours(1));
  o = parse_options({"--pg", "x", "--brokers", "k:1", "--gap-repair-column", "created_at",
                     "--gap-repair-margin", "10m"});
  EXPECT_EQ(o.gap_repair_column, "created_at");
  EXPECT_EQ(o.gap_repair_margin, std::chrono::minutes(10));
  o = parse_options({"--pg", "x", "--nats", "nats://n:1", "--gap-repair-column", "t"});
  EXPECT_EQ(o.gap_repair_column, "t");
  EXPECT_EQ(error_of({"run", "--pg", "x", "--brokers", "k:1", "--messages", "outbox",
                      "--gap-repair-column", "t"}),
            "--gap-repair-column: needs --table (messages leave no rows to repair from)");
}

// status reads the relay's progress record when given where it is; none is required.
TEST(CommandLine, StatusProgressRecord) {
  CommandLine cl = parse_command_line({"status", "--pg", "x"});
  EXPECT_FALSE(cl.status.progress.where.given());
  cl = parse_command_line({"status", "--pg", "x", "--brokers", "k:1", "--checkpoint-topic", "cp",
                           "-X", "security.protocol=ssl"});
  EXPECT_EQ(cl.status.progress.where.where(), "topic cp");
  EXPECT_EQ(cl.status.progress.where.properties,
            (std::vector<std::pair<std::string, std::string>>{{"security.protocol", "ssl"}}));
  EXPECT_EQ(error_of({"status", "--pg", "x", "--brokers", "k:1", "--nats", "nats://n:1"}),
            "--nats: one progress record: --brokers or --nats");
}

TEST(CommandLine, Prune) {
  CommandLine cl =
      parse_command_line({"prune", "--pg", "x", "--older-than", "7d", "--brokers", "k:9092"});
  EXPECT_EQ(cl.command, Command::kPrune);
  EXPECT_EQ(cl.prune.progress.where.brokers, "k:9092");
  EXPECT_EQ(cl.prune.progress.where.checkpoint_topic, "outbox-relay.checkpoints");
  EXPECT_EQ(cl.prune.progress.where.where(), "topic outbox-relay.checkpoints");
  EXPECT_FALSE(cl.prune.without_progress_record);
  EXPECT_EQ(cl.prune.older_than, std::chrono::hours(24 * 7));
  EXPECT_EQ(cl.prune.slot, "outbox_relay");
  EXPECT_EQ(cl.prune.schema, "public");
  EXPECT_EQ(cl.prune.table, "outbox");
  EXPECT_EQ(cl.prune.column_time, "created_at");
  EXPECT_EQ(cl.prune.batch, 1000u);
  EXPECT_EQ(cl.prune.pause, std::chrono::milliseconds(100));
  EXPECT_FALSE(cl.prune.dry_run);
  cl = parse_command_line({"prune",
                           "--pg",
                           "x",
                           "--older-than=90m",
                           "--slot",
                           "s",
                           "--table",
                           "app.events",
                           "--column-time",
                           "ts",
                           "--batch",
                           "50",
                           "--pause",
                           "0",
                           "--dry-run",
                           "--nats",
                           "nats://n:4222",
                           "--nats-progress-bucket",
                           "progress_b",
                           "--timeout",
                           "5s"});
  EXPECT_EQ(cl.prune.progress.where.nats.urls, "nats://n:4222");
  EXPECT_EQ(cl.prune.progress.where.where(), "JetStream key-value bucket progress_b");
  EXPECT_EQ(cl.prune.progress.timeout, std::chrono::seconds(5));
  EXPECT_EQ(cl.prune.older_than, std::chrono::minutes(90));
  EXPECT_EQ(cl.prune.slot, "s");
  EXPECT_EQ(cl.prune.schema, "app");
  EXPECT_EQ(cl.prune.table, "events");
  EXPECT_EQ(cl.prune.column_time, "ts");
  EXPECT_EQ(cl.prune.batch, 50u);
  EXPECT_EQ(cl.prune.pause.count(), 0);
  EXPECT_TRUE(cl.prune.dry_run);
  EXPECT_TRUE(parse_command_line({"prune", "--help"}).prune.help);

  EXPECT_EQ(error_of({"prune", "--pg", "x"}),
            "--older-than: required (the retention, e.g. 7d; rows younger are kept)");
  EXPECT_EQ(error_of({"prune", "--older-than", "1d"}), "--pg: required (a libpq conninfo or URI)");
  // The progress record is required: the slot alone may be a slot made anew after a loss.
  EXPECT_EQ(error_of({"prune", "--pg", "x", "--older-than", "1d"}),
            "--brokers: required (or --nats, or --progress-table with the relay's --sqs or "
            "--eventbridge): the relay's progress record shows whether the slot is the one the "
            "relay delivered through (or --without-progress-record to "
            "trust the slot alone)");
  EXPECT_TRUE(
      parse_command_line({"prune", "--pg", "x", "--older-than", "1d", "--without-progress-record"})
          .prune.without_progress_record);
  EXPECT_EQ(error_of({"prune", "--pg", "x", "--older-than", "1d", "--brokers", "k:1",
                      "--without-progress-record"}),
            "--without-progress-record: it trusts the slot alone, and --brokers names a progress "
            "record");
  EXPECT_EQ(error_of({"prune", "--pg", "x", "--older-than", "1d", "--brokers", "k:1", "--nats",
                      "nats://n:1"}),
            "--nats: one progress record: --brokers or --nats");
  EXPECT_EQ(error_of({"prune", "--pg", "x", "--older-than", "1d", "--brokers", "k:1",
                      "--nats-progress-bucket", "a.b"}),
            "--nats-progress-bucket: must be letters, digits, '-' and '_' (a JetStream bucket "
            "name)");
  EXPECT_EQ(error_of({"prune", "--pg", "x", "--older-than", "a week"}),
            "--older-than: invalid duration 'a week' (expected e.g. 500ms, 10s, 1m, 7d)");
  EXPECT_EQ(error_of({"prune", "--pg", "x", "--older-than", "1d", "--batch", "0"}),
            "--batch: invalid count '0' (expected a positive integer)");
  EXPECT_EQ(error_of({"prune", "--pg", "x", "--older-than", "1d", "--column-time", ""}),
            "--column-time: must not be empty");
  EXPECT_EQ(error_of({"prune", "--pg", "x", "--older-than", "1d", "--dry-run=yes"}),
            "--dry-run: takes no value");
  EXPECT_EQ(error_of({"prune", "--pg", "x", "--older-than", "1d", "--yes"}),
            "unknown flag --yes (see --help)");
  EXPECT_NE(usage(Command::kPrune).find("--column-time"), std::string::npos);
  EXPECT_NE(usage().find("prune"), std::string::npos);
}

TEST(CommandLine, Drop) {
  CommandLine cl = parse_command_line({"drop", "--pg", "x"});
  EXPECT_EQ(cl.command, Command::kDrop);
  EXPECT_FALSE(cl.drop.yes);
  cl = parse_command_line({"drop", "--pg", "x", "--slot", "s", "--publication", "p", "--yes"});
  EXPECT_TRUE(cl.drop.yes);
  EXPECT_EQ(cl.drop.slot, "s");
  EXPECT_EQ(cl.drop.publication, "p");
}

TEST(CommandLine, HelpOfEachCommandNeedsNoOtherFlag) {
  EXPECT_TRUE(parse_command_line({"setup", "--help"}).setup.help);
  EXPECT_TRUE(parse_command_line({"status", "-h"}).status.help);
  EXPECT_TRUE(parse_command_line({"drop", "--help"}).drop.help);
  EXPECT_TRUE(parse_command_line({"run", "--help"}).run.help);
  EXPECT_NE(usage(Command::kSetup).find("--create-table"), std::string::npos);
  EXPECT_NE(usage(Command::kStatus).find("--max-retained"), std::string::npos);
  EXPECT_NE(usage(Command::kDrop).find("--yes"), std::string::npos);
  for (const char* flag :
       {"--metrics-addr", "--log-format", "--summary-interval", "setup", "status", "drop"}) {
    EXPECT_NE(usage().find(flag), std::string::npos) << flag;
  }
}

TEST(CommandLine, ErrorsNameTheFlagOrCommand) {
  EXPECT_EQ(error_of({"frobnicate"}),
            "unknown command frobnicate (expected run, setup, status, drop, reconcile or prune; "
            "see --help)");
  EXPECT_EQ(error_of({"setup"}), "--pg: required (a libpq conninfo or URI)");
  EXPECT_EQ(error_of({"status", "--pg", "x", "--transactional-id", "t"}),
            "unknown flag --transactional-id (see --help)");
  EXPECT_EQ(error_of({"drop", "--pg", "x", "--yes=please"}), "--yes: takes no value");
  EXPECT_EQ(error_of({"setup", "--pg", "x", "--table", "a.b.c"}),
            "--table: expected SCHEMA.TABLE or TABLE, got 'a.b.c'");
  EXPECT_EQ(error_of({"status", "--pg", "x", "--slot", ""}), "--slot: must not be empty");
  EXPECT_NE(error_of({"status", "--pg", "x", "--max-retained", "much"}).find("--max-retained"),
            std::string::npos);
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--log-format", "xml"}),
            "--log-format: unknown format 'xml' (expected text or json)");
  EXPECT_NE(error_of({"--pg", "x", "--brokers", "k:1", "--summary-interval", "often"})
                .find("--summary-interval"),
            std::string::npos);
  // -X belongs to run only.
  EXPECT_EQ(error_of({"setup", "--pg", "x", "-Xa=b"}), "unknown flag -Xa=b (see --help)");
  // A transactional producer outside exactly-once would refuse every record.
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--transactional-id", "t"}),
            "--transactional-id: needs --delivery exactly-once");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--transactional-id", "t", "--delivery",
                      "exactly-once"}),
            "no error");
}

// The first arguments that make each command's command line complete.
// In the order of Command.
const std::vector<std::pair<Command, std::vector<std::string>>> kComplete = {
    {Command::kRun, {"run", "--pg", "x", "--brokers", "k:1"}},
    {Command::kSetup, {"setup", "--pg", "x"}},
    {Command::kStatus, {"status", "--pg", "x"}},
    {Command::kDrop, {"drop", "--pg", "x"}},
    {Command::kReconcile,
     {"reconcile", "--pg", "x", "--brokers", "k:1", "--column-time", "t", "--since", "1h"}},
    {Command::kPrune, {"prune", "--pg", "x", "--older-than", "1d", "--brokers", "k:1"}},
};

std::vector<std::string> with(std::vector<std::string> args, std::vector<std::string> extra) {
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The flags a command's --help lists: name and whether it takes a value.
std::vector<std::pair<std::string, bool>> listed_flags(Command command) {
  std::vector<std::pair<std::string, bool>> flags;
  std::istringstream lines(usage(command));
  bool in_flags = command != Command::kRun;  // run's help lists the commands first
  for (std::string line; std::getline(lines, line);) {
    if (line == "flags of run:") in_flags = true;
    if (!in_flags || line.rfind("  -", 0) != 0) continue;
    std::istringstream words(line);
    std::string name, next;
    words >> name >> next;
    flags.emplace_back(
        name, !next.empty() && (std::isupper(next[0]) || next.find('|') != std::string::npos));
  }
  return flags;
}

TEST(FlagTable, EveryListedFlagIsKnownAndWantsItsValue) {
  for (const auto& [command, complete] : kComplete) {
    const auto flags = listed_flags(command);
    EXPECT_GE(flags.size(), 5u);
    for (const auto& [flag, valued] : flags) {
      if (valued) {
        EXPECT_EQ(error_of(with(complete, {flag})), flag + ": missing value");
      } else {
        EXPECT_EQ(error_of(with(complete, {flag + "=x"})), flag + ": takes no value");
      }
    }
    EXPECT_EQ(error_of(with(complete, {"--bogus"})), "unknown flag --bogus (see --help)");
    EXPECT_EQ(error_of(with(complete, {"--bogus=1"})), "unknown flag --bogus (see --help)");
    EXPECT_EQ(error_of(with(complete, {"stray"})), "unexpected argument stray (see --help)");
    EXPECT_EQ(error_of(with(complete, {"-hx"})), "unknown flag -hx (see --help)");
    EXPECT_EQ(parse_command_line(complete).command, command);
  }
}

TEST(FlagTable, EveryBoundedFlagRejectsBelowItsBoundAndTakesTheBound) {
  const std::string positive = "' (expected a positive integer)";
  const std::string size = "' (expected e.g. 268435456, 512KiB, 256MiB, 1GiB)";
  const std::vector<std::tuple<Command, std::string, std::string, std::string, std::string>> cases =
      {
          {Command::kRun, "--status-interval", "999us", "1ms",
           "--status-interval: invalid duration '999us' (expected e.g. 500ms, 10s, 1m, 7d, at "
           "least 1ms)"},
          {Command::kRun, "--publication-check-interval", "999ms", "1s",
           "--publication-check-interval: '999ms' is below 1s"},
          {Command::kRun, "--max-inflight-events", "0", "1",
           "--max-inflight-events: invalid count '0" + positive},
          {Command::kRun, "--max-inflight-bytes", "0KiB", "1",
           "--max-inflight-bytes: invalid size '0KiB" + size},
          {Command::kRun, "--backlog-scan-limit", "0", "1",
           "--backlog-scan-limit: invalid count '0" + positive},
          {Command::kRun, "--metrics-addr", "127.0.0.1:65536", "127.0.0.1:65535",
           "--metrics-addr: invalid address '127.0.0.1:65536' (expected HOST:PORT with an IP "
           "address, e.g. 127.0.0.1:9187, [::1]:9187, :9187, or off)"},
          {Command::kStatus, "--max-retained", "0", "1", "--max-retained: invalid size '0" + size},
          {Command::kStatus, "--scan-limit", "0", "1", "--scan-limit: invalid count '0" + positive},
          {Command::kStatus, "--max-pending", "-1", "0",
           "--max-pending: invalid count '-1' (expected a non-negative integer)"},
          {Command::kPrune, "--batch", "0", "1", "--batch: invalid count '0" + positive},
          {Command::kReconcile, "--timeout", "999us", "1ms", "--timeout: must be positive"},
      };
  for (const auto& [command, flag, below, bound, message] : cases) {
    const auto& complete = kComplete[static_cast<std::size_t>(command)].second;
    EXPECT_EQ(error_of(with(complete, {flag, below})), message);
    EXPECT_EQ(error_of(with(complete, {flag, bound})), "no error") << flag;
  }
}

TEST(FlagTable, RequiredFlagGivenEmptyIsMissing) {
  EXPECT_EQ(error_of({"--pg=", "--brokers", "k:1"}), "--pg: required (a libpq conninfo or URI)");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--pg="}),
            "--pg: required (a libpq conninfo or URI)");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers="}), "--brokers: required (HOST:PORT[,...])");
  EXPECT_EQ(
      error_of({"reconcile", "--pg", "x", "--brokers", "k:1", "--since", "1h", "--column-time="}),
      "--column-time: required (the rows' time column, e.g. created_at)");
  // A required flag of another kind still has its value checked.
  EXPECT_EQ(error_of({"prune", "--pg", "x", "--older-than="}),
            "--older-than: invalid duration '' (expected e.g. 500ms, 10s, 1m, 7d)");
}

TEST(FlagTable, HelpSkipsRequiredAndLateChecksButNotBadValues) {
  EXPECT_TRUE(parse_command_line({"setup", "--table", "a.b.c", "--slot=", "--help"}).setup.help);
  EXPECT_TRUE(parse_command_line({"reconcile", "--timeout", "0", "-h"}).reconcile.help);
  EXPECT_TRUE(parse_command_line({"--version"}).run.version);
  EXPECT_EQ(error_of({"--help", "--status-interval", "x"}),
            "--status-interval: invalid duration 'x' (expected e.g. 500ms, 10s, 1m, 7d, at least "
            "1ms)");
  // A missing required flag is reported before a late check; a later good value clears one.
  EXPECT_EQ(error_of({"setup", "--table", "a.b.c"}), "--pg: required (a libpq conninfo or URI)");
  EXPECT_EQ(
      parse_command_line({"setup", "--pg", "x", "--table", "a.b.c", "--table", "t"}).setup.table,
      "t");
}

TEST(FlagTable, AttachedValueOnlyForTwoCharacterValuedFlags) {
  CommandLine cl = parse_command_line({"--pg", "x", "--brokers", "k:1", "-Xa=b", "-X", "c=d"});
  ASSERT_EQ(cl.run.sinks.kafka.properties.size(), 2u);
  EXPECT_EQ(cl.run.sinks.kafka.properties[0].first, "a");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "-X="}),
            "-X: expected PROPERTY=VALUE (the value is not shown: it may hold a secret)");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "-hx"}), "unknown flag -hx (see --help)");
}

TEST(FlagTable, HelpRowsLineUpAndWrap) {
  const std::string u = usage();
  EXPECT_NE(
      u.find(
          "\n  --slot NAME                    logical replication slot (default outbox_relay)\n"),
      std::string::npos);
  // Too long for the column: the text starts on the next line.
  EXPECT_NE(u.find("\n  --publication-check-interval DURATION\n"
                   "                                 longest time between two checks"),
            std::string::npos);
  EXPECT_NE(u.find("\n  -X PROPERTY=VALUE              librdkafka producer property"),
            std::string::npos);
  EXPECT_EQ(u.find("-h "), std::string::npos);  // an alias is not listed
}

}  // namespace
}  // namespace outbox::app
