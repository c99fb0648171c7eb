#include "outbox/pgoutput/wire.hpp"

#include <gtest/gtest.h>

#include <string>

#include "golden.hpp"

namespace outbox::pgoutput {
namespace {

using testing::Bytes;
using testing::from_hex;
using testing::golden;

Bytes concat(const Bytes& a, const Bytes& b) {
  Bytes out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

DecodeError copy_error(const Bytes& frame) {
  auto result = decode_copy_message(frame);
  if (auto* e = std::get_if<DecodeError>(&result)) return *e;
  ADD_FAILURE() << "decoded without error";
  return {};
}

TEST(CopyFrames, XLogDataCarriesOnePgoutputMessage) {
  const auto payload = golden("01_begin");
  const auto frame = concat(from_hex("77"                  // 'w'
                                     "0000000001B3D4A8"    // walStart
                                     "0000000001B3D4A8"    // walEnd
                                     "0002B0EC8517D580"),  // sendTime
                            payload);
  auto result = decode_copy_message(frame);
  ASSERT_TRUE(std::holds_alternative<CopyMessage>(result)) << std::get<DecodeError>(result).reason;
  const auto& x = std::get<XLogData>(std::get<CopyMessage>(result));
  EXPECT_EQ(x.wal_start.to_string(), "0/1B3D4A8");
  EXPECT_EQ(x.wal_end, x.wal_start);
  EXPECT_EQ(x.send_time, from_unix_micros(1'704'164'645'123'456LL));
  // A view into the frame, not a copy.
  EXPECT_EQ(x.payload.data(), frame.data() + 25);
  EXPECT_EQ(x.payload.size(), payload.size());
  auto inner = decode(x.payload);
  ASSERT_TRUE(std::holds_alternative<Message>(inner));
  EXPECT_TRUE(std::holds_alternative<Begin>(std::get<Message>(inner)));
}

TEST(CopyFrames, XLogDataMayBeEmptyButNotShort) {
  const auto header = from_hex("77" + std::string(48, '0'));
  auto result = decode_copy_message(header);
  ASSERT_TRUE(std::holds_alternative<CopyMessage>(result));
  EXPECT_TRUE(std::get<XLogData>(std::get<CopyMessage>(result)).payload.empty());
  for (std::size_t len = 0; len < header.size(); ++len) {
    const auto error = copy_error(Bytes(header.begin(), header.begin() + len));
    EXPECT_LE(error.offset, len);
    EXPECT_FALSE(error.reason.empty());
  }
}

TEST(CopyFrames, Keepalive) {
  const auto frame = from_hex(
      "6B"                // 'k'
      "00000016B374D848"  // walEnd
      "FFFFFFFFFFFFFFFF"  // sendTime (-1: negative times survive)
      "01");              // reply requested
  auto result = decode_copy_message(frame);
  ASSERT_TRUE(std::holds_alternative<CopyMessage>(result)) << std::get<DecodeError>(result).reason;
  const auto& k = std::get<Keepalive>(std::get<CopyMessage>(result));
  EXPECT_EQ(k.wal_end.to_string(), "16/B374D848");
  EXPECT_EQ(k.send_time, -1);
  EXPECT_TRUE(k.reply_requested);

  auto quiet = frame;
  quiet.back() = std::byte{0};
  auto quiet_result = decode_copy_message(quiet);
  ASSERT_TRUE(std::holds_alternative<CopyMessage>(quiet_result));
  EXPECT_FALSE(std::get<Keepalive>(std::get<CopyMessage>(quiet_result)).reply_requested);

  for (std::size_t len = 0; len < frame.size(); ++len) {
    EXPECT_FALSE(copy_error(Bytes(frame.begin(), frame.begin() + len)).reason.empty());
  }
  auto longer = frame;
  longer.push_back(std::byte{0});
  EXPECT_NE(copy_error(longer).reason.find("keepalive"), std::string::npos);
}

TEST(CopyFrames, UnknownTypeIsAnError) {
  for (const char* hex : {"72", "00", "57", "4B00"}) {
    const auto error = copy_error(from_hex(hex));
    EXPECT_EQ(error.offset, 0u);
    EXPECT_NE(error.reason.find("unknown CopyData message type"), std::string::npos);
  }
}

TEST(StatusUpdate, EncodesExactBytes) {
  const auto bytes = encode_status_update(*Lsn::parse("16/B374D848"), *Lsn::parse("16/B374D800"),
                                          Lsn{}, from_unix_micros(1'704'164'645'123'456LL), true);
  const auto expected = from_hex(
      "72"                // 'r'
      "00000016B374D848"  // write
      "00000016B374D800"  // flush
      "0000000000000000"  // apply
      "0002B0EC8517D580"  // clock
      "01");              // reply requested
  ASSERT_EQ(expected.size(), kStatusUpdateSize);
  EXPECT_EQ(Bytes(bytes.begin(), bytes.end()), expected);

  const auto no_reply = encode_status_update(Lsn{1}, Lsn{2}, Lsn{3}, -2, false);
  EXPECT_EQ(Bytes(no_reply.begin(), no_reply.end()), from_hex("72"
                                                              "0000000000000001"
                                                              "0000000000000002"
                                                              "0000000000000003"
                                                              "FFFFFFFFFFFFFFFE"
                                                              "00"));
}

}  // namespace
}  // namespace outbox::pgoutput
