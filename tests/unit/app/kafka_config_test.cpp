// Secrets out of argv: --kafka-config reads librdkafka properties from a file (kcat -F's
// format), -X overrides it, and every flag can come from an OUTBOX_RELAY_ environment variable
// with the command line winning. Bad files and bad variables exit 2 with one line naming the
// flag, the variable or FILE:LINE, and never a line's text (it may hold a password).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "flag_errors.hpp"
#include "outbox/app/options.hpp"

namespace outbox::app {
namespace {

namespace fs = std::filesystem;

// A file in a directory of its own, removed with it.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    dir_ = fs::temp_directory_path() /
           ("outbox_kafka_config_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(dir_);
    path_ = (dir_ / "client.properties").string();
    std::ofstream(path_) << text;
  }
  ~TempFile() { fs::remove_all(dir_); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
  std::string path_;
};

using Props = std::vector<std::pair<std::string, std::string>>;

Environment env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

TEST(KafkaConfig, ReadsPropertiesLikeKcat) {
  TempFile f(
      "# the relay's Kafka client\n"
      "\n"
      "security.protocol=SASL_SSL\n"
      "  sasl.mechanism = PLAIN  \n"
      "sasl.username=relay\r\n"
      "sasl.password=p=ss#word\n"
      "   # indented comment\n"
      "ssl.ca.location=/etc/ssl/ca.pem");
  CommandLine cl =
      parse_command_line({"--pg", "x", "--brokers", "k:1", "--kafka-config", f.path()});
  EXPECT_EQ(cl.run.sinks.kafka.properties, (Props{{"security.protocol", "SASL_SSL"},
                                                  {"sasl.mechanism", "PLAIN"},
                                                  {"sasl.username", "relay"},
                                                  {"sasl.password", "p=ss#word"},
                                                  {"ssl.ca.location", "/etc/ssl/ca.pem"}}));
}

TEST(KafkaConfig, DashXOverridesTheFileWhereverItStands) {
  TempFile f("linger.ms=50\nclient.id=from-file\n");
  for (auto args : {std::vector<std::string>{"-X", "linger.ms=1", "--kafka-config", f.path()},
                    std::vector<std::string>{"--kafka-config", f.path(), "-X", "linger.ms=1"}}) {
    args.insert(args.begin(), {"--pg", "x", "--brokers", "k:1"});
    // librdkafka applies them in order: the last value of a property counts.
    EXPECT_EQ(parse_command_line(args).run.sinks.kafka.properties,
              (Props{{"linger.ms", "50"}, {"client.id", "from-file"}, {"linger.ms", "1"}}));
  }
}

TEST(KafkaConfig, ReconcileReadsItToo) {
  TempFile f("security.protocol=SSL\n");
  CommandLine cl =
      parse_command_line({"reconcile", "--pg", "x", "--brokers", "k:1", "--column-time", "t",
                          "--since", "1h", "--kafka-config", f.path(), "-X", "client.id=r"});
  EXPECT_EQ(cl.reconcile.properties, (Props{{"security.protocol", "SSL"}, {"client.id", "r"}}));
}

TEST(KafkaConfig, MissingFileNamesTheFlagAndTheFile) {
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--kafka-config", "/nonexistent/k.conf"}),
            "--kafka-config: cannot read /nonexistent/k.conf: No such file or directory");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--kafka-config", ""}),
            "--kafka-config: must not be empty");
}

TEST(KafkaConfig, BadLineNamesFileAndLineButNotItsText) {
  TempFile f("# comment\nsasl.username=relay\nsasl.password hunter2\n");
  const std::string e = error_of({"--pg", "x", "--brokers", "k:1", "--kafka-config", f.path()});
  EXPECT_EQ(e,
            "--kafka-config: " + f.path() + ":3: expected PROPERTY=VALUE (the line is not shown)");
  EXPECT_EQ(e.find("hunter2"), std::string::npos);

  TempFile g("a=b\n = value\n");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--kafka-config", g.path()}),
            "--kafka-config: " + g.path() + ":2: no property name before '='");
}

TEST(Environment, FlagNamesMapToOutboxRelayVariables) {
  TempFile f("sasl.password=s3cret\n");
  CommandLine cl = parse_command_line({}, env_of({{"OUTBOX_RELAY_PG", "host=db"},
                                                  {"OUTBOX_RELAY_BROKERS", "kafka:9093"},
                                                  {"OUTBOX_RELAY_KAFKA_CONFIG", f.path()},
                                                  {"OUTBOX_RELAY_STATUS_INTERVAL", "2s"},
                                                  {"OUTBOX_RELAY_NO_CREATE", "true"},
                                                  {"OUTBOX_RELAY_ON_ERROR", "dlq"},
                                                  {"OUTBOX_RELAY_REQUIRE_JSON", "0"},
                                                  {"OUTBOX_RELAY_UNRELATED", "ignored"}}));
  EXPECT_EQ(cl.command, Command::kRun);
  EXPECT_EQ(cl.run.relay.conninfo, "host=db");
  EXPECT_EQ(cl.run.sinks.kafka.brokers, "kafka:9093");
  EXPECT_EQ(cl.run.sinks.kafka.properties, (Props{{"sasl.password", "s3cret"}}));
  EXPECT_EQ(cl.run.relay.status_interval, std::chrono::seconds(2));
  EXPECT_FALSE(cl.run.relay.create);
  EXPECT_EQ(cl.run.relay.on_error, relay::OnError::kDlq);
  EXPECT_FALSE(cl.run.relay.mapper.require_json);
}

