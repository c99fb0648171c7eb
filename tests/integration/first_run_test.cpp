// docs/first-run.md, run as a reader would: the page's marked shell blocks (the convention is in
// the comment at the top of the page) run in order in `bash -euo pipefail`, from the repository's
// root, with the page's variables given this test's values: a database, roles, a slot and an
// aggregate type of its own (roles and slots are cluster-wide, so that tests sharing a lane's
// servers never collide), the broker's SASL_SSL listener as the principal User:outbox-relay,
// whose ACLs scripts/kafka-up.sh made. The relay's block runs in the background and is stopped
// with SIGTERM at the end. Then what a user would check: the event on its topic with its key,
// value and headers, `status` showing the slot, /healthz answering, the relay streaming as its
// LOGIN REPLICATION role with no privilege on the table.
//
// The servers of scripts/test.sh accept any role without a password on 127.0.0.1 (trust).

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "outbox_test/http.hpp"
#include "outbox_test/kafka_admin.hpp"
#include "outbox_test/kafka_reader.hpp"
#include "outbox_test/pg_client.hpp"
#include "outbox_test/relay_process.hpp"
#include "outbox_test/support.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

// One shell block of the page marked <!-- first-run: KIND --> on the line before its ```sh fence.
struct Block {
  std::string kind;  // settings, run, background
  std::string text;
  int line = 0;  // of the fence, for messages
};

// The marked blocks in page order. A marker not followed by a ```sh fence, an unknown kind or an
// unclosed fence is an error (returned in `error`).
std::vector<Block> marked_blocks(const std::string& page, std::string& error) {
  static const std::regex marker(R"(^<!-- first-run: ([a-z]+) -->\s*$)");
  std::vector<Block> blocks;
  std::istringstream in(page);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    if (!std::regex_match(lines[i], m, marker)) continue;
    const std::string kind = m[1];
    if (kind != "settings" && kind != "run" && kind != "background") {
      error = "line " + std::to_string(i + 1) + ": unknown marker kind '" + kind + "'";
      return {};
    }
    if (i + 1 >= lines.size() || lines[i + 1] != "```sh") {
      error = "line " + std::to_string(i + 1) + ": the marker is not followed by a ```sh fence";
      return {};
    }
    Block block{kind, "", static_cast<int>(i + 2)};
    std::size_t j = i + 2;
    for (; j < lines.size() && lines[j] != "```"; ++j) block.text += lines[j] + "\n";
    if (j == lines.size()) {
      error = "line " + std::to_string(i + 2) + ": the fence is never closed";
      return {};
    }
    blocks.push_back(block);
    i = j;
  }
  return blocks;
}

// The variables a settings block assigns (NAME=... at the start of a line), and which of them it
// exports (export NAME=...).
std::map<std::string, bool> assigned_variables(const std::string& settings) {
  static const std::regex assignment(R"(^(export\s+)?([A-Za-z_][A-Za-z0-9_]*)=)");
  std::map<std::string, bool> names;
  std::istringstream in(settings);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, assignment)) names[m[2]] = m[1].matched;
  }
  return names;
}

