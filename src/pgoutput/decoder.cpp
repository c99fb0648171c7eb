#include "outbox/pgoutput/decoder.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

namespace outbox::pgoutput {
namespace {

// Smallest encodings, used to reject a count before reserving memory for it: a corrupt count must
// not turn into a multi-gigabyte allocation.
constexpr std::size_t kMinColumnSize = 1 + 1 + 4 + 4;  // flags, "" name, type oid, typmod
constexpr std::size_t kMinTupleValueSize = 1;          // kind byte of 'n' or 'u'

std::string describe_byte(std::uint8_t b) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "0x";
  s += kHex[b >> 4];
  s += kHex[b & 0xf];
  if (b >= 0x20 && b < 0x7f) {
    s += " '";
    s += static_cast<char>(b);
    s += '\'';
  }
  return s;
}

// Bounds-checked big-endian reader over one message. Every getter returns false after filling the
// DecodeError; the message name and field name go into the reason so that a bad stream can be
// diagnosed from the log line alone.
class Reader {
 public:
  Reader(std::span<const std::byte> bytes, DecodeError& error) : bytes_(bytes), error_(error) {}

  void set_message(const char* name) { message_ = name; }
  const char* message() const { return message_; }
  std::size_t offset() const { return pos_; }
  std::size_t remaining() const { return bytes_.size() - pos_; }

  bool u8(const char* field, std::uint8_t& v, int column = -1) {
    if (!need(1, field, column)) return false;
    v = std::to_integer<std::uint8_t>(bytes_[pos_++]);
    return true;
  }

  // Byte shifts rather than a cast of the buffer: the input has no alignment guarantee.
  template <class T>
  bool be(const char* field, T& v, int column = -1) {
    static_assert(std::is_integral_v<T> && sizeof(T) >= 2);
    if (!need(sizeof(T), field, column)) return false;
    std::make_unsigned_t<T> u = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      u = static_cast<std::make_unsigned_t<T>>(u << 8) |
          std::to_integer<std::uint8_t>(bytes_[pos_ + i]);
    }
    v = static_cast<T>(u);
    pos_ += sizeof(T);
    return true;
  }

  bool lsn(const char* field, Lsn& v) { return be(field, v.value); }

  bool cstring(const char* field, std::string_view& v, int column = -1) {
    const std::byte* begin = bytes_.data() + pos_;
    const void* nul = remaining() == 0 ? nullptr : std::memchr(begin, 0, remaining());
    if (nul == nullptr) {
      std::string reason =
          std::string("truncated ") + message_ + ": unterminated string for " + field;
      if (column >= 0) reason += " of column " + std::to_string(column);
      return fail(pos_, std::move(reason));
    }
    const auto len = static_cast<std::size_t>(static_cast<const std::byte*>(nul) - begin);
    v = std::string_view(reinterpret_cast<const char*>(begin), len);
    pos_ += len + 1;
    return true;
  }