TEST(Environment, CommandLineWins) {
  TempFile env_file("client.id=env\n");
  TempFile argv_file("client.id=argv\n");
  CommandLine cl = parse_command_line(
      {"--slot", "from_argv", "--brokers", "k:2", "--kafka-config", argv_file.path()},
      env_of({{"OUTBOX_RELAY_PG", "host=db"},
              {"OUTBOX_RELAY_SLOT", "from_env"},
              {"OUTBOX_RELAY_KAFKA_CONFIG", env_file.path()}}));
  EXPECT_EQ(cl.run.relay.slot, "from_argv");
  EXPECT_EQ(cl.run.relay.conninfo, "host=db");
  EXPECT_EQ(cl.run.sinks.kafka.properties, (Props{{"client.id", "argv"}}));
}

TEST(Environment, BadValuesNameTheVariableAndTheFlag) {
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1"},
                     env_of({{"OUTBOX_RELAY_STATUS_INTERVAL", "soon"}})),
            "OUTBOX_RELAY_STATUS_INTERVAL (--status-interval): invalid duration 'soon' (expected "
            "e.g. 500ms, 10s, 1m, 7d, at least 1ms)");
  EXPECT_EQ(
      error_of({"--pg", "x", "--brokers", "k:1"}, env_of({{"OUTBOX_RELAY_NO_CREATE", "maybe"}})),
      "OUTBOX_RELAY_NO_CREATE (--no-create): invalid switch value 'maybe' (expected 1, true, "
      "yes or 0, false, no)");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1"},
                     env_of({{"OUTBOX_RELAY_KAFKA_CONFIG", "/nonexistent/k.conf"}})),
            "OUTBOX_RELAY_KAFKA_CONFIG (--kafka-config): cannot read /nonexistent/k.conf: No such "
            "file or directory");
  // A required flag still names the flag when neither gives it.
  EXPECT_EQ(error_of({"--pg", "x"}, env_of({})), "--brokers: required (HOST:PORT[,...])");
}

TEST(Environment, SomeFlagsAreArgvOnly) {
  // --yes and --repair must be typed; --help and --version and the repeatable -X never come
  // from the environment.
  CommandLine cl = parse_command_line(
      {"drop", "--pg", "x"},
      env_of({{"OUTBOX_RELAY_YES", "1"}, {"OUTBOX_RELAY_HELP", "1"}, {"OUTBOX_RELAY_X", "a=b"}}));
  EXPECT_FALSE(cl.drop.yes);
  EXPECT_FALSE(cl.drop.help);
  cl = parse_command_line(
      {"reconcile", "--pg", "x", "--brokers", "k", "--column-time", "t", "--since", "1h"},
      env_of({{"OUTBOX_RELAY_REPAIR", "1"}}));
  EXPECT_FALSE(cl.reconcile.repair);
  // The other commands read the shared ones (--pg, --slot) too.
  cl = parse_command_line({"status"},
                          env_of({{"OUTBOX_RELAY_PG", "host=db"}, {"OUTBOX_RELAY_SLOT", "s"}}));
  EXPECT_EQ(cl.status.conninfo, "host=db");
  EXPECT_EQ(cl.status.slot, "s");
}

// Whoever can write the file, or the variable naming it, must not get to run code in the relay:
// the file must be a regular file (a FIFO would block, a device is no configuration), one that
// others may read is warned about, and the properties that load code or run a command are
// refused wherever they come from unless --unsafe-kafka-config is typed.
TEST(KafkaConfig, OnlyARegularFile) {
  TempFile f("linger.ms=5\n");
  const std::string fifo = f.path() + ".fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--kafka-config", fifo}),
            "--kafka-config: " + fifo + " is not a regular file")
      << "refused at once, without waiting for a writer";
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--kafka-config", "/dev/null"}),
            "--kafka-config: /dev/null is not a regular file");
  const std::string dir = fs::path(f.path()).parent_path().string();
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--kafka-config", dir}),
            "--kafka-config: " + dir + " is not a regular file");
  // A symbolic link to a regular file is read (Kubernetes mounts secrets through links).
  const std::string link = f.path() + ".link";
  fs::create_symlink(f.path(), link);
  CommandLine cl = parse_command_line({"--pg", "x", "--brokers", "k:1", "--kafka-config", link});
  EXPECT_EQ(cl.run.kafka_config, (Props{{"linger.ms", "5"}}));
}