std::string shell_quote(const std::string& value) {
  std::string quoted = "'";
  for (char c : value) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The logs folder may not exist yet: this test can be the first of the build to run.
void write_private_file(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
  ::chmod(path.c_str(), 0600);
}

class FirstRun : public ::testing::Test {
 protected:
  void SetUp() override {
    try {
      const Services services = require_services();
      conninfo_ = services.conninfo;
      brokers_ = services.brokers;
      relay_bin_ = services.relay_bin;
      sasl_brokers_ = require_env("OUTBOX_KAFKA_SASL_BROKERS");
      ca_ = require_env("OUTBOX_KAFKA_CA");
      relay_user_ = require_env("OUTBOX_KAFKA_SASL_USER");
      relay_password_ = require_env("OUTBOX_KAFKA_SASL_PASSWORD");
      admin_user_ = require_env("OUTBOX_KAFKA_ADMIN_USER");
      admin_password_ = require_env("OUTBOX_KAFKA_ADMIN_PASSWORD");
    } catch (const std::exception& e) {
      GTEST_FAIL() << e.what();
    }
    suffix_ = unique_suffix();
    database_ = "first_run_" + suffix_;
    owner_ = "fr_owner_" + suffix_;
    relay_role_ = "fr_relay_" + suffix_;
    slot_ = "fr_" + suffix_;
    aggregate_ = "Order" + suffix_;
    // libpq takes the last value of a keyword given twice.
    db_conninfo_ = conninfo_ + " dbname=" + database_;
    ASSERT_NO_THROW(admin_ = std::make_unique<PgClient>(conninfo_));
    admin_->exec("CREATE DATABASE " + database_);
    database_created_ = true;
  }

  void TearDown() override {
    if (relay_ && relay_->is_running() && !relay_->terminate(15s)) relay_->kill9();
    if (relay_ && HasFailure()) {
      std::cerr << "---- relay log " << relay_->log_path() << " (last lines) ----\n"
                << tail_file(relay_->log_path(), 60);
    }
    if (!admin_ || !database_created_) return;
    try {
      {
        // The slot first (after the relay): an abandoned slot holds WAL forever, and a database
        // with a logical slot cannot be dropped.
        PgClient in_database(db_conninfo_);
        in_database.drop_slot_if_exists(slot_);
      }
      admin_->exec("DROP DATABASE IF EXISTS " + database_ + " WITH (FORCE)");
      // Their privileges and the objects they owned went with the database.
      admin_->exec("DROP ROLE IF EXISTS " + owner_);
      admin_->exec("DROP ROLE IF EXISTS " + relay_role_);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "cleanup: " << e.what();
    }
  }

  std::string log_path(const std::string& what) const {
    return std::string(OUTBOX_TEST_LOG_DIR) + "/FirstRun_" + suffix_ + "_" + what + ".log";
  }

  // This test's values of the page's variables, in the page's order, exported as the page does.
  std::vector<std::pair<std::string, std::string>> values(std::uint16_t metrics_port) {
    const std::string kafka_config = log_path("kafka.properties");
    const std::string consumer_config = log_path("consumer.properties");
    const std::string tls =
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nssl.ca.location=" + ca_ + "\n";
    write_private_file(kafka_config, tls + "sasl.username=" + relay_user_ +
                                         "\nsasl.password=" + relay_password_ + "\n");
    write_private_file(consumer_config, tls + "sasl.username=" + admin_user_ +
                                            "\nsasl.password=" + admin_password_ + "\n");
    return {{"PG_ADMIN", db_conninfo_},
            {"OWNER", owner_},
            {"RELAY", relay_role_},
            {"PG_OWNER", db_conninfo_ + " user=" + owner_},
            {"PG_RELAY", db_conninfo_ + " user=" + relay_role_},
            {"BROKERS", sasl_brokers_},
            {"KAFKA_CONFIG", kafka_config},
            {"CONSUMER_CONFIG", consumer_config},
            {"METRICS", "127.0.0.1:" + std::to_string(metrics_port)},
            {"AGGREGATE", aggregate_},
            {"OUTBOX_RELAY_SLOT", slot_}};
  }

  std::string conninfo_, brokers_, relay_bin_, sasl_brokers_, ca_;
  std::string relay_user_, relay_password_, admin_user_, admin_password_;
  std::string suffix_, database_, owner_, relay_role_, slot_, aggregate_, db_conninfo_;
  bool database_created_ = false;
  std::unique_ptr<PgClient> admin_;
  std::unique_ptr<RelayProcess> relay_;
};

TEST_F(FirstRun, ThePageRunsFromNothingToAStreamingRelay) {
  const std::filesystem::path root(OUTBOX_SOURCE_DIR);
  const std::string page = read_file((root / "docs" / "first-run.md").string());
  ASSERT_FALSE(page.empty()) << "cannot read " << (root / "docs" / "first-run.md");
  std::string error;
  const std::vector<Block> blocks = marked_blocks(page, error);
  ASSERT_TRUE(error.empty()) << "docs/first-run.md: " << error;

  // The page's step 4, which it does not run (kafka-topics.sh, a replication factor of 3): the
  // event topic made beforehand, on the single test broker, so that kcat finds it at once.
  const std::string topic = "outbox.event." + aggregate_;
  ASSERT_NO_THROW(create_topic(brokers_, topic, 3, 1, {{"min.insync.replicas", "1"}}));

  const std::uint16_t port = free_port();
  const auto ours = values(port);
  std::map<std::string, bool> page_names;
  int settings = 0, background = 0, runs = 0;
  for (const Block& b : blocks) {
    if (b.kind == "settings") {
      ++settings;
      page_names = assigned_variables(b.text);
    }
    background += b.kind == "background";
    runs += b.kind == "run";
  }
  ASSERT_EQ(settings, 1) << "docs/first-run.md needs one settings block";
  ASSERT_EQ(background, 1) << "docs/first-run.md needs one background block (the relay)";
  ASSERT_GE(runs, 8) << "docs/first-run.md lost its run blocks";
  // The test defines what the page's settings define, no more and no less.
  std::map<std::string, bool> our_names;
  for (const auto& [name, value] : ours)
    our_names[name] = page_names.count(name) && page_names[name];
  std::set<std::string> page_set, our_set;
  for (const auto& [name, exported] : page_names) page_set.insert(name);
  for (const auto& [name, value] : ours) our_set.insert(name);
  ASSERT_EQ(page_set, our_set) << "the page's settings block and this test's values differ";

  // The settings, then `cd` to the repository's root: the prefix of every block's script.
  std::string prefix;
  for (const auto& [name, value] : ours) {
    prefix += (our_names[name] ? "export " : "") + name + "=" + shell_quote(value) + "\n";
  }
  prefix += "cd " + shell_quote(root.string()) + "\n";

  // outbox-relay and psql on PATH, as installed.
  const std::string pg_bin = std::getenv("OUTBOX_PG_BIN") ? std::getenv("OUTBOX_PG_BIN") : "";
  const char* path = std::getenv("PATH");
  ::setenv("PATH",
           (std::filesystem::path(relay_bin_).parent_path().string() +
            (pg_bin.empty() ? "" : ":" + pg_bin) + ":" + (path ? path : "/usr/bin:/bin"))
               .c_str(),
           1);

  std::map<std::string, std::string> out_of;  // a block's first word of interest -> its stdout
  int n = 0;
  for (const Block& b : blocks) {
    if (b.kind == "settings") continue;
    ++n;
    const std::string script = prefix + (b.kind == "background" ? "exec " : "") + b.text;
    const std::vector<std::string> args = {"-euo", "pipefail", "-c", script};
    std::cerr << "docs/first-run.md:" << b.line << " (" << b.kind << "):\n" << b.text;
    if (b.kind == "background") {
      relay_ = std::make_unique<RelayProcess>("/bin/bash", args, log_path("relay"));
      std::cerr << "relay log: " << relay_->log_path() << "\n";
      continue;
    }
    const CommandResult r = run_to_end("/bin/bash", args, log_path(std::to_string(n) + "_out"),
                                       log_path(std::to_string(n) + "_err"), 120s);
    std::cerr << r.out << r.err;
    ASSERT_EQ(r.exit_code, 0) << "docs/first-run.md:" << b.line << " failed:\n"
                              << b.text << "stdout:\n"
                              << r.out << "stderr:\n"
                              << r.err;
    if (relay_) {
      ASSERT_TRUE(relay_->is_running()) << "the relay exited:\n"
                                        << tail_file(relay_->log_path(), 30);
    }
    for (const char* what : {"kcat", "outbox-relay status", "outbox-relay setup", "/healthz"}) {
      if (b.text.find(what) != std::string::npos) out_of[what] = r.out;
    }
  }
  ASSERT_TRUE(relay_) << "no relay was started";

  // setup made the table, the publication and the slot.
  EXPECT_NE(out_of["outbox-relay setup"].find("slot " + slot_ + ": created"), std::string::npos)
      << out_of["outbox-relay setup"];

  // The event, as kcat printed it and as a Kafka client of the test reads it.
  EXPECT_NE(out_of["kcat"].find("key=order-7 value={\"total\": 12}"), std::string::npos)
      << out_of["kcat"];
  EXPECT_NE(out_of["kcat"].find("type=OrderPaid"), std::string::npos) << out_of["kcat"];
  PgClient in_database(db_conninfo_);
  const std::string id = in_database.scalar("SELECT id::text FROM public.outbox").value_or("");
  KafkaReader reader(brokers_, {topic});
  ASSERT_TRUE(reader.read_until([](const auto& records) { return !records.empty(); }, 60s))
      << "no record on " << topic;
  EXPECT_TRUE(reader.read_to_end()) << reader.errors().back();
  ASSERT_EQ(reader.records().size(), 1u);
  const Record& record = reader.records().front();
  EXPECT_EQ(record.topic, topic);
  EXPECT_EQ(record.key.value_or("<null>"), "order-7");
  EXPECT_EQ(record.value, "{\"total\": 12}");
  EXPECT_EQ(record.headers.count("id") ? record.headers.at("id") : "<none>", id);
  EXPECT_EQ(record.headers.count("type") ? record.headers.at("type") : "<none>", "OrderPaid");

  // status: the slot, streamed by the relay, healthy.
  const std::string& status = out_of["outbox-relay status"];
  EXPECT_TRUE(std::regex_search(status, std::regex("slot\\s+" + slot_))) << status;
  EXPECT_TRUE(std::regex_search(status, std::regex("active\\s+yes"))) << status;
  EXPECT_TRUE(std::regex_search(status, std::regex("health\\s+ok"))) << status;
  EXPECT_NE(out_of["/healthz"].find("ok"), std::string::npos) << out_of["/healthz"];
  EXPECT_EQ(http_get(port, "/healthz").status, 200);
  EXPECT_EQ(http_get(port, "/readyz").status, 200);

  // Least privilege: the walsender is the relay role's, which may not read the table; the owner
  // gave REPLICATION back.
  EXPECT_EQ(in_database.scalar("SELECT r.usename::text FROM pg_stat_replication r "
                               "JOIN pg_replication_slots s ON s.active_pid = r.pid "
                               "WHERE s.slot_name = $1",
                               {slot_}),
            relay_role_);
  EXPECT_EQ(in_database.scalar("SELECT concat_ws(' ', rolsuper, rolreplication, rolcreatedb, "
                               "rolcreaterole) FROM pg_roles WHERE rolname = $1",
                               {relay_role_}),
            "f t f f");
  EXPECT_EQ(in_database.scalar("SELECT has_table_privilege($1, 'public.outbox', "
                               "'SELECT,INSERT,UPDATE,DELETE')::text",
                               {relay_role_}),
            "false");
  EXPECT_EQ(
      in_database.scalar("SELECT rolreplication::text FROM pg_roles WHERE rolname = $1", {owner_}),
      "false");

  // SIGTERM: the relay stops in order, exit code 0.
  EXPECT_EQ(relay_->terminate(40s), 0) << tail_file(relay_->log_path(), 30);
}

}  // namespace
}  // namespace outbox_test
