// The publication and slot the relay streams from, as the relay and the setup command find,
// create or refuse them: statements in order, driven with the rows a server would return.

#include "outbox/pg/bootstrap.hpp"

#include <gtest/gtest.h>

#include <string>

namespace outbox::pg {
namespace {

using Step = SlotBootstrap::Step;

const PublicationTarget kTarget{"outbox_pub", "public", "outbox"};

std::string lit(const std::string& v) { return "'" + v + "'"; }
std::string ident(const std::string& v) { return "\"" + v + "\""; }

BootstrapOptions options(bool create = true, bool slot_was_held = false,
                         BootstrapPart part = BootstrapPart::kBoth) {
  BootstrapOptions o{kTarget, "outbox_slot"};
  o.create = create;
  o.slot_was_held = slot_was_held;
  o.part = part;
  return o;
}

const Rows kNone{};
const Rows kPublicationRow{{"1"}};
Rows slot_row(std::optional<std::string> plugin = "pgoutput", std::string type = "logical",
              std::optional<std::string> wal_status = "reserved",
              std::optional<std::string> confirmed = "0/16B3748", std::string active = "f") {
  return {{type, std::move(plugin), std::move(wal_status), std::move(confirmed), active}};
}

TEST(SlotBootstrap, CreatesWhatIsMissingInOrder) {
  SlotBootstrap b(options(), SlotCreation::kReplicationCommand);
  EXPECT_EQ(b.step(), Step::kFindPublication);
  EXPECT_EQ(b.sql(lit, ident),
            "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = 'outbox_pub'");
  b.on_rows(kNone);
  ASSERT_EQ(b.step(), Step::kCreatePublication);
  EXPECT_EQ(b.what(), "create publication outbox_pub for table public.outbox");
  EXPECT_EQ(b.sql(lit, ident).rfind("CREATE PUBLICATION \"outbox_pub\" FOR TABLE", 0), 0u)
      << b.sql(lit, ident);
  b.on_rows(kNone);
  ASSERT_EQ(b.step(), Step::kFindSlot);
  EXPECT_NE(b.sql(lit, ident).find("WHERE slot_name = 'outbox_slot'"), std::string::npos);
  b.on_rows(kNone);
  ASSERT_EQ(b.step(), Step::kCreateSlot);
  EXPECT_EQ(b.sql(lit, ident),
            "CREATE_REPLICATION_SLOT \"outbox_slot\" LOGICAL pgoutput NOEXPORT_SNAPSHOT");
  b.on_rows({{"outbox_slot", "0/1A2B3C4", std::nullopt, "pgoutput"}});
  EXPECT_TRUE(b.done());
  const BootstrapResult& r = b.result();
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.created_publication);
  ASSERT_TRUE(r.created_slot);
  EXPECT_EQ(r.created_slot->to_string(), "0/1A2B3C4");
  EXPECT_FALSE(r.slot);
}

TEST(SlotBootstrap, FindsWhatExists) {
  SlotBootstrap b(options(), SlotCreation::kReplicationCommand);
  b.on_rows(kPublicationRow);
  b.on_rows(slot_row(std::string("pgoutput"), "logical", std::string("reserved"),
                     std::string("0/16B3748"), "t"));
  ASSERT_TRUE(b.done());
  const BootstrapResult& r = b.result();
  EXPECT_TRUE(r.ok());
  EXPECT_FALSE(r.created_publication);
  EXPECT_FALSE(r.created_slot);
  ASSERT_TRUE(r.slot);
  EXPECT_TRUE(r.slot->active);
  EXPECT_EQ(r.slot->confirmed_flush_lsn->to_string(), "0/16B3748");
}

TEST(SlotBootstrap, SqlFunctionOnAPlainConnection) {
  SlotBootstrap b(options(true, false, BootstrapPart::kSlot), SlotCreation::kSqlFunction);
  ASSERT_EQ(b.step(), Step::kFindSlot);
  b.on_rows(kNone);
  ASSERT_EQ(b.step(), Step::kCreateSlot);
  EXPECT_EQ(b.sql(lit, ident),
            "SELECT lsn::text FROM pg_catalog.pg_create_logical_replication_slot('outbox_slot', "
            "'pgoutput')");
  EXPECT_EQ(b.what(), "create replication slot outbox_slot");
  b.on_rows({{"0/5000060"}});
  ASSERT_TRUE(b.result().created_slot);
  EXPECT_EQ(b.result().created_slot->to_string(), "0/5000060");
}

// --failover: a missing slot is created as a failover slot, on either kind of connection.
TEST(SlotBootstrap, FailoverSlotOnEitherConnection) {
  BootstrapOptions o = options(true, false, BootstrapPart::kSlot);
  o.failover = true;
  SlotBootstrap sql(o, SlotCreation::kSqlFunction);
  sql.on_rows(kNone);
  ASSERT_EQ(sql.step(), Step::kCreateSlot);
  EXPECT_EQ(sql.sql(lit, ident),
            "SELECT lsn::text FROM pg_catalog.pg_create_logical_replication_slot('outbox_slot', "
            "'pgoutput', false, false, true)");
  SlotBootstrap repl(o, SlotCreation::kReplicationCommand);
  repl.on_rows(kNone);
  ASSERT_EQ(repl.step(), Step::kCreateSlot);
  EXPECT_EQ(repl.sql(lit, ident),
            "CREATE_REPLICATION_SLOT \"outbox_slot\" LOGICAL pgoutput (SNAPSHOT 'nothing', "
            "FAILOVER)");
  repl.on_rows({{"outbox_slot", "0/5000060", std::nullopt, "pgoutput"}});
  EXPECT_EQ(repl.result().created_slot->to_string(), "0/5000060");
}

TEST(SlotBootstrap, PublicationPartLeavesTheSlotAlone) {
  SlotBootstrap b(options(true, false, BootstrapPart::kPublication),
                  SlotCreation::kReplicationCommand);
  b.on_rows(kNone);
  b.on_rows(kNone);  // created
  EXPECT_TRUE(b.done());
  EXPECT_TRUE(b.result().created_publication);
}

TEST(SlotBootstrap, NoCreateRefusesAMissingPublication) {
  SlotBootstrap b(options(/*create=*/false), SlotCreation::kReplicationCommand);
  b.on_rows(kNone);
  EXPECT_TRUE(b.done());
  EXPECT_EQ(b.result().refusal, BootstrapRefusal::kPublicationMissing);
}

TEST(SlotBootstrap, NoCreateRefusesAMissingSlot) {
  SlotBootstrap b(options(/*create=*/false), SlotCreation::kReplicationCommand);
  b.on_rows(kPublicationRow);
  b.on_rows(kNone);
  EXPECT_TRUE(b.done());
  EXPECT_EQ(b.result().refusal, BootstrapRefusal::kSlotMissing);
}

TEST(SlotBootstrap, ASlotHeldBeforeThatIsGoneIsALossNotRecreated) {
  SlotBootstrap b(options(/*create=*/true, /*slot_was_held=*/true),
                  SlotCreation::kReplicationCommand);
  b.on_rows(kPublicationRow);
  b.on_rows(kNone);
  EXPECT_TRUE(b.done()) << "a vanished slot must not be created again";
  EXPECT_EQ(b.result().refusal, BootstrapRefusal::kSlotVanished);
}

TEST(SlotBootstrap, RefusesAnotherPlugin) {
  SlotBootstrap b(options(), SlotCreation::kReplicationCommand);
  b.on_rows(kPublicationRow);
  b.on_rows(slot_row(std::string("test_decoding")));
  EXPECT_EQ(b.result().refusal, BootstrapRefusal::kSlotNotPgoutput);
  ASSERT_TRUE(b.result().slot);
  EXPECT_EQ(b.result().slot->plugin, "test_decoding");
}

TEST(SlotBootstrap, RefusesAPhysicalSlot) {
  SlotBootstrap b(options(true, false, BootstrapPart::kSlot), SlotCreation::kSqlFunction);
  b.on_rows(slot_row(std::nullopt, "physical", std::nullopt, std::nullopt));
  EXPECT_EQ(b.result().refusal, BootstrapRefusal::kSlotNotPgoutput);
  EXPECT_EQ(b.result().slot->slot_type, "physical");
  EXPECT_FALSE(b.result().slot->plugin);
}

TEST(SlotBootstrap, RefusesALostSlot) {
  SlotBootstrap b(options(), SlotCreation::kReplicationCommand);
  b.on_rows(kPublicationRow);
  b.on_rows(slot_row(std::string("pgoutput"), "logical", std::string("lost")));
  EXPECT_EQ(b.result().refusal, BootstrapRefusal::kSlotLost);
  EXPECT_EQ(b.result().slot->confirmed_flush_lsn->to_string(), "0/16B3748");
}

TEST(SlotBootstrap, ASlotCreatedMeanwhileIsCheckedAgain) {
  SlotBootstrap b(options(true, false, BootstrapPart::kSlot), SlotCreation::kReplicationCommand);
  b.on_rows(kNone);
  ASSERT_EQ(b.step(), Step::kCreateSlot);
  EXPECT_TRUE(b.on_error(Error("replication slot \"outbox_slot\" already exists", "42710", false)));
  ASSERT_EQ(b.step(), Step::kFindSlot);
  b.on_rows(slot_row());
  EXPECT_TRUE(b.done());
  EXPECT_TRUE(b.result().ok());
  EXPECT_FALSE(b.result().created_slot);
  EXPECT_TRUE(b.result().slot);
}

TEST(SlotBootstrap, ASlotCreatedMeanwhileAndDroppedIsRefused) {
  SlotBootstrap b(options(true, false, BootstrapPart::kSlot), SlotCreation::kSqlFunction);
  b.on_rows(kNone);
  ASSERT_TRUE(b.on_error(Error("already exists", "42710", false)));
  b.on_rows(kNone);
  EXPECT_TRUE(b.done()) << "no second attempt to create";
  EXPECT_EQ(b.result().refusal, BootstrapRefusal::kSlotDroppedMeanwhile);
}

TEST(SlotBootstrap, OtherErrorsAreTheCallers) {
  SlotBootstrap b(options(), SlotCreation::kReplicationCommand);
  EXPECT_FALSE(b.on_error(Error("permission denied", "42501", false)));
  b.on_rows(kNone);
  // A publication created meanwhile is not taken for granted (as before): the error stands.
  EXPECT_FALSE(b.on_error(Error("publication exists", "42710", false)));
  b.on_rows(kNone);
  b.on_rows(kNone);
  EXPECT_FALSE(b.on_error(Error("all replication slots are in use", "53400", false)));
  EXPECT_FALSE(b.on_error(Error("connection lost", "", true)));
}

TEST(SlotBootstrap, RowsOfAnotherShapeAreAnUnexpectedReply) {
  SlotBootstrap b(options(true, false, BootstrapPart::kSlot), SlotCreation::kReplicationCommand);
  try {
    b.on_rows({{"logical", "pgoutput"}});
    FAIL() << "accepted a slot row of 2 columns";
  } catch (const Error& e) {
    EXPECT_EQ(classify(e), ErrorKind::kUnexpectedReply);
    EXPECT_NE(std::string(e.what()).find("inspect replication slot outbox_slot: expected one row"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("got 1 row of 2 columns"), std::string::npos) << e.what();
  }
  SlotBootstrap c(options(true, false, BootstrapPart::kSlot), SlotCreation::kReplicationCommand);
  c.on_rows(kNone);
  try {
    c.on_rows({{"outbox_slot", "not-an-lsn", std::nullopt, "pgoutput"}});
    FAIL() << "accepted a consistent point that is not an LSN";
  } catch (const Error& e) {
    EXPECT_EQ(classify(e), ErrorKind::kUnexpectedReply);
  }
}

TEST(StartReplication, QuotesSlotAndPublication) {
  EXPECT_EQ(start_replication_command("my slot", "my\"pub", Lsn{}, lit, ident),
            "START_REPLICATION SLOT \"my slot\" LOGICAL 0/0 (proto_version '1', "
            "publication_names '\"my\"pub\"')");
}

TEST(StartReplication, StartsAtTheGivenPosition) {
  EXPECT_EQ(start_replication_command("s", "p", Lsn{0x1A2B3C4D5EULL}, lit, ident),
            "START_REPLICATION SLOT \"s\" LOGICAL 1A/2B3C4D5E (proto_version '1', "
            "publication_names '\"p\"')");
}

}  // namespace
}  // namespace outbox::pg
