// parse_command_line (options.hpp): the command word, its table applied (command_tables.hpp),
// then its cross-flag checks (flag_checks.hpp).
#include "outbox/app/options.hpp"

#include "command_tables.hpp"
#include "flag_checks.hpp"
#include "flags.hpp"

namespace outbox::app {
namespace {

template <class Opts>
Opts parse_with(flags::Table (*table_of)(Opts&), const std::vector<std::string>& args,
                const flags::Environment& env) {
  Opts o;
  flags::parse(args, table_of(o), env);
  return o;
}

}  // namespace

Options parse_options(const std::vector<std::string>& args, const Environment& env) {
  Options o = parse_with(flags::run_flags, args, env);
  auto& m = o.relay.mapper;
  if (!o.help && !o.version) {
    flags::check_run(o);
    if (!m.message_prefix.empty()) {
      if (!o.table_given) m.table.clear();  // messages only
      flags::check_messages_mapping(m);
    }
  }
  if (o.progress_table) o.sinks.progress_table = *o.progress_table;
  // The file's properties first: -X overrides them.
  auto& p = o.sinks.kafka.properties;
  p.insert(p.begin(), o.kafka_config.begin(), o.kafka_config.end());
  if (!o.help && !o.version) {
    flags::check_kafka_properties(p, o.unsafe_kafka_config, "-X, --kafka-config");
  }
  return o;
}

ReconcileOptions parse_reconcile(const std::vector<std::string>& args, const Environment& env) {
  ReconcileOptions o = parse_with(flags::reconcile_table, args, env);
  // The file's properties first: -X overrides them.
  o.properties.insert(o.properties.begin(), o.kafka_config.begin(), o.kafka_config.end());
  if (!o.help) flags::check_reconcile(o);
  return o;
}

// The file's properties first: -X overrides them.
static void merge_kafka_config(ProgressRecordFlags& o) {
  auto& p = o.where.properties;
  p.insert(p.begin(), o.kafka_config.begin(), o.kafka_config.end());
}

static PruneOptions parse_prune(const std::vector<std::string>& args, const Environment& env) {
  PruneOptions o = parse_with(flags::prune_flags, args, env);
  merge_kafka_config(o.progress);
  if (!o.help) flags::check_prune(o);
  return o;
}

static StatusOptions parse_status(const std::vector<std::string>& args, const Environment& env) {
  StatusOptions o = parse_with(flags::status_flags, args, env);
  merge_kafka_config(o.progress);
  if (!o.help) flags::check_progress_record(o.progress);
  return o;
}

CommandLine parse_command_line(const std::vector<std::string>& args, const Environment& env) {
  CommandLine cl;
  if (args.empty() || args[0].rfind("-", 0) == 0) {
    cl.run = parse_options(args, env);
    return cl;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  const flags::CommandWord* found = nullptr;
  std::vector<std::string> words;
  for (const flags::CommandWord& c : flags::command_words()) {
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
      cl.setup = parse_with(flags::setup_flags, rest, env);
      if (!cl.setup.help) flags::check_setup(cl.setup);
      break;
    case Command::kStatus:
      cl.status = parse_status(rest, env);
      break;
    case Command::kDrop:
      cl.drop = parse_with(flags::drop_flags, rest, env);
      break;
    case Command::kReconcile:
      cl.reconcile = parse_reconcile(rest, env);
      break;
    case Command::kPrune:
      cl.prune = parse_prune(rest, env);
      break;
  }
  return cl;
}

}  // namespace outbox::app
