// Typed pgoutput messages (protocol version 1, plus 'M' logical messages).
// Every std::string_view and span refers into the buffer that was decoded: a message is valid only
// while that buffer lives. Copy what must outlive it (the relation cache does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "outbox/pgoutput/lsn.hpp"

namespace outbox::pgoutput {

struct Begin {
  Lsn final_lsn;  // start of the commit record, equals Commit::commit_lsn
  PgTimestamp commit_time = 0;
  std::uint32_t xid = 0;
};

struct Commit {
  std::uint8_t flags = 0;
  Lsn commit_lsn;
  Lsn end_lsn;  // what a consumer confirms once the transaction is handled
  PgTimestamp commit_time = 0;
};

struct Origin {
  Lsn origin_lsn;
  std::string_view name;
};

struct Column {
  std::uint8_t flags = 0;  // 1 = part of the replica identity key
  std::string_view name;
  std::uint32_t type_oid = 0;
  std::int32_t type_modifier = 0;
};

struct Relation {
  std::uint32_t relid = 0;
  std::string_view nspname;  // "" means pg_catalog
  std::string_view relname;
  std::uint8_t replica_identity = 0;
  std::vector<Column> columns;
};

struct Type {
  std::uint32_t oid = 0;
  std::string_view nspname;
  std::string_view name;
};

enum class ValueKind : std::uint8_t {
  kNull = 'n',
  kUnchangedToast = 'u',
  kText = 't',
  kBinary = 'b',
};

struct TupleValue {
  ValueKind kind = ValueKind::kNull;
  std::string_view data;  // bytes for kText/kBinary; empty otherwise
};

using TupleData = std::vector<TupleValue>;

struct Insert {
  std::uint32_t relid = 0;
  TupleData new_tuple;
};

struct Update {
  std::uint32_t relid = 0;
  char old_kind = 0;  // 0 (absent), 'K' (key) or 'O' (old tuple)
  TupleData old_tuple;
  TupleData new_tuple;
};

struct Delete {
  std::uint32_t relid = 0;
  char old_kind = 'K';  // 'K' or 'O'
  TupleData old_tuple;
};

struct Truncate {
  std::uint8_t options = 0;  // 1 = CASCADE, 2 = RESTART IDENTITY
  std::vector<std::uint32_t> relids;
};

struct LogicalMessage {
  bool transactional = false;
  Lsn lsn;
  std::string_view prefix;
  std::string_view content;
};

using Message = std::variant<Begin, Commit, Origin, Relation, Type, Insert, Update, Delete,
                             Truncate, LogicalMessage>;

}  // namespace outbox::pgoutput
