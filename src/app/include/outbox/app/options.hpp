// Command line of `outbox-relay`: the default `run` command (the relay, with its flags) and the
// operating commands beside it (setup, status, drop, prune). Parsing does no I/O but one: reading
// --kafka-config's file (src/app/properties_file.hpp). Each command's flags are a table
// (src/app/command_tables.hpp) applied by the flag engine (src/app/flags.hpp), then checked
// across flags (src/app/flag_checks.hpp); the help texts print the same tables (src/app/usage.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "outbox/app/reconcile_options.hpp"
#include "outbox/lifecycle/options.hpp"
#include "outbox/relay/relay.hpp"
#include "outbox/sinks/sinks.hpp"

namespace outbox::app {

// A flag or value the user got wrong; what() is one line naming the flag.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using lifecycle::ProgressRecordFlags;
using lifecycle::PruneOptions;
using lifecycle::StatusOptions;

enum class Command { kRun, kSetup, kStatus, kDrop, kReconcile, kPrune };
enum class LogFormat { kText, kJson };

// An IP address and port to listen on.
struct ListenAddress {
  std::string host;  // IPv4 or IPv6 literal, without brackets
  std::uint16_t port = 0;
};

inline constexpr const char* kDefaultMetricsAddr = "127.0.0.1:9187";

// Flags of `outbox-relay [run]`.
struct Options {
  relay::RelayConfig relay;
  // The broker's settings (Kafka's producer, or NATS JetStream's with --nats).
  sinks::SinkConfig sinks;
  std::string log_level = "info";
  LogFormat log_format = LogFormat::kText;
  // nullopt: --metrics-addr off.
  std::optional<ListenAddress> metrics_addr = ListenAddress{"127.0.0.1", 9187};
  // The user gave --metrics-addr: failing to listen there is fatal. The default address is
  // best effort (a second relay on the same host, e.g. a standby, runs without it).
  bool metrics_addr_explicit = false;
  // Period of the summary log line while streaming; zero: off.
  std::chrono::milliseconds summary_interval{60'000};
  // Period of the backlog count for /metrics (BacklogSampler); zero: off.
  std::chrono::milliseconds backlog_interval{60'000};
  // pgoutput messages one count reads at most (beyond: a lower bound; the oldest stays exact).
  std::uint64_t backlog_scan_limit = 10'000;
  // Properties read from --kafka-config; parse_options() puts them before -X's in
  // sinks.kafka.properties, so that -X overrides them.
  std::vector<std::pair<std::string, std::string>> kafka_config;
  // --unsafe-kafka-config: properties that run a command or load code are accepted.
  bool unsafe_kafka_config = false;
  // Said once logging is up (e.g. a --kafka-config file others may read).
  std::vector<std::string> warnings;
  // --table was given. With --messages and no --table, the relay relays messages only
  // (relay.mapper.table is then empty).
  bool table_given = false;
  // --failover: the slot is (made) a failover slot; the primary is checked first (failover.hpp).
  bool failover = false;
  // --standby: a standby whose copy of the slot /metrics reports (outbox_relay_failover_ready).
  std::string standby;
  // --gap-repair-column: the outbox's time column, from which a gap the progress record shows
  // (a slot lost while the relay was down) is repaired before streaming (gap_repair.hpp); empty:
  // such a gap stops the relay (exit 4). --gap-repair-margin: how far before the record's time
  // the repair looks (transactions that ran that long, clocks that far apart).
  std::string gap_repair_column;
  std::chrono::milliseconds gap_repair_margin{std::chrono::hours(1)};
  // --progress-table (with --sqs or --eventbridge): parse_options() moves it into
  // sinks.progress_table.
  std::optional<sinks::ProgressTableName> progress_table;
  bool progress_table_given = false;
  bool help = false;
  bool version = false;
};

// Flags of `outbox-relay setup`.
struct SetupOptions {
  std::string conninfo;
  std::string slot = "outbox_relay";
  std::string publication = "outbox_relay";
  std::string schema = "public";
  std::string table = "outbox";
  bool create_table = false;
  // --messages PREFIX: installs outbox.emit(), which emits messages with this prefix; without
  // --table, no table is needed and the publication is created empty.
  std::string message_prefix;
  // --message-writer ROLE (repeatable, with --messages): the roles given EXECUTE on
  // pg_logical_emit_message once it is revoked from PUBLIC.
  std::vector<std::string> message_writers;
  bool table_given = false;
  bool failover = false;  // --failover: a failover slot, on a primary that protects it
  // --nats URL --nats-stream NAME: the JetStream stream `run --nats` publishes into, created
  // (or checked, when it exists) capturing the subjects --topic renders and --dlq-topic, with
  // at least --nats-duplicate-window.
  nats::PublisherConfig nats;
  std::string nats_stream;
  std::chrono::milliseconds nats_duplicate_window{std::chrono::minutes(2)};
  std::string topic_template = "outbox.event.${aggregatetype}";
  std::string dlq_subject = "outbox.dlq";
  std::string stream_setting_given;  // the first of --topic, --dlq-topic, --nats-duplicate-window
  // --sqs QUEUE_URL (--sqs-dlq) or --eventbridge BUS (--eventbridge-dlq), with --aws-region and
  // --aws-endpoint: checked in the account (aws/setup_check.hpp) before the database is touched;
  // nothing is created there.
  aws::SqsSinkOptions sqs;
  aws::EventBridgeSinkOptions eventbridge;
  // --progress-table: the table of the relay's progress record with SQS and EventBridge, made
  // when missing (an empty schema: the outbox table's).
  std::optional<sinks::ProgressTableName> progress_table;
  bool help = false;
};

// The subjects setup's stream captures: for each subject the topic template can render, the
// literal tokens before its first column reference followed by `>` ("outbox.event.${x}" ->
// "outbox.event.>": a column value may hold dots, i.e. several tokens, and a reference inside a
// token cannot be matched by a wildcard, so "a.b${x}.c" -> "a.>"); a template without reference
// is its own subject. Then `dlq_subject` unless the first captures it. Throws
// std::invalid_argument when the template starts with a reference (only ">" would capture it).
std::vector<std::string> nats_stream_subjects(const std::string& topic_template,
                                              const std::string& dlq_subject);

// Flags of `outbox-relay drop`.
struct DropOptions {
  std::string conninfo;
  std::string slot = "outbox_relay";
  std::string publication = "outbox_relay";
  bool yes = false;
  bool help = false;
};

struct CommandLine {
  Command command = Command::kRun;
  Options run;  // kRun
  SetupOptions setup;
  StatusOptions status;
  DropOptions drop;
  ReconcileOptions reconcile;
  PruneOptions prune;
};

// The whole command line (argv without the program name): an optional command word (run, setup,
// status, drop, reconcile, prune; run when absent) and its flags, after the flags' environment
// variables (OUTBOX_RELAY_<FLAG>, see usage()): the command line wins. --kafka-config reads its
// file here. Throws UsageError.
CommandLine parse_command_line(const std::vector<std::string>& args, const Environment& env = {});

// The flags of `run` alone. Throws UsageError.
Options parse_options(const std::vector<std::string>& args, const Environment& env = {});

// Help text of `run` (with the list of commands) and of each command.
std::string usage();
std::string usage(Command command);

// "HOST:PORT", "[V6]:PORT" or ":PORT" (all interfaces). Throws UsageError naming `flag`.
ListenAddress parse_listen_address(const std::string& flag, const std::string& text);

}  // namespace outbox::app
