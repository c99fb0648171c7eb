// The decoder against real server output (tests/data/pgoutput, see its README), then against
// everything a broken or hostile stream can hold.
#include "outbox/pgoutput/decoder.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "golden.hpp"

namespace outbox::pgoutput {
namespace {

using testing::Bytes;
using testing::golden;
using testing::golden_names;

// Built-in type OIDs (pg_type.dat); stable across PostgreSQL versions.
constexpr std::uint32_t kInt4Oid = 23;
constexpr std::uint32_t kTextOid = 25;
constexpr std::uint32_t kTimestamptzOid = 1184;
constexpr std::uint32_t kUuidOid = 2950;
constexpr std::uint32_t kJsonbOid = 3802;

// Views in the result point into `bytes`: callers keep it alive.
template <class T>
T decode_as(const Bytes& bytes) {
  auto result = decode(bytes);
  if (const auto* error = std::get_if<DecodeError>(&result)) {
    ADD_FAILURE() << "decode failed at " << error->offset << ": " << error->reason;
    return T{};
  }
  const auto& message = std::get<Message>(result);
  EXPECT_TRUE(std::holds_alternative<T>(message)) << "variant index " << message.index();
  return std::holds_alternative<T>(message) ? std::get<T>(message) : T{};
}

DecodeError decode_error(const Bytes& bytes) {
  auto result = decode(bytes);
  if (auto* error = std::get_if<DecodeError>(&result)) return *error;
  ADD_FAILURE() << "decoded without error";
  return {};
}

std::string_view text(const TupleValue& v) {
  EXPECT_EQ(v.kind, ValueKind::kText);
  return v.data;
}

void expect_nulls_from(const TupleData& tuple, std::size_t first) {
  for (std::size_t i = first; i < tuple.size(); ++i) {
    EXPECT_EQ(tuple[i].kind, ValueKind::kNull) << "column " << i;
    EXPECT_TRUE(tuple[i].data.empty()) << "column " << i;
  }
}

void expect_column(const Column& c, std::string_view name, std::uint32_t oid, std::uint8_t flags) {
  EXPECT_EQ(c.name, name);
  EXPECT_EQ(c.type_oid, oid) << name;
  EXPECT_EQ(c.flags, flags) << name;
  EXPECT_EQ(c.type_modifier, -1) << name;
}

// ---------------------------------------------------------------------------------------------
// Golden messages, in the order the server sent them.

TEST(GoldenDecode, BeginAndCommitAgreeOnTheCommitRecord) {
  const auto begin_bytes = golden("01_begin");
  const auto commit_bytes = golden("06_commit");
  const auto begin = decode_as<Begin>(begin_bytes);
  const auto commit = decode_as<Commit>(commit_bytes);
  EXPECT_NE(begin.xid, 0u);
  EXPECT_FALSE(begin.final_lsn.is_zero());
  EXPECT_EQ(begin.final_lsn, commit.commit_lsn);
  EXPECT_GT(commit.end_lsn, commit.commit_lsn);
  EXPECT_EQ(begin.commit_time, commit.commit_time);
  EXPECT_EQ(commit.flags, 0);
  // Captured after 2024-01-01; a garbled timestamp would land far from "now".
  EXPECT_GT(to_unix_millis(commit.commit_time), 1'704'067'200'000LL);
}

TEST(GoldenDecode, RelationDescribesTheOutboxTable) {
  const auto bytes = golden("02_relation");
  const auto rel = decode_as<Relation>(bytes);
  EXPECT_NE(rel.relid, 0u);
  EXPECT_EQ(rel.nspname, "public");
  EXPECT_EQ(rel.relname, "outbox");
  EXPECT_EQ(rel.replica_identity, 'd');
  ASSERT_EQ(rel.columns.size(), 6u);
  expect_column(rel.columns[0], "id", kUuidOid, 1);
  expect_column(rel.columns[1], "aggregatetype", kTextOid, 0);
  expect_column(rel.columns[2], "aggregateid", kTextOid, 0);
  expect_column(rel.columns[3], "type", kTextOid, 0);
  expect_column(rel.columns[4], "payload", kJsonbOid, 0);
  expect_column(rel.columns[5], "created_at", kTimestamptzOid, 0);
}

TEST(GoldenDecode, InsertCarriesTextValuesIncludingUnicode) {
  const auto rel_bytes = golden("02_relation");
  const auto bytes = golden("03_insert");
  const auto ins = decode_as<Insert>(bytes);
  EXPECT_EQ(ins.relid, decode_as<Relation>(rel_bytes).relid);
  ASSERT_EQ(ins.new_tuple.size(), 6u);
  EXPECT_EQ(text(ins.new_tuple[0]), "8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e01");
  EXPECT_EQ(text(ins.new_tuple[1]), "order");
  EXPECT_EQ(text(ins.new_tuple[2]), "42");
  EXPECT_EQ(text(ins.new_tuple[3]), "OrderCreated");
  EXPECT_EQ(text(ins.new_tuple[4]),
            "{\"total\": 12.5, \"customer\": \"Zo\u00eb \u2713 \u65e5\u672c\"}");
  EXPECT_EQ(text(ins.new_tuple[5]), "2024-01-02 03:04:05.123456+00");
}

TEST(GoldenDecode, InsertWithNullColumn) {
  const auto bytes = golden("04_insert");
  const auto ins = decode_as<Insert>(bytes);
  ASSERT_EQ(ins.new_tuple.size(), 6u);
  EXPECT_EQ(text(ins.new_tuple[3]), "OrderCancelled");
  EXPECT_EQ(ins.new_tuple[4].kind, ValueKind::kNull);
  EXPECT_TRUE(ins.new_tuple[4].data.empty());
  EXPECT_EQ(text(ins.new_tuple[5]), "2024-01-02 03:04:06+00");
}

TEST(GoldenDecode, TransactionalLogicalMessageInsideItsTransaction) {
  const auto bytes = golden("05_message");
  const auto commit_bytes = golden("06_commit");
  const auto msg = decode_as<LogicalMessage>(bytes);
  EXPECT_TRUE(msg.transactional);
  EXPECT_EQ(msg.prefix, "pfx");
  EXPECT_EQ(msg.content, "hello");
  // The server reports the END of the message's WAL record (decode.c passes endptr); the commit
  // record follows it directly here, so the two positions coincide.
  EXPECT_FALSE(msg.lsn.is_zero());
  EXPECT_LE(msg.lsn, decode_as<Commit>(commit_bytes).commit_lsn);
}

TEST(GoldenDecode, NonTransactionalLogicalMessage) {
  const auto commit_bytes = golden("06_commit");
  const auto bytes = golden("07_message");
  const auto msg = decode_as<LogicalMessage>(bytes);
  EXPECT_FALSE(msg.transactional);
  EXPECT_GT(msg.lsn, decode_as<Commit>(commit_bytes).end_lsn);  // emitted after that commit
  EXPECT_EQ(msg.prefix, "pfx");
  EXPECT_EQ(msg.content, "bye");
}

TEST(GoldenDecode, LongOutOfLineValueArrivesWhole) {
  const auto bytes = golden("09_insert");
  const auto ins = decode_as<Insert>(bytes);
  ASSERT_EQ(ins.new_tuple.size(), 6u);
  const auto long_value = text(ins.new_tuple[2]);  // 125 md5 hex digests
  EXPECT_EQ(long_value.size(), 125u * 32u);
  EXPECT_EQ(long_value.find_first_not_of("0123456789abcdef"), std::string_view::npos);
  EXPECT_EQ(long_value.substr(0, 32), "c4ca4238a0b923820dcc509a6f75849b");  // md5('1')
}

TEST(GoldenDecode, UpdateLeavesAnUnchangedToastValueOut) {
  const auto bytes = golden("10_update");
  const auto upd = decode_as<Update>(bytes);
  EXPECT_EQ(upd.old_kind, 0);
  EXPECT_TRUE(upd.old_tuple.empty());
  ASSERT_EQ(upd.new_tuple.size(), 6u);
  EXPECT_EQ(text(upd.new_tuple[0]), "8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e03");
  EXPECT_EQ(upd.new_tuple[2].kind, ValueKind::kUnchangedToast);
  EXPECT_TRUE(upd.new_tuple[2].data.empty());
  EXPECT_EQ(text(upd.new_tuple[3]), "CustomerMovedAgain");
  EXPECT_EQ(text(upd.new_tuple[4]), "{\"a\": [1, 2, 3]}");
}

TEST(GoldenDecode, UpdateOfTheKeySendsTheOldKey) {
  const auto bytes = golden("11_update");
  const auto upd = decode_as<Update>(bytes);
  EXPECT_EQ(upd.old_kind, 'K');
  ASSERT_EQ(upd.old_tuple.size(), 6u);
  EXPECT_EQ(text(upd.old_tuple[0]), "8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e02");
  expect_nulls_from(upd.old_tuple, 1);
  ASSERT_EQ(upd.new_tuple.size(), 6u);
  EXPECT_EQ(text(upd.new_tuple[0]), "8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e04");
  EXPECT_EQ(upd.new_tuple[4].kind, ValueKind::kNull);
}

TEST(GoldenDecode, DeleteSendsTheOldKey) {
  const auto bytes = golden("12_delete");
  const auto del = decode_as<Delete>(bytes);
  EXPECT_EQ(del.old_kind, 'K');
  ASSERT_EQ(del.old_tuple.size(), 6u);
  EXPECT_EQ(text(del.old_tuple[0]), "8d0c0b8e-4a55-4f6e-9d2c-3f1b2a7c9e01");
  expect_nulls_from(del.old_tuple, 1);
}

TEST(GoldenDecode, EnumColumnSendsTypeBeforeRelation) {
  const auto type_bytes = golden("15_type");
  const auto rel_bytes = golden("16_relation");
  const auto type = decode_as<Type>(type_bytes);
  const auto rel = decode_as<Relation>(rel_bytes);
  EXPECT_EQ(type.nspname, "public");
  EXPECT_EQ(type.name, "mood");
  EXPECT_GE(type.oid, 16384u);  // FirstNormalObjectId: a user-defined type
  EXPECT_EQ(rel.relname, "audit");
  EXPECT_EQ(rel.replica_identity, 'f');
  ASSERT_EQ(rel.columns.size(), 3u);
  // With REPLICA IDENTITY FULL every column is part of the identity.
  expect_column(rel.columns[0], "id", kInt4Oid, 1);
  expect_column(rel.columns[1], "mood", type.oid, 1);
  expect_column(rel.columns[2], "note", kTextOid, 1);
}

TEST(GoldenDecode, ReplicaIdentityFullSendsWholeOldRows) {
  const auto ins_bytes = golden("17_insert");
  const auto upd_bytes = golden("18_update");
  const auto del_bytes = golden("19_delete");
  const auto ins = decode_as<Insert>(ins_bytes);
  const auto upd = decode_as<Update>(upd_bytes);
  const auto del = decode_as<Delete>(del_bytes);

  ASSERT_EQ(ins.new_tuple.size(), 3u);
  EXPECT_EQ(text(ins.new_tuple[1]), "happy");

  EXPECT_EQ(upd.relid, ins.relid);
  EXPECT_EQ(upd.old_kind, 'O');
  ASSERT_EQ(upd.old_tuple.size(), 3u);
  EXPECT_EQ(text(upd.old_tuple[0]), "1");
  EXPECT_EQ(text(upd.old_tuple[1]), "happy");
  EXPECT_EQ(text(upd.old_tuple[2]), "first");
  ASSERT_EQ(upd.new_tuple.size(), 3u);
  EXPECT_EQ(text(upd.new_tuple[1]), "ok");
  EXPECT_EQ(upd.new_tuple[2].kind, ValueKind::kNull);

  EXPECT_EQ(del.old_kind, 'O');
  ASSERT_EQ(del.old_tuple.size(), 3u);
  EXPECT_EQ(text(del.old_tuple[0]), "1");
  EXPECT_EQ(text(del.old_tuple[1]), "ok");
  EXPECT_EQ(del.old_tuple[2].kind, ValueKind::kNull);
}

TEST(GoldenDecode, TruncateListsBothRelations) {
  const auto outbox_bytes = golden("22_relation");
  const auto audit_bytes = golden("24_relation");
  const auto bytes = golden("25_truncate");
  const auto trunc = decode_as<Truncate>(bytes);
  EXPECT_EQ(trunc.options, 2);  // RESTART IDENTITY
  ASSERT_EQ(trunc.relids.size(), 2u);
  EXPECT_EQ(trunc.relids[0], decode_as<Relation>(outbox_bytes).relid);
  EXPECT_EQ(trunc.relids[1], decode_as<Relation>(audit_bytes).relid);
}

TEST(GoldenDecode, OriginFollowsBeginOfAReplayedTransaction) {
  const auto bytes = golden("28_origin");
  const auto origin = decode_as<Origin>(bytes);
  EXPECT_EQ(origin.name, "golden_origin");
  EXPECT_EQ(origin.origin_lsn, Lsn::parse("0/1234ABCD"));
}

TEST(GoldenDecode, BinaryModeValues) {
  const auto bytes = golden("binary_insert");
  const auto ins = decode_as<Insert>(bytes);
  ASSERT_EQ(ins.new_tuple.size(), 6u);
  for (const auto& v : ins.new_tuple) EXPECT_EQ(v.kind, ValueKind::kBinary);
  EXPECT_EQ(
      ins.new_tuple[0].data,
      std::string_view("\x8d\x0c\x0b\x8e\x4a\x55\x4f\x6e\x9d\x2c\x3f\x1b\x2a\x7c\x9e\x01", 16));
  EXPECT_EQ(ins.new_tuple[1].data, "order");
  // jsonb's binary form: version byte 1, then the text.
  EXPECT_EQ(ins.new_tuple[4].data.substr(0, 10), std::string_view("\x01{\"total\":", 10));
  // timestamptz: big-endian microseconds since 2000-01-01.
  const auto ts = ins.new_tuple[5].data;
  ASSERT_EQ(ts.size(), 8u);
  std::uint64_t micros = 0;
  for (char c : ts) micros = (micros << 8) | static_cast<unsigned char>(c);
  EXPECT_EQ(static_cast<PgTimestamp>(micros), from_unix_micros(1'704'164'645'123'456LL));
}

// The whole captured stream, as the relay would see it: transactions bracketed by Begin/Commit
// with matching LSNs, every change preceded by its relation, commits in increasing order.
TEST(GoldenDecode, StreamIsConsistent) {
  std::map<char, int> counts;
  std::set<std::uint32_t> known_relids;
  std::optional<Begin> open;
  Lsn last_end;
  for (const auto& name : golden_names()) {
    if (name.starts_with("binary")) continue;  // from a second, binary-mode decoding
    SCOPED_TRACE(name);
    const auto bytes = golden(name);
    auto result = decode(bytes);
    ASSERT_TRUE(std::holds_alternative<Message>(result)) << std::get<DecodeError>(result).reason;
    const auto& m = std::get<Message>(result);
    counts[static_cast<char>(bytes[0])]++;
    if (const auto* b = std::get_if<Begin>(&m)) {
      EXPECT_FALSE(open.has_value());
      EXPECT_GE(b->final_lsn, last_end);
      open = *b;
    } else if (const auto* c = std::get_if<Commit>(&m)) {
      ASSERT_TRUE(open.has_value());
      EXPECT_EQ(open->final_lsn, c->commit_lsn);
      EXPECT_GT(c->end_lsn, c->commit_lsn);
      last_end = c->end_lsn;
      open.reset();
    } else if (const auto* r = std::get_if<Relation>(&m)) {
      known_relids.insert(r->relid);
    } else if (const auto* i = std::get_if<Insert>(&m)) {
      EXPECT_TRUE(open && known_relids.contains(i->relid));
    } else if (const auto* u = std::get_if<Update>(&m)) {
      EXPECT_TRUE(open && known_relids.contains(u->relid));
    } else if (const auto* d = std::get_if<Delete>(&m)) {
      EXPECT_TRUE(open && known_relids.contains(d->relid));
    } else if (const auto* t = std::get_if<Truncate>(&m)) {
      EXPECT_TRUE(open.has_value());
      for (auto relid : t->relids) EXPECT_TRUE(known_relids.contains(relid));
    } else if (const auto* msg = std::get_if<LogicalMessage>(&m)) {
      EXPECT_EQ(msg->transactional, open.has_value());
    }
  }
  EXPECT_FALSE(open.has_value());
  const std::map<char, int> expected{{'B', 5}, {'C', 5}, {'O', 1}, {'R', 5}, {'Y', 2},
                                     {'I', 5}, {'U', 3}, {'D', 2}, {'T', 1}, {'M', 2}};
  EXPECT_EQ(counts, expected);
}

// ---------------------------------------------------------------------------------------------
// Malformed input: always a DecodeError that says where and what, never a crash.

const char* message_name(std::byte type) {
  switch (static_cast<char>(type)) {
    case 'B':
      return "Begin";
    case 'C':
      return "Commit";
    case 'O':
      return "Origin";
    case 'R':
      return "Relation";
    case 'Y':
      return "Type";
    case 'I':
      return "Insert";
    case 'U':
      return "Update";
    case 'D':
      return "Delete";
    case 'T':
      return "Truncate";
    case 'M':
      return "Message";
  }
  return "?";
}

TEST(DecodeErrors, EveryProperPrefixOfEveryGoldenMessageIsAnError) {
  for (const auto& name : golden_names()) {
    SCOPED_TRACE(name);
    const auto bytes = golden(name);
    for (std::size_t len = 0; len < bytes.size(); ++len) {
      const auto error = decode_error(Bytes(bytes.begin(), bytes.begin() + len));
      EXPECT_LE(error.offset, len) << "prefix " << len;
      if (len > 0) {
        EXPECT_NE(error.reason.find(message_name(bytes[0])), std::string::npos)
            << "prefix " << len << ": " << error.reason;
      }
    }
  }
}

TEST(DecodeErrors, TrailingBytesAfterACompleteMessage) {
  for (const auto& name : golden_names()) {
    SCOPED_TRACE(name);
    auto bytes = golden(name);
    const auto size = bytes.size();
    bytes.push_back(std::byte{0});
    const auto error = decode_error(bytes);
    EXPECT_EQ(error.offset, size);
    EXPECT_NE(error.reason.find("trailing"), std::string::npos) << error.reason;
  }
}

void put_be(Bytes& bytes, std::size_t at, std::uint64_t value, std::size_t width) {
  for (std::size_t i = 0; i < width; ++i) {
    bytes.at(at + i) = static_cast<std::byte>(value >> (8 * (width - 1 - i)));
  }
}

struct HugeLength {
  const char* golden;
  std::size_t offset;  // of the big-endian length/count field
  std::size_t width;
  const char* message;
  const char* field;
};

TEST(DecodeErrors, HugeLengthsAndCountsAreRejected) {
  const HugeLength cases[] = {
      // 'I' relid(1..4) 'N'(5) ncols(6..7) 't'(8) len(9..12)
      {"03_insert", 6, 2, "Insert", "column count"},
      {"03_insert", 9, 4, "Insert", "value of column 0"},
      {"binary_insert", 9, 4, "Insert", "value of column 0"},
      // 'R' relid(1..4) "public\0"(5..11) "outbox\0"(12..18) replident(19) natts(20..21)
      {"02_relation", 20, 2, "Relation", "natts"},
      // 'T' nrels(1..4) options(5) relids
      {"25_truncate", 1, 4, "Truncate", "nrels"},
      // 'M' flags(1) lsn(2..9) "pfx\0"(10..13) length(14..17)
      {"05_message", 14, 4, "Message", "content"},
      // 'U' relid(1..4) 'K'(5) ncols(6..7)
      {"11_update", 6, 2, "Update", "column count"},
  };
  for (const auto& c : cases) {
    for (std::uint64_t value : {0xffffffffULL, 0x80000000ULL, 0xffffULL, 0x7fffULL}) {
      if (c.width == 2 && value > 0xffff) continue;
      SCOPED_TRACE(std::string(c.golden) + " field at " + std::to_string(c.offset) + " = " +
                   std::to_string(value));
      auto bytes = golden(c.golden);
      put_be(bytes, c.offset, value, c.width);
      const auto error = decode_error(bytes);
      EXPECT_NE(error.reason.find(c.message), std::string::npos) << error.reason;
      EXPECT_NE(error.reason.find(c.field), std::string::npos) << error.reason;
      EXPECT_LE(error.offset, bytes.size());
    }
  }
}

TEST(DecodeErrors, UnknownTypeByte) {
  EXPECT_NE(decode_error({}).reason.find("type"), std::string::npos);
  // 'S' and 'E' are streaming messages of protocol 2; version 1 never sends them.
  for (char type : {'A', 'S', 'E', 'c', 'b', 'P', 'K', 'w', '\0', '\xff'}) {
    const auto error = decode_error({static_cast<std::byte>(type), std::byte{0}});
    EXPECT_EQ(error.offset, 0u);
    EXPECT_NE(error.reason.find("unknown pgoutput message type"), std::string::npos)
        << error.reason;
  }
}

TEST(DecodeErrors, UnknownValueKindNamesTheColumn) {
  auto bytes = golden("03_insert");
  bytes[8] = std::byte{'x'};  // kind of column 0
  const auto error = decode_error(bytes);
  EXPECT_EQ(error.offset, 8u);
  EXPECT_NE(error.reason.find("Insert: unknown value kind 0x78 'x' of column 0"), std::string::npos)
      << error.reason;
}

TEST(DecodeErrors, UnexpectedTupleMarkers) {
  auto insert = golden("03_insert");
  insert[5] = std::byte{'K'};  // an Insert has only a new tuple
  EXPECT_NE(decode_error(insert).reason.find("Insert: unexpected tuple marker"), std::string::npos);

  auto update = golden("10_update");
  update[5] = std::byte{'X'};
  EXPECT_EQ(decode_error(update).offset, 5u);

  auto del = golden("12_delete");
  del[5] = std::byte{'N'};  // a Delete always names the old row
  EXPECT_NE(decode_error(del).reason.find("Delete"), std::string::npos);
}

TEST(DecodeErrors, UnterminatedString) {
  auto bytes = golden("15_type");
  bytes.back() = std::byte{'x'};  // the NUL ending the type name
  const auto error = decode_error(bytes);
  EXPECT_NE(error.reason.find("Type: unterminated string for name"), std::string::npos)
      << error.reason;
}

// Not a proof, but under the sanitizer build every one of these must stay in bounds.
TEST(DecodeErrors, SingleByteCorruptionNeverCrashes) {
  int errors = 0;
  for (const auto& name : golden_names()) {
    const auto original = golden(name);
    if (original.size() > 1024) continue;
    for (std::size_t i = 0; i < original.size(); ++i) {
      for (std::uint8_t value : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
        auto bytes = original;
        bytes[i] = static_cast<std::byte>(value);
        errors += std::holds_alternative<DecodeError>(decode(bytes)) ? 1 : 0;
      }
    }
  }
  EXPECT_GT(errors, 0);
}

// ---------------------------------------------------------------------------------------------
// decode_into: the hot path keeps its vectors.

TEST(DecodeInto, ReusesTupleStorageOfTheSameMessageType) {
  const auto first = golden("03_insert");
  const auto second = golden("04_insert");
  Message m;
  DecodeError error;
  ASSERT_EQ(decode_into(first, m, error), nullptr);
  const auto* storage = std::get<Insert>(m).new_tuple.data();
  ASSERT_EQ(decode_into(second, m, error), nullptr);
  const auto& ins = std::get<Insert>(m);
  EXPECT_EQ(ins.new_tuple.data(), storage);
  ASSERT_EQ(ins.new_tuple.size(), 6u);
  EXPECT_EQ(ins.new_tuple[2].data, "43");
  EXPECT_EQ(ins.new_tuple[4].kind, ValueKind::kNull);
}

TEST(DecodeInto, KeepsTupleStorageAcrossChangeKinds) {
  const auto insert = golden("03_insert");
  const auto del = golden("12_delete");
  const auto update = golden("10_update");
  Message m;
  DecodeError error;
  ASSERT_EQ(decode_into(insert, m, error), nullptr);
  const auto* storage = std::get<Insert>(m).new_tuple.data();
  ASSERT_EQ(decode_into(del, m, error), nullptr);
  EXPECT_EQ(std::get<Delete>(m).old_tuple.data(), storage);
  ASSERT_EQ(decode_into(update, m, error), nullptr);
  EXPECT_EQ(std::get<Update>(m).new_tuple.data(), storage);
  EXPECT_EQ(std::get<Update>(m).new_tuple[3].data, "CustomerMovedAgain");
}

TEST(DecodeInto, ResetsFieldsLeftFromThePreviousMessage) {
  const auto with_old = golden("11_update");
  const auto without_old = golden("10_update");
  Message m;
  DecodeError error;
  ASSERT_EQ(decode_into(with_old, m, error), nullptr);
  ASSERT_EQ(std::get<Update>(m).old_kind, 'K');
  ASSERT_EQ(decode_into(without_old, m, error), nullptr);
  EXPECT_EQ(std::get<Update>(m).old_kind, 0);
  EXPECT_TRUE(std::get<Update>(m).old_tuple.empty());
}

TEST(DecodeInto, AgreesWithDecodeOnEveryGoldenMessage) {
  Message m;
  DecodeError error;
  for (const auto& name : golden_names()) {
    SCOPED_TRACE(name);
    const auto bytes = golden(name);
    auto fresh = decode(bytes);
    ASSERT_TRUE(std::holds_alternative<Message>(fresh));
    ASSERT_EQ(decode_into(bytes, m, error), nullptr) << error.reason;
    EXPECT_EQ(m.index(), std::get<Message>(fresh).index());
  }
}

TEST(DecodeInto, ReportsErrorsThroughTheOutParameter) {
  auto bytes = golden("06_commit");
  bytes.pop_back();
  Message m;
  DecodeError error;
  EXPECT_EQ(decode_into(bytes, m, error), &error);
  EXPECT_EQ(error.offset, 18u);  // 'C' flags commit_lsn end_lsn, then commit_time
  EXPECT_EQ(error.reason, "truncated Commit: need 8 bytes for commit_time, have 7");
}

}  // namespace
}  // namespace outbox::pgoutput
