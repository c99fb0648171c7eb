// --messages on the PostgreSQL side: START_REPLICATION asks for messages, a relay of messages only
// needs a publication without tables (pgoutput needs one), and outbox.emit() is the same
// function whether `setup --messages` installs it or sql/outbox_emit.sql does.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "outbox/pg/admin.hpp"
#include "outbox/pg/bootstrap.hpp"
#include "outbox/pg/publication_check.hpp"

namespace outbox::pg {
namespace {

std::string lit(const std::string& v) { return "'" + v + "'"; }
std::string ident(const std::string& v) { return "\"" + v + "\""; }

TEST(Messages, StartReplicationAsksForMessages) {
  EXPECT_EQ(start_replication_command("s", "p", Lsn{}, lit, ident, /*messages=*/true),
            "START_REPLICATION SLOT \"s\" LOGICAL 0/0 (proto_version '1', "
            "publication_names '\"p\"', messages 'true')");
}

TEST(Messages, MessagesOnlyPublicationHasNoTables) {
  const PublicationTarget target{"pub", "public", ""};
  EXPECT_EQ(create_publication_sql(target, ident), "CREATE PUBLICATION \"pub\"");
  const Row pub = {"pub", "16400", "700", "insert, update", "false", "false", std::nullopt};
  EXPECT_TRUE(assess_publication(target, {pub}).ok()) << "no table to hide anything from";
  const PublicationCheck missing = assess_publication(target, {});
  EXPECT_NE(missing.problem.find("does not exist"), std::string::npos) << missing.problem;
}

TEST(Messages, EmitFunctionIsTheShippedSqlFile) {
  std::ifstream in(std::string(OUTBOX_SOURCE_DIR) + "/sql/outbox_emit.sql");
  ASSERT_TRUE(in) << "sql/outbox_emit.sql";
  std::stringstream text;
  text << in.rdbuf();
  for (const std::string& statement : emit_function_sql("'outbox'")) {
    EXPECT_NE(text.str().find(statement + ";\n"), std::string::npos)
        << "sql/outbox_emit.sql lacks:\n"
        << statement;
  }
}

}  // namespace
}  // namespace outbox::pg
