#include "outbox/mapping/mapper.hpp"

#include <simdjson.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace outbox::mapping {

namespace {

using pgoutput::TupleData;
using pgoutput::TupleValue;
using pgoutput::ValueKind;

constexpr std::string_view kMissing = "is missing from the table";
constexpr std::string_view kNull = "is NULL";
constexpr std::string_view kUnchangedToast =
    "is an unchanged TOAST value, which an insert cannot carry (protocol violation)";
constexpr std::string_view kBinary =
    "is in binary format, but the relay reads pgoutput in text mode";

// Type OIDs of pg_type (fixed in the catalog of every PostgreSQL version).
constexpr std::uint32_t kByteaOid = 17;
constexpr std::uint32_t kInt8Oid = 20;
constexpr std::uint32_t kInt2Oid = 21;
constexpr std::uint32_t kInt4Oid = 23;
constexpr std::uint32_t kTimestampOid = 1114;
constexpr std::uint32_t kTimestamptzOid = 1184;

// ce_specversion, ce_id, ce_source, ce_type, ce_time, ce_subject, content-type.
constexpr std::size_t kCloudEventHeaders = 7;

// Kafka's own rule (kafka.common.internals.Topic): 1 to 249 of [a-zA-Z0-9._-], not "." or "..".
constexpr std::size_t kMaxTopicLength = 249;

bool is_topic_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

bool is_valid_topic(std::string_view topic) {
  if (topic.empty() || topic.size() > kMaxTopicLength || topic == "." || topic == "..") {
    return false;
  }
  for (const char c : topic) {
    if (!is_topic_char(c)) return false;
  }
  return true;
}

int column_index(const pgoutput::Relation& relation, std::string_view name) {
  for (std::size_t i = 0; i < relation.columns.size(); ++i) {
    if (relation.columns[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// A column that may be absent or NULL (both give nullopt). Returns why it is unreadable, or empty.
std::string_view read_optional(const TupleData& tuple, int index,
                               std::optional<std::string_view>& out) {
  out.reset();
  if (index < 0) return {};
  const TupleValue& value = tuple[static_cast<std::size_t>(index)];
  switch (value.kind) {
    case ValueKind::kText:
      out = value.data;
      return {};
    case ValueKind::kNull:
      return {};
    case ValueKind::kUnchangedToast:
      return kUnchangedToast;
    case ValueKind::kBinary:
      return kBinary;
  }
  return kBinary;  // unreachable for a valid ValueKind; the decoder only produces the four above
}

// A column that must hold a text value. Returns the reason it does not, or an empty view.
std::string_view read_required(const TupleData& tuple, int index, std::string_view& out) {
  if (index < 0) return kMissing;
  std::optional<std::string_view> value;
  if (const std::string_view why = read_optional(tuple, index, value); !why.empty()) return why;
  if (!value) return kNull;
  out = *value;
  return {};
}

// Value of each byte as a hex digit; -1 for the others.
constexpr std::array<std::int8_t, 256> kHexValue = [] {
  std::array<std::int8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[c] = c >= '0' && c <= '9'   ? static_cast<std::int8_t>(c - '0')
           : c >= 'a' && c <= 'f' ? static_cast<std::int8_t>(c - 'a' + 10)
           : c >= 'A' && c <= 'F' ? static_cast<std::int8_t>(c - 'A' + 10)
                                  : std::int8_t{-1};
  }
  return t;
}();

// bytea's text output, in either bytea_output format, back to its bytes: "\x" then two hex
// digits per byte (hex, the default), or bytes as they are with "\\" for a backslash and "\ooo"
// for the others (escape). `out` is reused: it allocates only when a larger value comes.
// Returns why the text is not bytea output, or an empty view.
std::string_view decode_bytea(std::string_view text, std::string& out) {
  out.clear();
  if (text.size() >= 2 && text[0] == '\\' && text[1] == 'x') {
    if (text.size() % 2 != 0) return "is bytea hex output with an odd number of digits";
    out.resize((text.size() - 2) / 2);
    // No branch per byte: a non-digit makes `bad` negative, checked once at the end.
    const auto* in = reinterpret_cast<const unsigned char*>(text.data()) + 2;
    int bad = 0;
    for (std::size_t o = 0; o < out.size(); ++o, in += 2) {
      const int hi = kHexValue[in[0]];
      const int lo = kHexValue[in[1]];
      bad |= hi | lo;
      out[o] = static_cast<char>((hi << 4) | (lo & 15));
    }
    if (bad < 0) return "is bytea hex output with a character that is not a hex digit";
    return {};
  }
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == '\\') {
      out += '\\';
      ++i;
    } else if (i + 3 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '3' &&
               text[i + 2] >= '0' && text[i + 2] <= '7' && text[i + 3] >= '0' &&
               text[i + 3] <= '7') {
      out += static_cast<char>(((text[i + 1] - '0') << 6) | ((text[i + 2] - '0') << 3) |
                               (text[i + 3] - '0'));
      i += 3;
    } else {
      return "is neither hex nor escape bytea output (a backslash without \\\\ or \\ooo)";
    }
  }
  return {};
}

// Java's String.trim().isEmpty(): nothing but characters up to U+0020.
bool is_blank(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) > ' ') return false;
  }
  return true;
}

