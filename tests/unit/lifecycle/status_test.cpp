// What `status` reports and when it calls a slot unhealthy (exit code 1): missing, lost, not a
// pgoutput slot, or retaining more WAL than --max-retained.
#include "outbox/lifecycle/status.hpp"

#include <gtest/gtest.h>

namespace outbox::lifecycle {
namespace {

pg::SlotInfo healthy_slot() {
  pg::SlotInfo s;
  s.name = "outbox_relay";
  s.plugin = "pgoutput";
  s.slot_type = "logical";
  s.database = "app";
  s.active = true;
  s.active_pid = 4242;
  s.application_name = "outbox-relay";
  s.client_addr = "10.0.0.7";
  s.replication_state = "streaming";
  s.confirmed_flush_lsn = pgoutput::Lsn::parse("0/3000148");
  s.restart_lsn = pgoutput::Lsn::parse("0/3000110");
  s.current_wal_lsn = *pgoutput::Lsn::parse("0/3000200");
  s.retained_wal_bytes = 0xF0;
  s.confirmed_lag_bytes = 0xB8;
  s.wal_status = "reserved";
  return s;
}

TEST(Status, HealthySlot) {
  auto h = assess_slot(healthy_slot(), 1 << 30);
  EXPECT_TRUE(h.healthy);
  std::string text = format_status_text("outbox_relay", healthy_slot(), 1 << 30);
  EXPECT_NE(text.find("yes (pid 4242, application outbox-relay, client 10.0.0.7, streaming)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("confirmed_flush_lsn   0/3000148"), std::string::npos) << text;
  EXPECT_NE(text.find("health                ok"), std::string::npos) << text;
  std::string json = format_status_json("outbox_relay", healthy_slot(), 1 << 30);
  EXPECT_NE(json.find("\"active\":true,\"active_pid\":4242"), std::string::npos) << json;
  EXPECT_NE(json.find("\"confirmed_flush_lsn\":\"0/3000148\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"retained_wal_bytes\":240"), std::string::npos) << json;
  EXPECT_NE(json.find("\"healthy\":true,\"problems\":[]"), std::string::npos) << json;
}

TEST(Status, UnhealthyWhenMissingLostOrRetainingTooMuch) {
  EXPECT_FALSE(assess_slot(std::nullopt, 1).healthy);
  EXPECT_EQ(format_status_json("gone", std::nullopt, 100),
            "{\"slot\":\"gone\",\"exists\":false,\"max_retained_bytes\":100,\"healthy\":false,"
            "\"problems\":[\"slot does not exist\"]}\n");

  auto lost = healthy_slot();
  lost.wal_status = "lost";
  EXPECT_FALSE(assess_slot(lost, 1 << 30).healthy);

  auto big = healthy_slot();
  big.retained_wal_bytes = 3ULL << 30;
  auto h = assess_slot(big, 1ULL << 30);
  ASSERT_EQ(h.problems.size(), 1u);
  EXPECT_EQ(h.problems[0], "retained WAL 3.0 GiB exceeds --max-retained 1.0 GiB");
  EXPECT_NE(format_status_text("s", big, 1ULL << 30).find("UNHEALTHY: retained WAL 3.0 GiB"),
            std::string::npos);

  auto physical = healthy_slot();
  physical.slot_type = "physical";
  physical.plugin = "";
  EXPECT_FALSE(assess_slot(physical, 1 << 30).healthy);
}

// PostgreSQL 17+: whether the slot is a failover slot; with --standby, whether the standby's copy
// would survive a promotion (synced, persistent, the standby's settings on).
TEST(Status, FailoverSlotAndTheStandbysCopy) {
  pg::SlotInfo primary = healthy_slot();
  primary.failover = true;
  primary.synced = false;
  StandbyCopy standby;
  standby.in_recovery = true;
  standby.sync_replication_slots = "on";
  standby.hot_standby_feedback = "on";
  standby.slot = healthy_slot();
  standby.slot->synced = true;
  standby.slot->temporary = true;
  EXPECT_FALSE(standby.ready());
  std::string text = format_status_text("outbox_relay", primary, 1 << 30, nullptr, &standby);
  EXPECT_NE(text.find("failover              yes\n"), std::string::npos) << text;
  EXPECT_NE(text.find("standby_copy          synced, temporary"), std::string::npos) << text;
  EXPECT_NE(text.find("failover_ready        no"), std::string::npos) << text;
  EXPECT_NE(text.find("UNHEALTHY: standby: its copy is still temporary"), std::string::npos)
      << text;

  standby.slot->temporary = false;
  EXPECT_TRUE(standby.ready());
  EXPECT_TRUE(assess_slot(primary, 1 << 30, nullptr, &standby).healthy);
  std::string json = format_status_json("outbox_relay", primary, 1 << 30, nullptr, &standby);
  EXPECT_NE(json.find("\"failover\":true,\"synced\":false"), std::string::npos) << json;
  EXPECT_NE(json.find("\"standby\":{\"ready\":true"), std::string::npos) << json;

  // Not a failover slot: no standby keeps it.
  primary.failover = false;
  EXPECT_FALSE(assess_slot(primary, 1 << 30, nullptr, &standby).healthy);
  // Before PostgreSQL 17 there is nothing to say.
  primary.failover.reset();
  EXPECT_NE(format_status_text("s", primary, 1 << 30).find("failover              - (PostgreSQL"),
            std::string::npos);
}

TEST(Status, HumanBytes) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(1023), "1023 B");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(human_bytes(1ULL << 30), "1.0 GiB");
}

}  // namespace
}  // namespace outbox::lifecycle