  bool bytes(const char* field, std::size_t n, std::string_view& v, int column = -1) {
    if (!need(n, field, column)) return false;
    v = std::string_view(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return true;
  }

  bool fail(std::size_t at, std::string reason) {
    error_.offset = at;
    error_.reason = std::move(reason);
    return false;
  }

  // A count that cannot possibly fit in what is left: reported as such instead of as a truncation
  // somewhere later, and before anything is reserved for it.
  bool check_count(std::size_t at, const char* field, std::size_t count, std::size_t min_size) {
    if (count <= remaining() / min_size) return true;
    return fail(at, std::string(message_) + ": " + field + " " + std::to_string(count) +
                        " cannot fit in the " + std::to_string(remaining()) + " bytes left");
  }

 private:
  bool need(std::size_t n, const char* field, int column) {
    if (n <= remaining()) return true;
    std::string reason = std::string("truncated ") + message_ + ": need " + std::to_string(n) +
                         " bytes for " + field;
    if (column >= 0) reason += " of column " + std::to_string(column);
    reason += ", have " + std::to_string(remaining());
    return fail(pos_, std::move(reason));
  }

  std::span<const std::byte> bytes_;
  DecodeError& error_;
  std::size_t pos_ = 0;
  const char* message_ = "message";
};

// Returns out's alternative T, constructing it only when out holds something else. Tuple vectors
// of a replaced Insert/Update/Delete move into the new one, so that a stream of mixed changes keeps
// reusing the same allocations.
template <class T>
T& reuse(Message& out) {
  if (auto* same = std::get_if<T>(&out)) return *same;
  TupleData spare_new;
  TupleData spare_old;
  if (auto* i = std::get_if<Insert>(&out)) {
    spare_new = std::move(i->new_tuple);
  } else if (auto* u = std::get_if<Update>(&out)) {
    spare_new = std::move(u->new_tuple);
    spare_old = std::move(u->old_tuple);
  } else if (auto* d = std::get_if<Delete>(&out)) {
    spare_old = std::move(d->old_tuple);
  }
  // The larger buffer goes where a change always has a tuple (new for Insert/Update, old for
  // Delete).
  if (spare_new.capacity() < spare_old.capacity()) std::swap(spare_new, spare_old);
  T& fresh = out.template emplace<T>();
  if constexpr (std::is_same_v<T, Insert>) {
    fresh.new_tuple = std::move(spare_new);
  } else if constexpr (std::is_same_v<T, Update>) {
    fresh.new_tuple = std::move(spare_new);
    fresh.old_tuple = std::move(spare_old);
  } else if constexpr (std::is_same_v<T, Delete>) {
    fresh.old_tuple = std::move(spare_new);
  }
  return fresh;
}

bool read_tuple(Reader& r, TupleData& tuple) {
  tuple.clear();
  const std::size_t at = r.offset();
  std::uint16_t ncols = 0;
  if (!r.be("column count", ncols)) return false;
  if (!r.check_count(at, "column count", ncols, kMinTupleValueSize)) return false;
  tuple.resize(ncols);
  for (int i = 0; i < ncols; ++i) {
    TupleValue& value = tuple[static_cast<std::size_t>(i)];
    const std::size_t kind_at = r.offset();
    std::uint8_t kind = 0;
    if (!r.u8("value kind", kind, i)) return false;
    switch (kind) {
      case 'n':
      case 'u':
        value.kind = static_cast<ValueKind>(kind);
        value.data = {};
        break;
      case 't':
      case 'b': {
        value.kind = static_cast<ValueKind>(kind);
        std::uint32_t len = 0;
        if (!r.be("value length", len, i) || !r.bytes("value", len, value.data, i)) return false;
        break;
      }
      default:
        return r.fail(kind_at, std::string(r.message()) + ": unknown value kind " +
                                   describe_byte(kind) + " of column " + std::to_string(i));
    }
  }
  return true;
}

// 'K', 'O' or 'N' markers inside Update and Delete.
bool read_marker(Reader& r, const char* field, std::uint8_t& marker, std::string_view allowed) {
  const std::size_t at = r.offset();
  if (!r.u8(field, marker)) return false;
  if (allowed.find(static_cast<char>(marker)) != std::string_view::npos) return true;
  return r.fail(at, std::string(r.message()) + ": unexpected " + field + " " +
                        describe_byte(marker) + ", expected one of '" + std::string(allowed) + "'");
}

bool decode_begin(Reader& r, Message& out) {
  auto& m = reuse<Begin>(out);
  return r.lsn("final_lsn", m.final_lsn) && r.be("commit_time", m.commit_time) &&
         r.be("xid", m.xid);
}

bool decode_commit(Reader& r, Message& out) {
  auto& m = reuse<Commit>(out);
  return r.u8("flags", m.flags) && r.lsn("commit_lsn", m.commit_lsn) &&
         r.lsn("end_lsn", m.end_lsn) && r.be("commit_time", m.commit_time);
}

bool decode_origin(Reader& r, Message& out) {
  auto& m = reuse<Origin>(out);
  return r.lsn("origin_lsn", m.origin_lsn) && r.cstring("name", m.name);
}

bool decode_relation(Reader& r, Message& out) {
  auto& m = reuse<Relation>(out);
  m.columns.clear();
  if (!r.be("relid", m.relid) || !r.cstring("namespace", m.nspname) ||
      !r.cstring("relname", m.relname) || !r.u8("replica_identity", m.replica_identity)) {
    return false;
  }
  const std::size_t at = r.offset();
  std::uint16_t natts = 0;
  if (!r.be("natts", natts) || !r.check_count(at, "natts", natts, kMinColumnSize)) return false;
  m.columns.resize(natts);
  for (int i = 0; i < natts; ++i) {
    Column& c = m.columns[static_cast<std::size_t>(i)];
    if (!r.u8("column flags", c.flags, i) || !r.cstring("column name", c.name, i) ||
        !r.be("column type oid", c.type_oid, i) || !r.be("column typmod", c.type_modifier, i)) {
      return false;
    }
  }
  return true;
}

bool decode_type(Reader& r, Message& out) {
  auto& m = reuse<Type>(out);
  return r.be("oid", m.oid) && r.cstring("namespace", m.nspname) && r.cstring("name", m.name);
}

bool decode_insert(Reader& r, Message& out) {
  auto& m = reuse<Insert>(out);
  m.new_tuple.clear();
  std::uint8_t marker = 0;
  return r.be("relid", m.relid) && read_marker(r, "tuple marker", marker, "N") &&
         read_tuple(r, m.new_tuple);
}

bool decode_update(Reader& r, Message& out) {
  auto& m = reuse<Update>(out);
  m.old_kind = 0;
  m.old_tuple.clear();
  m.new_tuple.clear();
  std::uint8_t marker = 0;
  if (!r.be("relid", m.relid) || !read_marker(r, "tuple marker", marker, "KON")) return false;
  if (marker != 'N') {
    m.old_kind = static_cast<char>(marker);
    if (!read_tuple(r, m.old_tuple) || !read_marker(r, "new tuple marker", marker, "N")) {
      return false;
    }
  }
  return read_tuple(r, m.new_tuple);
}

bool decode_delete(Reader& r, Message& out) {
  auto& m = reuse<Delete>(out);
  m.old_tuple.clear();
  std::uint8_t marker = 0;
  if (!r.be("relid", m.relid) || !read_marker(r, "tuple marker", marker, "KO")) return false;
  m.old_kind = static_cast<char>(marker);
  return read_tuple(r, m.old_tuple);
}

bool decode_truncate(Reader& r, Message& out) {
  auto& m = reuse<Truncate>(out);
  m.relids.clear();
  const std::size_t at = r.offset();
  std::uint32_t nrels = 0;
  if (!r.be("nrels", nrels) || !r.u8("options", m.options)) return false;
  // The options byte sits between the count and the relids, so check against what follows it.
  if (!r.check_count(at, "nrels", nrels, sizeof(std::uint32_t))) return false;
  m.relids.resize(nrels);
  for (auto& relid : m.relids) {
    if (!r.be("relid", relid)) return false;
  }
  return true;
}

bool decode_logical_message(Reader& r, Message& out) {
  auto& m = reuse<LogicalMessage>(out);
  std::uint8_t flags = 0;
  std::uint32_t len = 0;
  if (!r.u8("flags", flags) || !r.lsn("lsn", m.lsn) || !r.cstring("prefix", m.prefix) ||
      !r.be("content length", len) || !r.bytes("content", len, m.content)) {
    return false;
  }
  m.transactional = (flags & 1) != 0;
  return true;
}

bool decode_message(Reader& r, Message& out) {
  std::uint8_t type = 0;
  if (!r.u8("type", type)) return false;
  switch (type) {
    case 'B':
      r.set_message("Begin");
      return decode_begin(r, out);
    case 'C':
      r.set_message("Commit");
      return decode_commit(r, out);
    case 'O':
      r.set_message("Origin");
      return decode_origin(r, out);
    case 'R':
      r.set_message("Relation");
      return decode_relation(r, out);
    case 'Y':
      r.set_message("Type");
      return decode_type(r, out);
    case 'I':
      r.set_message("Insert");
      return decode_insert(r, out);
    case 'U':
      r.set_message("Update");
      return decode_update(r, out);
    case 'D':
      r.set_message("Delete");
      return decode_delete(r, out);
    case 'T':
      r.set_message("Truncate");
      return decode_truncate(r, out);
    case 'M':
      r.set_message("Message");
      return decode_logical_message(r, out);
    default:
      // Includes the streaming and two-phase types of protocol versions 2 and 3: the relay asks
      // for version 1, so seeing them means the stream is not what we negotiated.
      return r.fail(0, "unknown pgoutput message type " + describe_byte(type));
  }
}

}  // namespace

const DecodeError* decode_into(std::span<const std::byte> bytes, Message& out, DecodeError& error) {
  Reader r(bytes, error);
  if (!decode_message(r, out)) return &error;
  if (r.remaining() != 0) {
    r.fail(r.offset(),
           std::to_string(r.remaining()) + " trailing bytes after a complete " + r.message());
    return &error;
  }
  return nullptr;
}

DecodeResult decode(std::span<const std::byte> bytes) {
  Message message;
  DecodeError error;
  if (decode_into(bytes, message, error) != nullptr) return error;
  return message;
}

}  // namespace outbox::pgoutput