// An integer column's text as a partition number. Returns why it is not one, or an empty view.
std::string_view parse_partition(std::string_view text, std::int32_t& out) {
  if (!text.empty() && text[0] == '-') return "is negative, which is no partition";
  if (text.empty()) return "is not an integer";
  std::int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return "is not an integer";
    value = value * 10 + (c - '0');
    if (value > std::numeric_limits<std::int32_t>::max()) {
      return "is larger than the largest partition number (2147483647)";
    }
  }
  out = static_cast<std::int32_t>(value);
  return {};
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

// Reads `n` digits at `pos`. False when they are not there.
bool read_digits(std::string_view text, std::size_t& pos, std::size_t n, std::int64_t& out) {
  if (pos + n > text.size()) return false;
  out = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = text[pos + i];
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  pos += n;
  return true;
}

// A timestamp or timestamptz as PostgreSQL prints it with DateStyle ISO (its default):
// "2026-12-01 05:55:23.123456+00", "+05:30", "-03:30:15"; no offset for timestamp, which is
// taken as UTC (as Debezium does). To microseconds since the epoch; its milliseconds, truncated,
// must be a Kafka timestamp.
std::string_view parse_timestamp(std::string_view text, std::int64_t& out_us) {
  constexpr std::string_view kNotIso =
      "is not a timestamp as PostgreSQL prints it with DateStyle ISO (e.g. 2026-12-01 "
      "05:55:23.123+00)";
  if (text == "infinity" || text == "-infinity") {
    return "is infinite, which a Kafka timestamp cannot carry";
  }
  std::size_t pos = 0;
  std::int64_t year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  // The year has four digits or more.
  std::size_t year_digits = 0;
  while (pos + year_digits < text.size() && text[pos + year_digits] >= '0' &&
         text[pos + year_digits] <= '9') {
    ++year_digits;
  }
  if (year_digits < 4 || year_digits > 7) return kNotIso;
  read_digits(text, pos, year_digits, year);
  const auto expect = [&](char c) {
    if (pos >= text.size() || text[pos] != c) return false;
    ++pos;
    return true;
  };
  if (!expect('-') || !read_digits(text, pos, 2, month) || !expect('-') ||
      !read_digits(text, pos, 2, day) || !expect(' ') || !read_digits(text, pos, 2, hour) ||
      !expect(':') || !read_digits(text, pos, 2, minute) || !expect(':') ||
      !read_digits(text, pos, 2, second)) {
    return kNotIso;
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 24 || minute > 59 || second > 60) {
    return kNotIso;
  }
  std::int64_t micros = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    std::int64_t scale = 100'000;
    std::size_t digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits++ < 6) {
        micros += (text[pos] - '0') * scale;
        scale /= 10;
      }
      ++pos;
    }
    if (digits == 0) return kNotIso;
  }
  std::int64_t offset_seconds = 0;
  if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const bool negative = text[pos] == '-';
    ++pos;
    std::int64_t oh = 0, om = 0, os = 0;
    if (!read_digits(text, pos, 2, oh)) return kNotIso;
    if (expect(':') && !read_digits(text, pos, 2, om)) return kNotIso;
    if (expect(':') && !read_digits(text, pos, 2, os)) return kNotIso;
    offset_seconds = (oh * 3600 + om * 60 + os) * (negative ? -1 : 1);
  }
  if (pos != text.size()) {
    if (text.substr(pos) == " BC") return "is a date BC, which a Kafka timestamp cannot carry";
    return kNotIso;
  }
  const std::int64_t days =
      days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  const std::int64_t seconds = days * 86'400 + hour * 3600 + minute * 60 + second - offset_seconds;
  out_us = seconds * 1'000'000 + micros;
  // librdkafka takes 0 for "now" and the broker refuses negative timestamps.
  if (out_us / 1000 <= 0) {
    return "is not after 1970-01-01 00:00:00 UTC, which a Kafka timestamp needs";
  }
  return {};
}

