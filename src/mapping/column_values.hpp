// Private to src/mapping: a row's columns as pgoutput's text mode gives them. Finding a column in
// a Relation, reading a value that may or must be there (the reasons are the words a MapError
// carries), and the text output of the types the mapper reads: bytea (either bytea_output) and
// the integers of a partition placement. Changes with PostgreSQL's text output, nothing else.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "outbox/pgoutput/messages.hpp"

namespace outbox::mapping {

inline constexpr std::string_view kMissing = "is missing from the table";
inline constexpr std::string_view kNull = "is NULL";
inline constexpr std::string_view kUnchangedToast =
    "is an unchanged TOAST value, which an insert cannot carry (protocol violation)";
inline constexpr std::string_view kBinary =
    "is in binary format, but the relay reads pgoutput in text mode";

// Type OIDs of pg_type (fixed in the catalog of every PostgreSQL version).
inline constexpr std::uint32_t kByteaOid = 17;
inline constexpr std::uint32_t kInt8Oid = 20;
inline constexpr std::uint32_t kInt2Oid = 21;
inline constexpr std::uint32_t kInt4Oid = 23;
inline constexpr std::uint32_t kTimestampOid = 1114;
inline constexpr std::uint32_t kTimestamptzOid = 1184;

// The column's index in the relation, -1 when it has no column of that name.
int column_index(const pgoutput::Relation& relation, std::string_view name);

// A column that may be absent or NULL (both give nullopt). Returns why it is unreadable, or empty.
// Inline, as read_required: they run several times per event.
inline std::string_view read_optional(const pgoutput::TupleData& tuple, int index,
                                      std::optional<std::string_view>& out) {
  out.reset();
  if (index < 0) return {};
  const pgoutput::TupleValue& value = tuple[static_cast<std::size_t>(index)];
  switch (value.kind) {
    case pgoutput::ValueKind::kText:
      out = value.data;
      return {};
    case pgoutput::ValueKind::kNull:
      return {};
    case pgoutput::ValueKind::kUnchangedToast:
      return kUnchangedToast;
    case pgoutput::ValueKind::kBinary:
      return kBinary;
  }
  return kBinary;  // unreachable for a valid ValueKind; the decoder only produces the four above
}

// A column that must hold a text value. Returns the reason it does not, or an empty view.
inline std::string_view read_required(const pgoutput::TupleData& tuple, int index,
                                      std::string_view& out) {
  if (index < 0) return kMissing;
  std::optional<std::string_view> value;
  if (const std::string_view why = read_optional(tuple, index, value); !why.empty()) return why;
  if (!value) return kNull;
  out = *value;
  return {};
}

// bytea's text output, in either bytea_output format, back to its bytes: "\x" then two hex
// digits per byte (hex, the default), or bytes as they are with "\\" for a backslash and "\ooo"
// for the others (escape). `out` is reused: it allocates only when a larger value comes.
// Returns why the text is not bytea output, or an empty view.
std::string_view decode_bytea(std::string_view text, std::string& out);

// Java's String.trim().isEmpty(): nothing but characters up to U+0020.
bool is_blank(std::string_view text);

// An integer column's text as a partition number. Returns why it is not one, or an empty view.
std::string_view parse_partition(std::string_view text, std::int32_t& out);

}  // namespace outbox::mapping
