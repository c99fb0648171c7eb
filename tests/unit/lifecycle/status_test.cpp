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

// The relay's progress record beside the slot (status --brokers/--nats): shown; unhealthy when the
// slot is confirmed past it or missing while it holds a position (the slot made anew or moved:
// events may be missing), or when it cannot be read; no record (a first start) is healthy.
TEST(Status, TheSlotAgainstTheProgressRecord) {
  ProgressView behind{"topic cp", {}};
  behind.record.key = "7/outbox_relay";
  behind.record.lsn = pgoutput::Lsn::parse("0/3000148");
  behind.record.timeline = 1;
  EXPECT_TRUE(assess_slot(healthy_slot(), 1 << 30, nullptr, nullptr, &behind).healthy);
  const std::string text =
      format_status_text("outbox_relay", healthy_slot(), 1 << 30, nullptr, nullptr, &behind);
  EXPECT_NE(text.find("progress_record       0/3000148 timeline 1 (topic cp, key 7/outbox_relay)"),
            std::string::npos)
      << text;
  const std::string json =
      format_status_json("outbox_relay", healthy_slot(), 1 << 30, nullptr, nullptr, &behind);
  EXPECT_NE(json.find("\"progress_record\":{\"where\":\"topic cp\",\"key\":\"7/outbox_relay\","
                      "\"lsn\":\"0/3000148\",\"timeline\":1,\"error\":null,\"bad_value\":null}"),
            std::string::npos)
      << json;

  ProgressView ahead = behind;
  ahead.record.lsn = pgoutput::Lsn::parse("0/3000100");
  const SlotHealth h = assess_slot(healthy_slot(), 1 << 30, nullptr, nullptr, &ahead);
  ASSERT_EQ(h.problems.size(), 1u);
  EXPECT_EQ(h.problems[0].rfind("slot confirmed through 0/3000148, past the relay's progress "
                                "record (topic cp, key 7/outbox_relay) at 0/3000100 (made anew "
                                "or moved by another client): the events committed after it may "
                                "never have been delivered",
                                0),
            0u)
      << h.problems[0];

  const SlotHealth missing = assess_slot(std::nullopt, 1 << 30, nullptr, nullptr, &behind);
  ASSERT_EQ(missing.problems.size(), 2u);
  EXPECT_EQ(missing.problems[1].rfind("slot missing, and the relay's progress record (topic cp, "
                                      "key 7/outbox_relay) shows it delivered through 0/3000148",
                                      0),
            0u)
      << missing.problems[1];

  ProgressView none{"topic cp", {}};
  none.record.key = "7/outbox_relay";
  EXPECT_TRUE(assess_slot(healthy_slot(), 1 << 30, nullptr, nullptr, &none).healthy);
  EXPECT_NE(format_status_text("outbox_relay", healthy_slot(), 1 << 30, nullptr, nullptr, &none)
                .find("progress_record       none (topic cp, key 7/outbox_relay)"),
            std::string::npos);
  ProgressView unreadable = none;
  unreadable.record.error = "Kafka away";
  EXPECT_EQ(assess_slot(healthy_slot(), 1 << 30, nullptr, nullptr, &unreadable).problems,
            std::vector<std::string>{
                "cannot read the relay's progress record (topic cp, key 7/outbox_relay): Kafka "
                "away"});
}

TEST(Status, HumanBytes) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(1023), "1023 B");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(human_bytes(1ULL << 30), "1.0 GiB");
}

}  // namespace
}  // namespace outbox::lifecycle
