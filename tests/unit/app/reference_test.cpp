// The generated reference tables (outbox/app/reference.hpp): every flag --help lists, with the
// default its help text states, and every metric family /metrics serves.
#include "outbox/app/reference.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace outbox::app {
namespace {

std::map<std::string, FlagDoc> by_flag(Command command) {
  std::map<std::string, FlagDoc> out;
  for (const FlagDoc& f : flag_docs(command)) out[f.flag] = f;
  return out;
}

TEST(Reference, EveryFlagOfHelpIsInTheTable) {
  for (Command c : all_commands()) {
    const std::string help = usage(c);
    const auto docs = flag_docs(c);
    ASSERT_FALSE(docs.empty()) << command_word(c);
    for (const FlagDoc& f : docs) {
      const std::string label = f.metavar.empty() ? f.flag : f.flag + " " + f.metavar;
      EXPECT_NE(help.find("  " + label), std::string::npos) << command_word(c) << " " << label;
    }
  }
}

// A command added to --help's list without a reference page fails here (and docs.generated
// fails until the page holds its generated table).
TEST(Reference, EveryCommandOfHelpHasItsTable) {
  const std::string help = usage();
  const std::size_t from = help.find("commands:\n");
  const std::string list = help.substr(from, help.find("flags of run:") - from);
  std::vector<std::string> words;
  for (std::size_t at = list.find("\n  "); at != std::string::npos;
       at = list.find("\n  ", at + 1)) {
    const std::size_t begin = at + 3;
    if (list[begin] == ' ') continue;  // a continuation line
    words.push_back(list.substr(begin, list.find(' ', begin) - begin));
  }
  std::vector<std::string> documented;
  for (Command c : all_commands()) documented.push_back(command_word(c));
  EXPECT_EQ(words, documented);
}

TEST(Reference, DefaultsAreReadFromTheHelpText) {
  auto run = by_flag(Command::kRun);
  EXPECT_EQ(run["--pg"].default_value, "required");
  EXPECT_EQ(run["--slot"].default_value, "outbox_relay");
  EXPECT_EQ(run["--topic"].default_value, "'outbox.event.${aggregatetype}'");
  EXPECT_EQ(run["--read-pause"].default_value, "500us");
  EXPECT_EQ(run["--metrics-addr"].default_value, "127.0.0.1:9187");
  EXPECT_EQ(run["--on-error"].default_value, "fail");
  EXPECT_EQ(run["--format"].default_value, "debezium");
  EXPECT_EQ(run["--delivery"].default_value, "at-least-once");
  EXPECT_EQ(run["--message-format"].default_value, "auto");
  EXPECT_EQ(run["--column-timestamp"].default_value, "the commit time");
  EXPECT_EQ(run["--max-inflight-bytes"].default_value, "16MiB");
  EXPECT_EQ(run["--no-create"].default_value, "off");
  EXPECT_EQ(run["--help"].default_value, "");
  auto status = by_flag(Command::kStatus);
  EXPECT_EQ(status["--max-pending"].default_value, "no limit");
  auto reconcile = by_flag(Command::kReconcile);
  EXPECT_EQ(reconcile["--until"].default_value, "now");
  EXPECT_EQ(reconcile["--margin"].default_value, "1h");
}

TEST(Reference, EnvironmentVariablesAndArgvOnlyFlags) {
  auto run = by_flag(Command::kRun);
  EXPECT_EQ(run["--kafka-config"].env, "OUTBOX_RELAY_KAFKA_CONFIG");
  EXPECT_EQ(run["-X"].env, "");
  EXPECT_EQ(run["--additional-placement"].env, "");
  EXPECT_EQ(run["--help"].env, "");
  EXPECT_EQ(by_flag(Command::kDrop)["--yes"].env, "");
  EXPECT_EQ(by_flag(Command::kReconcile)["--repair"].env, "");
}

TEST(Reference, TableCellsEscapeBars) {
  const std::string table = flag_table_markdown(Command::kRun);
  EXPECT_NE(table.find("`--on-error fail\\|dlq`"), std::string::npos) << table;
}

TEST(Reference, EveryMetricFamilyWithTypeAndLabels) {
  std::map<std::string, MetricDoc> docs;
  for (const MetricDoc& d : metric_docs()) docs[d.name] = d;
  EXPECT_EQ(docs["outbox_relay_events_published_total"].labels, "topic");
  EXPECT_EQ(docs["outbox_relay_events_published_total"].type, "counter");
  EXPECT_EQ(docs["outbox_relay_info"].labels, "slot, publication, table, version");
  EXPECT_EQ(docs["outbox_relay_commit_to_ack_seconds"].type, "histogram");
  EXPECT_EQ(docs["outbox_relay_commit_to_ack_seconds"].labels, "");
  EXPECT_EQ(docs["outbox_relay_backlog_scans_total"].labels, "result");
  EXPECT_EQ(docs.count("outbox_relay_pending_events"), 1u);
  for (const auto& [name, d] : docs) {
    EXPECT_FALSE(d.type.empty()) << name;
    EXPECT_FALSE(d.help.empty()) << name;
  }
}

}  // namespace
}  // namespace outbox::app
