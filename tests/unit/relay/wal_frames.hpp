// pgoutput frames as the walsender sends them (XLogData 'w' around a pgoutput message, and the
// primary keepalive 'k'), for the Pipeline's unit tests. Each test file keeps its own relation
// and rows; the bytes are built here once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbox::relay::wal {

struct Frame {
  std::vector<std::byte> b;
  void u8(std::uint8_t v) { b.push_back(static_cast<std::byte>(v)); }
  void be(std::uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) u8(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void bytes(std::string_view s) {
    for (char c : s) u8(static_cast<std::uint8_t>(c));
  }
  void cstr(std::string_view s) {
    bytes(s);
    u8(0);
  }
  // A TupleData column in text form; nullopt: 'n' (NULL).
  void column(const std::optional<std::string>& s) {
    if (!s) {
      u8('n');
      return;
    }
    u8('t');
    be(s->size(), 4);
    bytes(*s);
  }
  // XLogData header: 'w', walStart, walEnd, sendTime.
  static Frame xlog(std::uint64_t lsn) {
    Frame f;
    f.u8('w');
    f.be(lsn, 8);
    f.be(lsn, 8);
    f.be(0, 8);
    return f;
  }
};

// A column of a Relation message: name and type OID.
using Column = std::pair<std::string, std::uint32_t>;

inline std::vector<std::byte> relation(std::uint32_t relid, const std::vector<Column>& columns,
                                       std::string_view schema = "public",
                                       std::string_view table = "outbox") {
  Frame f = Frame::xlog(0x100);
  f.u8('R');
  f.be(relid, 4);
  f.cstr(schema);
  f.cstr(table);
  f.u8('d');
  f.be(columns.size(), 2);
  for (const auto& [name, oid] : columns) {
    f.u8(0);
    f.cstr(name);
    f.be(oid, 4);
    f.be(0xffffffffu, 4);
  }
  return f.b;
}

// `commit_time` in PostgreSQL's microseconds since 2000-01-01; xid 42.
inline std::vector<std::byte> begin(std::uint64_t final_lsn, std::uint64_t commit_time = 0) {
  Frame f = Frame::xlog(final_lsn);
  f.u8('B');
  f.be(final_lsn, 8);
  f.be(commit_time, 8);
  f.be(42, 4);
  return f.b;
}

inline std::vector<std::byte> commit(std::uint64_t commit_lsn, std::uint64_t end_lsn,
                                     std::uint64_t commit_time = 0) {
  Frame f = Frame::xlog(commit_lsn);
  f.u8('C');
  f.u8(0);
  f.be(commit_lsn, 8);
  f.be(end_lsn, 8);
  f.be(commit_time, 8);
  return f.b;
}

inline std::vector<std::byte> insert(std::uint32_t relid,
                                     const std::vector<std::optional<std::string>>& values) {
  Frame f = Frame::xlog(0x200);
  f.u8('I');
  f.be(relid, 4);
  f.u8('N');
  f.be(values.size(), 2);
  for (const auto& v : values) f.column(v);
  return f.b;
}

inline std::vector<std::byte> keepalive(std::uint64_t wal_end, bool reply) {
  Frame f;
  f.u8('k');
  f.be(wal_end, 8);
  f.be(0, 8);
  f.u8(reply ? 1 : 0);
  return f.b;
}

// A logical decoding message ('M').
inline std::vector<std::byte> message(std::string_view content, bool transactional,
                                      std::string_view prefix, std::uint64_t lsn) {
  Frame f = Frame::xlog(lsn);
  f.u8('M');
  f.u8(transactional ? 1 : 0);
  f.be(lsn, 8);
  f.cstr(prefix);
  f.be(content.size(), 4);
  f.bytes(content);
  return f.b;
}

}  // namespace outbox::relay::wal