// Date of a day since 1970-01-01, proleptic Gregorian (H. Hinnant's civil_from_days).
void civil_from_days(std::int64_t z, std::int64_t& y, unsigned& m, unsigned& d) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp < 10 ? mp + 3 : mp - 9;
  y = static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2);
}

// An instant as RFC 3339 in UTC with microseconds, "2026-12-01T05:55:23.123456Z" (27
// characters). Zero when the year is not 0001 to 9999, which RFC 3339 cannot write.
std::size_t format_rfc3339(std::int64_t unix_us, std::array<char, 32>& out) {
  const std::int64_t seconds = unix_us >= 0 ? unix_us / 1'000'000 : (unix_us + 1) / 1'000'000 - 1;
  const std::int64_t micros = unix_us - seconds * 1'000'000;
  const std::int64_t days = seconds >= 0 ? seconds / 86'400 : (seconds + 1) / 86'400 - 1;
  const std::int64_t in_day = seconds - days * 86'400;
  std::int64_t year = 0;
  unsigned month = 0, day = 0;
  civil_from_days(days, year, month, day);
  if (year < 1 || year > 9999) return 0;
  const auto put = [&](std::size_t at, std::int64_t value, int digits) {
    for (int i = digits - 1; i >= 0; --i, value /= 10) {
      out[at + static_cast<std::size_t>(i)] = static_cast<char>('0' + value % 10);
    }
  };
  put(0, year, 4);
  out[4] = '-';
  put(5, month, 2);
  out[7] = '-';
  put(8, day, 2);
  out[10] = 'T';
  put(11, in_day / 3600, 2);
  out[13] = ':';
  put(14, in_day / 60 % 60, 2);
  out[16] = ':';
  put(17, in_day % 60, 2);
  out[19] = '.';
  put(20, micros, 6);
  out[26] = 'Z';
  return 27;
}

