// How the relay reads a PostgreSQL failure: retry (reconnect with backoff, or wait as a standby)
// or stop with the message. A server that answers outside the protocol is not retried forever.

#include "outbox/pg/error.hpp"

#include <gtest/gtest.h>

#include <string>

namespace outbox::pg {
namespace {

ErrorKind kind_of(const std::string& sqlstate, bool connection_lost = false) {
  return classify(Error("x", sqlstate, connection_lost));
}

TEST(ErrorKind, ConnectionTroubleIsRetried) {
  EXPECT_EQ(kind_of("08006"), ErrorKind::kConnection);  // connection_failure
  EXPECT_EQ(kind_of("08P01"), ErrorKind::kConnection);  // protocol_violation: class 08 as well
  EXPECT_TRUE(retryable(kind_of("08006")));
}

TEST(ErrorKind, LostConnectionWithoutSqlstateIsRetried) {
  EXPECT_EQ(kind_of("", true), ErrorKind::kConnection);
  EXPECT_TRUE(retryable(kind_of("", true)));
}

TEST(ErrorKind, NoSqlstateAndNotAnUnexpectedReplyIsConnectionTrouble) {
  // libpq does not mark the connection bad for every socket error it reports.
  EXPECT_EQ(kind_of("", false), ErrorKind::kConnection);
  EXPECT_TRUE(retryable(kind_of("", false)));
}

TEST(ErrorKind, ALostSessionIsRetriedWhateverTheSqlstate) {
  EXPECT_EQ(kind_of("XX000", true), ErrorKind::kConnection);
  EXPECT_EQ(kind_of("42501", true), ErrorKind::kConnection);
}

TEST(ErrorKind, ServerShutdownAndStartupAreRetried) {
  for (const char* s : {"57P01", "57P02", "57P03"}) {
    EXPECT_EQ(kind_of(s), ErrorKind::kServerShutdown) << s;
    EXPECT_EQ(kind_of(s, true), ErrorKind::kServerShutdown) << s;
    EXPECT_TRUE(retryable(kind_of(s))) << s;
  }
}

TEST(ErrorKind, TooManyConnectionsIsRetried) {
  EXPECT_EQ(kind_of("53300"), ErrorKind::kTooManyConnections);
  EXPECT_TRUE(retryable(ErrorKind::kTooManyConnections));
}

TEST(ErrorKind, SlotInUseIsRetriedAsStandby) {
  EXPECT_EQ(kind_of("55006"), ErrorKind::kSlotInUse);
  EXPECT_TRUE(retryable(ErrorKind::kSlotInUse));
}

TEST(ErrorKind, AlreadyExistsIsNotRetried) {
  EXPECT_EQ(kind_of("42710"), ErrorKind::kAlreadyExists);
  EXPECT_FALSE(retryable(ErrorKind::kAlreadyExists));
}

TEST(ErrorKind, TimeoutsAndCancelsAreCanceled) {
  EXPECT_EQ(kind_of("55P03"), ErrorKind::kCanceled);  // lock_timeout
  EXPECT_EQ(kind_of("57014"), ErrorKind::kCanceled);  // statement_timeout
  EXPECT_FALSE(retryable(ErrorKind::kCanceled));
}

TEST(ErrorKind, MissingRightsArePermission) {
  EXPECT_EQ(kind_of("42501"), ErrorKind::kPermission);  // insufficient_privilege
  EXPECT_EQ(kind_of("28P01"), ErrorKind::kPermission);  // invalid_password
  EXPECT_FALSE(retryable(ErrorKind::kPermission));
}

TEST(ErrorKind, OtherServerErrorsAreFatal) {
  for (const char* s : {"42704", "55000", "53400", "42P01", "XX000", "57P04"}) {
    EXPECT_EQ(kind_of(s), ErrorKind::kOther) << s;
  }
  EXPECT_FALSE(retryable(ErrorKind::kOther));
}

TEST(ErrorKind, UnexpectedReplyIsFatalAndSaysWhatCame) {
  const Error e = Error::unexpected_reply("START_REPLICATION", "CopyBoth (PGRES_COPY_BOTH)",
                                          "PGRES_COMMAND_OK");
  EXPECT_EQ(classify(e), ErrorKind::kUnexpectedReply);
  EXPECT_FALSE(retryable(classify(e)));
  EXPECT_TRUE(e.sqlstate().empty());
  EXPECT_FALSE(e.connection_lost());
  EXPECT_STREQ(e.what(),
               "START_REPLICATION: expected CopyBoth (PGRES_COPY_BOTH), got PGRES_COMMAND_OK");
}

TEST(ErrorKind, ContextKeepsTheClassification) {
  const Error reply = Error::unexpected_reply("FETCH", "rows", "PGRES_COPY_OUT");
  const Error wrapped("scan outbox", reply);
  EXPECT_EQ(classify(wrapped), ErrorKind::kUnexpectedReply);
  EXPECT_STREQ(wrapped.what(), "scan outbox: FETCH: expected rows, got PGRES_COPY_OUT");

  const Error lost("scan outbox", Error("server closed the connection", "", true));
  EXPECT_TRUE(lost.connection_lost());
  EXPECT_EQ(classify(lost), ErrorKind::kConnection);

  const Error busy("drop partition",
                   Error("canceling statement due to lock timeout", "55P03", false));
  EXPECT_EQ(busy.sqlstate(), "55P03");
  EXPECT_EQ(classify(busy), ErrorKind::kCanceled);
}

TEST(ErrorKind, Names) {
  EXPECT_STREQ(to_string(ErrorKind::kUnexpectedReply), "unexpected_reply");
  EXPECT_STREQ(to_string(ErrorKind::kSlotInUse), "slot_in_use");
}

}  // namespace
}  // namespace outbox::pg
