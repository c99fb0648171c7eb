// Log lines against hostile names and values (issues 21 and 25), with the real PostgreSQL and
// Kafka: a table named with a newline and a quote in the relay's publication, and an outbox row
// whose aggregate type holds a newline and a JSON object. The relay logs both (the skipped insert
// of the table; the poison row, which stops it under --on-error fail), and its log stays one line
// per event, in text and in JSON, every JSON line parsing with no field the values added.
// Invalid UTF-8 reaches the relay only from a database that does not check encodings: the test's
// objects live in a SQL_ASCII database of their own, where the aggregate type and a column placed
// as a header end with the bytes FF FE.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

// The hostile names, as the relay meets them (not as SQL writes them); the table's name ends
// with the test's suffix.
const std::string kEvilTable = "outbox\n evil=\"1_";
const std::string kEvilType = "\"\n{\"level\":\"error\"}";
// What the log shows of the bytes FF FE: two U+FFFD.
const std::string kTwoReplacements = "\xEF\xBF\xBD\xEF\xBF\xBD";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

class LogLinesIntegration : public E2eTest {
 protected:
  LogLinesIntegration() : E2eTest({"loglines", {"Order"}, OUTBOX_TEST_LOG_DIR}) {}

  // Everything of the test in a SQL_ASCII database made for it (libpq takes the last dbname).
  void SetUp() override {
    E2eTest::SetUp();
    if (HasFatalFailure()) return;
    admin_conninfo_ = conninfo_;
    database_ = "loglines_" + suffix_;
    pg_->exec("CREATE DATABASE " + database_ +
              " ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
    conninfo_ += " dbname=" + database_;
    ASSERT_NO_THROW(pg_ = std::make_unique<PgClient>(conninfo_));
  }
  void TearDown() override {
    E2eTest::TearDown();  // relays, slot, publication and tables
    if (database_.empty()) return;
    pg_.reset();
    try {
      PgClient(admin_conninfo_).exec("DROP DATABASE IF EXISTS " + database_ + " WITH (FORCE)");
    } catch (const std::exception& e) {
      ADD_FAILURE() << "cleanup: " << e.what();
    }
  }

  // SQL's quoted identifier of kEvilTable: "outbox<newline> evil=""1_<suffix>".
  std::string evil_identifier() const { return "public.\"outbox\n evil=\"\"1_" + suffix_ + "\""; }

  // The outbox, the hostile table beside it in the relay's publication, and a relay in `format`
  // that meets an insert into the hostile table (skipped and logged) and then the hostile row
  // (poison: exit 3 under --on-error fail). Returns the relay's log.
  std::string run_relay_over_hostile_values(const std::string& format) {
    create_outbox_table(", note text");
    pg_->exec("CREATE TABLE " + evil_identifier() + " (id int PRIMARY KEY)");
    extra_tables_.push_back(evil_identifier());
    pg_->exec("CREATE PUBLICATION " + publication_ + " FOR TABLE " + qualified_table() + ", " +
              evil_identifier());
    RelayProcess& relay =
        start_relay({"--log-format", format, "--on-error", "fail", "--metrics-addr", "off",
                     "--additional-placement", "note:header"});
    EXPECT_NO_FATAL_FAILURE(wait_until_streaming(relay));
    pg_->exec("INSERT INTO " + evil_identifier() + " VALUES (1)");
    // E'' so that \n is a newline and \xff a byte; an event with the bytes in a header first.
    pg_->exec("INSERT INTO " + qualified_table() +
              " (aggregatetype, aggregateid, type, payload, note) VALUES ('" + aggregatetypes_[0] +
              "', 'o-1', 'T', '{}', E'note\\xff\\xfe')");
    pg_->exec("INSERT INTO " + qualified_table() +
              " (aggregatetype, aggregateid, type, payload, note) VALUES "
              "(E'\"\\n{\"level\":\"error\"}\\xff\\xfe', 'o-2', 'T', '{}', E'\\xff')");
    const std::optional<int> code = relay.wait_exit(60s);
    EXPECT_TRUE(code) << "the relay did not stop at the poison row";
    if (code) EXPECT_EQ(*code, 3);
    return read_file(relay.log_path());
  }

  std::string admin_conninfo_;
  std::string database_;
};

TEST_F(LogLinesIntegration, TextLogStaysOneLinePerEventWithHostileNames) {
  const std::string log = run_relay_over_hostile_values("text");
  int skipping = 0;
  int fatal = 0;
  for (const std::string& line : lines_of(log)) {
    if (line.empty()) continue;
    // Every line is one of the relay's: "<time> <level> <logger> ...", none forged.
    EXPECT_TRUE(line.size() > 20 && line[4] == '-' && line[10] == 'T')
        << "not a log line: " << line;
    EXPECT_EQ(line.find("evil=\"1"), std::string::npos) << line;
    if (line.find("event=skipping") != std::string::npos &&
        line.find("table=\"public.outbox\\n evil=\\\"1_" + suffix_ + "\"") != std::string::npos) {
      ++skipping;
    }
    if (line.find("event=fatal") != std::string::npos) {
      ++fatal;
      EXPECT_NE(line.find("\\\"\\n{\\\"level\\\":\\\"error\\\"}" + kTwoReplacements),
                std::string::npos)
          << line;
    }
  }
  EXPECT_EQ(skipping, 1) << log;
  EXPECT_EQ(fatal, 1) << log;
  EXPECT_EQ(log.find('\xff'), std::string::npos) << "invalid UTF-8 in the log";
}

TEST_F(LogLinesIntegration, JsonLogParsesLineByLineWithNoFieldAddedByValues) {
  const std::string log = run_relay_over_hostile_values("json");
  simdjson::dom::parser parser;
  int skipping = 0;
  int fatal = 0;
  for (const std::string& line : lines_of(log)) {
    if (line.empty()) continue;
    simdjson::dom::object o;
    ASSERT_EQ(parser.parse(line).get_object().get(o), simdjson::SUCCESS) << "not JSON: " << line;
    std::string_view level;
    ASSERT_EQ(o["level"].get_string().get(level), simdjson::SUCCESS) << line;
    EXPECT_EQ(o["evil"].error(), simdjson::NO_SUCH_FIELD) << line;
    std::string_view event;
    if (o["event"].get_string().get(event) != simdjson::SUCCESS) continue;
    std::string_view table;
    if (event == "skipping" && o["table"].get_string().get(table) == simdjson::SUCCESS &&
        table == "public." + kEvilTable + suffix_) {
      ++skipping;
    }
    if (event == "fatal") {
      ++fatal;
      EXPECT_EQ(level, "error") << line;
      std::string_view error;
      ASSERT_EQ(o["error"].get_string().get(error), simdjson::SUCCESS) << line;
      EXPECT_NE(error.find(kEvilType + kTwoReplacements), std::string_view::npos) << line;
    }
  }
  EXPECT_EQ(skipping, 1) << log;
  EXPECT_EQ(fatal, 1) << log;
}

}  // namespace
}  // namespace outbox_test