bool is_lower_hex(std::string_view text) {
  for (const char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// W3C Trace Context's traceparent: "00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>",
// lower-case hex, neither id all zeros, version ff forbidden; a later version may append
// "-..." after the 55 characters of version 00.
bool is_valid_traceparent(std::string_view text) {
  if (text.size() < 55 || text[2] != '-' || text[35] != '-' || text[52] != '-') return false;
  const std::string_view version = text.substr(0, 2), trace_id = text.substr(3, 32),
                         parent_id = text.substr(36, 16), flags = text.substr(53, 2);
  if (!is_lower_hex(version) || !is_lower_hex(trace_id) || !is_lower_hex(parent_id) ||
      !is_lower_hex(flags) || version == "ff") {
    return false;
  }
  if (trace_id.find_first_not_of('0') == std::string_view::npos ||
      parent_id.find_first_not_of('0') == std::string_view::npos) {
    return false;
  }
  if (version == "00") return text.size() == 55;
  return text.size() == 55 || text[55] == '-';
}

}  // namespace

// Validates whole JSON documents with simdjson's DOM parser. The parser and the padded copy are
// reused, so after the largest payload has been seen no event allocates.
struct Mapper::JsonChecker {
  simdjson::dom::parser parser;
  std::vector<char> padded;

  simdjson::error_code check(std::string_view text) {
    padded.resize(text.size() + simdjson::SIMDJSON_PADDING);
    if (!text.empty()) std::memcpy(padded.data(), text.data(), text.size());
    std::memset(padded.data() + text.size(), 0, simdjson::SIMDJSON_PADDING);
    return parser.parse(padded.data(), text.size(), /*realloc_if_needed=*/false).error();
  }
};

void Mapper::JsonCheckerDeleter::operator()(JsonChecker* checker) const noexcept { delete checker; }

Mapper::Mapper(MapperConfig config) : config_(std::move(config)), topic_(config_.topic_template) {
  topic_values_.resize(topic_.columns().size());
  if (!config_.message_prefix.empty()) {
    message_source_ = "logical messages with prefix '" + config_.message_prefix + "'";
    // A reference names an envelope field by its name or by the table column mapped to it.
    for (const std::string& name : topic_.columns()) {
      if (name == "id" || name == config_.column_id) {
        message_topic_fields_.push_back(EnvelopeField::kId);
      } else if (name == "aggregatetype" || name == config_.column_aggregatetype) {
        message_topic_fields_.push_back(EnvelopeField::kAggregateType);
      } else if (name == "aggregateid" || name == config_.column_aggregateid) {
        message_topic_fields_.push_back(EnvelopeField::kAggregateId);
      } else if (name == "type" || name == config_.column_type) {
        message_topic_fields_.push_back(EnvelopeField::kType);
      } else {
        throw std::invalid_argument("topic template '" + topic_.text() + "' references ${" + name +
                                    "}, which a message envelope does not have (id, "
                                    "aggregatetype, aggregateid, type)");
      }
    }
  }
  if (config_.require_json) json_.reset(new JsonChecker());
  std::size_t headers = 0;
  if (config_.format == Format::kCloudEvents) {
    source_.emplace(config_.ce_source.empty() ? "/outbox/${" + config_.column_aggregatetype + "}"
                                              : config_.ce_source);
    source_values_.resize(source_->columns().size());
    headers += kCloudEventHeaders;
  }
  if (!config_.column_traceparent.empty()) headers += 2;
  for (const Placement& placement : config_.additional_placements) {
    if (placement.kind == Placement::Kind::kHeader) ++headers;
  }
  extra_headers_.resize(headers);
  extras_ =
      headers > 0 || !config_.additional_placements.empty() || !config_.column_timestamp.empty();
}

bool Mapper::is_outbox_name(const pgoutput::Relation& relation) const {
  const std::string_view schema = relation.nspname.empty() ? "pg_catalog" : relation.nspname;
  if (schema == config_.schema && relation.relname == config_.table) return true;
  for (const auto& [s, t] : config_.more_tables) {
    if (schema == s && relation.relname == t) return true;
  }
  return false;
}

bool Mapper::has_outbox_columns(const pgoutput::Relation& relation) const {
  if (column_index(relation, config_.column_id) < 0) return false;
  if (column_index(relation, config_.column_payload) < 0) return false;
  for (const std::string& name : topic_.columns()) {
    if (column_index(relation, name) < 0) return false;
  }
  return true;
}

void Mapper::on_relation(const pgoutput::Relation& relation) {
  on_relation(relation, is_outbox_name(relation));
}

void Mapper::on_relation(const pgoutput::Relation& relation, bool is_outbox) {
  const std::string_view schema = relation.nspname.empty() ? "pg_catalog" : relation.nspname;

  CachedRelation cached;
  cached.qualified_name.reserve(schema.size() + 1 + relation.relname.size());
  cached.qualified_name.append(schema).append(".").append(relation.relname);
  cached.column_count = relation.columns.size();
  cached.is_outbox = is_outbox;
  if (cached.is_outbox) {
    cached.id = column_index(relation, config_.column_id);
    cached.aggregatetype = column_index(relation, config_.column_aggregatetype);
    cached.aggregateid = column_index(relation, config_.column_aggregateid);
    cached.type = column_index(relation, config_.column_type);
    cached.payload = column_index(relation, config_.column_payload);
    for (const std::string& name : topic_.columns()) {
      cached.topic_columns.push_back(column_index(relation, name));
      cached.topic_column_names.push_back(name);
    }
    const auto type_of = [&](int index) {
      return index < 0 ? 0u : relation.columns[static_cast<std::size_t>(index)].type_oid;
    };
    for (const Placement& placement : config_.additional_placements) {
      const int index = column_index(relation, placement.column);
      cached.placement_columns.push_back(index);
      cached.placement_types.push_back(type_of(index));
    }
    if (!config_.column_timestamp.empty()) {
      cached.timestamp = column_index(relation, config_.column_timestamp);
      cached.timestamp_type = type_of(cached.timestamp);
    }
    cached.bytea_payload = type_of(cached.payload) == kByteaOid;
    if (!config_.column_traceparent.empty()) {
      cached.traceparent = column_index(relation, config_.column_traceparent);
    }
    if (!config_.column_tracestate.empty()) {
      cached.tracestate = column_index(relation, config_.column_tracestate);
    }
    if (source_) {
      for (const std::string& name : source_->columns()) {
        cached.source_columns.push_back(column_index(relation, name));
      }
    }
  }
  relations_.insert_or_assign(relation.relid, std::move(cached));
}

std::string_view Mapper::relation_name(std::uint32_t relid) const {
  const auto found = relations_.find(relid);
  return found == relations_.end() ? std::string_view() : found->second.qualified_name;
}

std::pair<std::string_view, std::string> Mapper::map_extras(const CachedRelation& relation,
                                                            const TupleData& tuple, Event& event,
                                                            std::int64_t commit_time_us) {
  std::int64_t time_us = commit_time_us;
  if (!config_.column_timestamp.empty()) {
    if (relation.timestamp < 0) return {config_.column_timestamp, std::string(kMissing)};
    if (relation.timestamp_type != kTimestampOid && relation.timestamp_type != kTimestamptzOid) {
      return {config_.column_timestamp,
              "has type OID " + std::to_string(relation.timestamp_type) +
                  ", but the record timestamp needs a timestamp or timestamptz column"};
    }
    std::optional<std::string_view> value;
    if (const auto reason = read_optional(tuple, relation.timestamp, value); !reason.empty()) {
      return {config_.column_timestamp, std::string(reason)};
    }
    event.timestamp_ms.reset();  // NULL: the commit time, as Debezium falls back to its own
    if (value) {
      std::int64_t us = 0;
      if (const auto bad = parse_timestamp(*value, us); !bad.empty()) {
        return {config_.column_timestamp, std::string(bad)};
      }
      event.timestamp_ms = us / 1000;
      time_us = us;
    }
  }
  std::size_t header = 0;
  if (source_) {
    if (auto bad = map_cloudevent(relation, tuple, event, header, time_us,
                                  time_us != commit_time_us || event.timestamp_ms.has_value());
        !bad.second.empty()) {
      return bad;
    }
  }
  if (!config_.column_traceparent.empty()) {
    if (relation.traceparent < 0) return {config_.column_traceparent, std::string(kMissing)};
    if (!config_.column_tracestate.empty() && relation.tracestate < 0) {
      return {config_.column_tracestate, std::string(kMissing)};
    }
    std::optional<std::string_view> parent;
    if (const auto reason = read_optional(tuple, relation.traceparent, parent); !reason.empty()) {
      return {config_.column_traceparent, std::string(reason)};
    }
    std::optional<std::string_view> state;
    if (relation.tracestate >= 0) {
      if (const auto reason = read_optional(tuple, relation.tracestate, state); !reason.empty()) {
        return {config_.column_tracestate, std::string(reason)};
      }
    }
    event.invalid_traceparent = false;
    if (parent && is_valid_traceparent(*parent)) {
      extra_headers_[header++] = {"traceparent", parent};
      if (state && !state->empty()) extra_headers_[header++] = {"tracestate", state};
    } else if (parent) {
      // W3C: a receiver ignores an invalid traceparent, and the tracestate with it.
      event.invalid_traceparent = true;
    }
  }
  for (std::size_t i = 0; i < config_.additional_placements.size(); ++i) {
    const Placement& placement = config_.additional_placements[i];
    const int index = relation.placement_columns[i];
    std::optional<std::string_view> value;
    if (index < 0) return {placement.column, std::string(kMissing)};
    if (const auto reason = read_optional(tuple, index, value); !reason.empty()) {
      return {placement.column, std::string(reason)};
    }
    switch (placement.kind) {
      case Placement::Kind::kHeader:
        // The name is set on every call: a view into config_ would dangle once the Mapper moved.
        extra_headers_[header++] = {placement.alias.empty() ? placement.column : placement.alias,
                                    value};
        break;
      case Placement::Kind::kPartition: {
        const std::uint32_t type = relation.placement_types[i];
        if (type != kInt2Oid && type != kInt4Oid && type != kInt8Oid) {
          return {placement.column, "has type OID " + std::to_string(type) +
                                        ", but a partition placement needs an integer column "
                                        "(smallint, integer or bigint)"};
        }
        event.partition.reset();
        if (value) {
          std::int32_t partition = 0;
          if (const auto bad = parse_partition(*value, partition); !bad.empty()) {
            return {placement.column, std::string(bad)};
          }
          event.partition = partition;
        }
        break;
      }
    }
  }
  event.headers = std::span<const ExtraHeader>(extra_headers_.data(), header);
  return {};
}

std::pair<std::string_view, std::string> Mapper::map_cloudevent(const CachedRelation& relation,
                                                                const TupleData& tuple,
                                                                Event& event, std::size_t& header,
                                                                std::int64_t time_us,
                                                                bool time_from_column) {
  if (event.id.empty()) {
    return {config_.column_id, "is empty, but a CloudEvent needs an id (ce_id)"};
  }
  if (!event.type) {
    return {config_.column_type, relation.type < 0
                                     ? "is missing from the table, but a CloudEvent needs a type "
                                       "(ce_type)"
                                     : "is NULL, but a CloudEvent needs a type (ce_type)"};
  }
  if (event.type->empty()) {
    return {config_.column_type, "is empty, but a CloudEvent needs a type (ce_type)"};
  }
  for (std::size_t i = 0; i < relation.source_columns.size(); ++i) {
    const auto reason = read_required(tuple, relation.source_columns[i], source_values_[i]);
    if (!reason.empty()) {
      return {source_->columns()[i], std::string(reason) +
                                         ", but the CloudEvents source (ce_source "
                                         "from template \"" +
                                         source_->text() + "\") needs it"};
    }
  }
  source_->render(source_values_, source_scratch_);
  if (source_scratch_.empty()) {
    return {{},
            "renders an empty ce_source from template \"" + source_->text() +
                "\", but a CloudEvent needs a source"};
  }
  const std::size_t time_size = format_rfc3339(time_us, time_text_);
  if (time_size == 0) {
    constexpr std::string_view kOutside =
        "outside the years 0001 to 9999, which ce_time (RFC 3339) cannot carry";
    if (time_from_column) return {config_.column_timestamp, "is " + std::string(kOutside)};
    return {{}, "the commit time is " + std::string(kOutside)};
  }
  extra_headers_[header++] = {"ce_specversion", "1.0"};
  extra_headers_[header++] = {"ce_id", event.id};
  extra_headers_[header++] = {"ce_source", source_scratch_};
  extra_headers_[header++] = {"ce_type", event.type};
  extra_headers_[header++] = {"ce_time", std::string_view(time_text_.data(), time_size)};
  if (event.key) extra_headers_[header++] = {"ce_subject", event.key};
  if (event.value) {
    std::string_view content_type = config_.content_type;
    if (content_type.empty()) {
      content_type = relation.bytea_payload ? "application/octet-stream" : "application/json";
    }
    extra_headers_[header++] = {"content-type", content_type};
  }
  return {};
}

MapResult Mapper::map_insert(const pgoutput::Insert& insert, std::int64_t commit_time_us) {
  const auto found = relations_.find(insert.relid);
  if (found == relations_.end()) {
    return MapError{.table = {},
                    .column = {},
                    .reason = "relation id " + std::to_string(insert.relid) +
                              " was never announced by a Relation message",
                    .id = {},
                    .payload = {},
                    .aggregateid = {},
                    .type = {},
                    .topic = {}};
  }
  const CachedRelation& relation = found->second;
  const TupleData& tuple = insert.new_tuple;

  if (tuple.size() != relation.column_count) {
    return MapError{.table = relation.qualified_name,
                    .column = {},
                    .reason = "insert has " + std::to_string(tuple.size()) +
                              " columns but the Relation message announced " +
                              std::to_string(relation.column_count) + " (protocol violation)",
                    .id = {},
                    .payload = {},
                    .aggregateid = {},
                    .type = {},
                    .topic = {}};
  }
  if (!relation.is_outbox) return NotOutbox{.table = relation.qualified_name};

  Event event;
  const auto raw_text = [&](int index) -> std::optional<std::string_view> {
    if (index < 0 || tuple[static_cast<std::size_t>(index)].kind != pgoutput::ValueKind::kText) {
      return std::nullopt;
    }
    return tuple[static_cast<std::size_t>(index)].data;
  };
  // The topic the row was meant for, when every referenced column has a text value.
  const auto intended_topic = [&]() {
    std::vector<std::string_view> values;
    for (int index : relation.topic_columns) {
      auto v = raw_text(index);
      if (!v) return std::string();
      values.push_back(*v);
    }
    std::string topic;
    topic_.render(values, topic);
    return topic;
  };
  // A bytea payload once decoded: the dead-letter record carries its bytes, not its text.
  std::optional<std::string_view> decoded_payload;
  const auto error = [&](std::string_view column, std::string_view reason) {
    return MapError{.table = relation.qualified_name,
                    .column = std::string(column),
                    .reason = std::string(reason),
                    .id = std::string(event.id),
                    .payload = decoded_payload ? decoded_payload : raw_text(relation.payload),
                    .aggregateid = raw_text(relation.aggregateid),
                    .type = raw_text(relation.type),
                    .topic = intended_topic(),
                    .binary_payload = relation.bytea_payload};
  };

  if (const auto reason = read_required(tuple, relation.id, event.id); !reason.empty()) {
    return error(config_.column_id, reason);
  }

  for (std::size_t i = 0; i < relation.topic_columns.size(); ++i) {
    const auto reason = read_required(tuple, relation.topic_columns[i], topic_values_[i]);
    if (!reason.empty()) return error(relation.topic_column_names[i], reason);
  }

  std::string_view payload;
  const bool null_payload =
      relation.payload >= 0 &&
      tuple[static_cast<std::size_t>(relation.payload)].kind == ValueKind::kNull;
  if (null_payload && config_.tombstone_on_empty_payload) {
    event.value.reset();  // a tombstone
  } else if (const auto reason = read_required(tuple, relation.payload, payload); !reason.empty()) {
    return error(config_.column_payload, reason);
  } else if (relation.bytea_payload) {
    if (const auto bad = decode_bytea(payload, payload_bytes_); !bad.empty()) {
      return error(config_.column_payload, bad);
    }
    payload = payload_bytes_;
    decoded_payload = payload;
    event.value = payload;
  } else if (config_.tombstone_on_empty_payload && is_blank(payload)) {
    event.value.reset();
  } else {
    event.value = payload;
  }
  if (json_ && event.value) {
    if (const auto code = json_->check(*event.value); code != simdjson::SUCCESS) {
      return error(config_.column_payload,
                   std::string("is not valid JSON: ") + simdjson::error_message(code));
    }
  }

  if (const auto reason = read_optional(tuple, relation.aggregateid, event.key); !reason.empty()) {
    return error(config_.column_aggregateid, reason);
  }
  if (const auto reason = read_optional(tuple, relation.type, event.type); !reason.empty()) {
    return error(config_.column_type, reason);
  }
  if (extras_) {
    if (auto [column, reason] = map_extras(relation, tuple, event, commit_time_us);
        !reason.empty()) {
      return error(column, reason);
    }
  }

  topic_.render(topic_values_, topic_scratch_);
  if (!is_valid_topic(topic_scratch_)) {
    // Name the first referenced column whose value breaks the rule, when there is one.
    std::string_view culprit;
    for (std::size_t i = 0; i < topic_values_.size() && culprit.empty(); ++i) {
      for (const char c : topic_values_[i]) {
        if (!is_topic_char(c)) {
          culprit = relation.topic_column_names[i];
          break;
        }
      }
    }
    return error(culprit, "renders topic \"" + topic_scratch_ + "\" from template \"" +
                              topic_.text() +
                              "\", which is not a valid Kafka topic name (1 to 249 characters "
                              "of [a-zA-Z0-9._-], not \".\" or \"..\")");
  }
  event.topic = topic_scratch_;
  return event;
}

MessageMapResult Mapper::map_message(const pgoutput::LogicalMessage& message) {
  if (config_.message_prefix.empty() || message.prefix != config_.message_prefix) {
    return OtherPrefix{message.prefix};
  }
  const auto error = [&](std::string reason) {
    return MapError{.table = message_source_,
                    .column = {},
                    .reason = "message at LSN " + message.lsn.to_string() + " " + std::move(reason),
                    .id = std::string(envelope_.id),
                    .payload = message.content,  // dead-lettered as it came
                    .aggregateid = envelope_.aggregate_id,
                    .type = envelope_.type,
                    .topic = {},
                    .binary_payload = true};
  };
  envelope_ = Envelope{};
  if (!message.transactional) {
    return error(
        "is not transactional (pg_logical_emit_message(false, ...)): it was sent when emitted, "
        "outside any transaction, so it is no outbox event (emit it with true, in the "
        "transaction of the change it announces)");
  }
  if (auto bad = envelope_reader_.read(message.content, config_.message_format, envelope_);
      !bad.empty()) {
    return error("content " + bad);
  }

  Event event;
  event.id = envelope_.id;
  event.key = envelope_.aggregate_id;
  event.type = envelope_.type;
  if (envelope_.payload) {
    event.value = envelope_.payload;
  } else if (!config_.tombstone_on_empty_payload) {
    return error("has no payload");
  }
  if (json_ && event.value) {
    if (const auto code = json_->check(*event.value); code != simdjson::SUCCESS) {
      return error(std::string("has a payload that is not valid JSON: ") +
                   simdjson::error_message(code));
    }
  }
  for (std::size_t i = 0; i < message_topic_fields_.size(); ++i) {
    std::optional<std::string_view> value;
    switch (message_topic_fields_[i]) {
      case EnvelopeField::kId:
        value = envelope_.id;
        break;
      case EnvelopeField::kAggregateType:
        value = envelope_.aggregate_type;
        break;
      case EnvelopeField::kAggregateId:
        value = envelope_.aggregate_id;
        break;
      case EnvelopeField::kType:
        value = envelope_.type;
        break;
    }
    if (!value) {
      return error("has no " + topic_.columns()[i] + ", which the topic template '" +
                   topic_.text() + "' references");
    }
    topic_values_[i] = *value;
  }
  topic_.render(topic_values_, topic_scratch_);
  if (!is_valid_topic(topic_scratch_)) {
    return error("renders topic \"" + topic_scratch_ + "\" from template \"" + topic_.text() +
                 "\", which is not a valid Kafka topic name (1 to 249 characters of "
                 "[a-zA-Z0-9._-], not \".\" or \"..\")");
  }
  event.topic = topic_scratch_;
  message_headers_.clear();
  for (const EnvelopeHeader& h : envelope_.headers) message_headers_.push_back({h.name, h.value});
  event.headers = message_headers_;
  return event;
}

}  // namespace outbox::mapping