TEST(KafkaConfig, WarnsWhenOthersMayReadTheFile) {
  TempFile f("sasl.password=secret\n");
  fs::permissions(f.path(), fs::perms::owner_read | fs::perms::owner_write);
  CommandLine cl =
      parse_command_line({"--pg", "x", "--brokers", "k:1", "--kafka-config", f.path()});
  EXPECT_TRUE(cl.run.warnings.empty());
  // Its group is the relay's own primary group here (as a Kubernetes fsGroup makes it): fine.
  fs::permissions(f.path(), fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  cl = parse_command_line({"--pg", "x", "--brokers", "k:1", "--kafka-config", f.path()});
  EXPECT_TRUE(cl.run.warnings.empty());
  fs::permissions(f.path(),
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read);
  cl = parse_command_line({"--pg", "x", "--brokers", "k:1", "--kafka-config", f.path()});
  ASSERT_EQ(cl.run.warnings.size(), 1u);
  EXPECT_NE(cl.run.warnings[0].find("may be read by its group or by others"), std::string::npos)
      << cl.run.warnings[0];
  EXPECT_EQ(cl.run.warnings[0].find("secret="), std::string::npos);
}

TEST(KafkaConfig, PropertiesThatRunCodeNeedTheOptIn) {
  const std::string refused =
      "-X, --kafka-config: property plugin.library.paths loads shared libraries into the relay: "
      "refused unless --unsafe-kafka-config is given";
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "-X", "plugin.library.paths=/tmp/x.so"}),
            refused);
  TempFile f("plugin.library.paths=/tmp/x.so\n");
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--kafka-config", f.path()}), refused);
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1"},
                     env_of({{"OUTBOX_RELAY_KAFKA_CONFIG", f.path()}})),
            refused);
  for (const char* p : {"sasl.kerberos.kinit.cmd=touch /tmp/owned", "ssl.engine.location=/x.so",
                        "ssl.providers=legacy"}) {
    const std::string e = error_of({"--pg", "x", "--brokers", "k:1", "-X", p});
    EXPECT_NE(e.find("refused unless --unsafe-kafka-config"), std::string::npos) << e;
  }
  // The default kinit command hands these to /bin/sh.
  const std::string e = error_of(
      {"--pg", "x", "--brokers", "k:1", "-X", "sasl.kerberos.principal=relay;touch /tmp/owned"});
  EXPECT_NE(e.find("shell metacharacters"), std::string::npos) << e;
  EXPECT_EQ(e.find("touch"), std::string::npos) << "the value is not shown: " << e;
  CommandLine cl = parse_command_line(
      {"--pg", "x", "--brokers", "k:1", "-X", "sasl.kerberos.principal=relay/host@EXAMPLE.COM"});
  EXPECT_EQ(cl.run.sinks.kafka.properties.size(), 1u);
  // Typed on purpose: accepted, and never from the environment.
  cl = parse_command_line(
      {"--pg", "x", "--brokers", "k:1", "--unsafe-kafka-config", "--kafka-config", f.path()});
  EXPECT_EQ(cl.run.sinks.kafka.properties, (Props{{"plugin.library.paths", "/tmp/x.so"}}));
  EXPECT_EQ(error_of({"--pg", "x", "--brokers", "k:1", "--kafka-config", f.path()},
                     env_of({{"OUTBOX_RELAY_UNSAFE_KAFKA_CONFIG", "1"}})),
            refused);
  EXPECT_EQ(error_of({"reconcile", "--pg", "x", "--brokers", "k", "--column-time", "t", "--since",
                      "1h", "-X", "plugin.library.paths=/tmp/x.so"}),
            refused);
}

// -X sasl.password:hunter2 (a colon for '=') must not land in the journal.
TEST(KafkaConfig, AMalformedPropertyIsNeverEchoed) {
  for (const char* bad : {"sasl.password:hunter2", "sasl.password:hunter2=x", "=hunter2",
                          "Sasl.Password hunter2=x"}) {
    const std::string e = error_of({"--pg", "x", "--brokers", "k:1", "-X", bad});
    EXPECT_EQ(e.rfind("-X: expected PROPERTY=VALUE", 0), 0u) << e;
    EXPECT_EQ(e.find("hunter2"), std::string::npos) << e;
  }
  TempFile f("sasl.password:hunter2=x\n");
  const std::string e = error_of({"--pg", "x", "--brokers", "k:1", "--kafka-config", f.path()});
  EXPECT_EQ(e, "--kafka-config: " + f.path() +
                   ":1: not a librdkafka property name before '=' (the line is not shown)");
}

}  // namespace
}  // namespace outbox::app
