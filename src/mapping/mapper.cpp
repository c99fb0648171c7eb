#include "outbox/mapping/mapper.hpp"

#include <simdjson.h>

#include <cstring>
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

// A column that must hold a text value. Returns the reason it does not, or an empty view.
std::string_view read_required(const TupleData& tuple, int index, std::string_view& out) {
  if (index < 0) return kMissing;
  const TupleValue& value = tuple[static_cast<std::size_t>(index)];
  switch (value.kind) {
    case ValueKind::kText:
      out = value.data;
      return {};
    case ValueKind::kNull:
      return kNull;
    case ValueKind::kUnchangedToast:
      return kUnchangedToast;
    case ValueKind::kBinary:
      return kBinary;
  }
  return kBinary;  // unreachable for a valid ValueKind; the decoder only produces the four above
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
  return kBinary;
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
  if (config_.require_json) json_.reset(new JsonChecker());
}

bool Mapper::is_outbox_name(const pgoutput::Relation& relation) const {
  const std::string_view schema = relation.nspname.empty() ? "pg_catalog" : relation.nspname;
  return schema == config_.schema && relation.relname == config_.table;
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
  }
  relations_.insert_or_assign(relation.relid, std::move(cached));
}

std::string_view Mapper::relation_name(std::uint32_t relid) const {
  const auto found = relations_.find(relid);
  return found == relations_.end() ? std::string_view() : found->second.qualified_name;
}

MapResult Mapper::map_insert(const pgoutput::Insert& insert) {
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
  const auto error = [&](std::string_view column, std::string_view reason) {
    return MapError{.table = relation.qualified_name,
                    .column = std::string(column),
                    .reason = std::string(reason),
                    .id = std::string(event.id),
                    .payload = raw_text(relation.payload),
                    .aggregateid = raw_text(relation.aggregateid),
                    .type = raw_text(relation.type),
                    .topic = intended_topic()};
  };

  if (const auto reason = read_required(tuple, relation.id, event.id); !reason.empty()) {
    return error(config_.column_id, reason);
  }

  for (std::size_t i = 0; i < relation.topic_columns.size(); ++i) {
    const auto reason = read_required(tuple, relation.topic_columns[i], topic_values_[i]);
    if (!reason.empty()) return error(relation.topic_column_names[i], reason);
  }

  std::string_view payload;
  if (const auto reason = read_required(tuple, relation.payload, payload); !reason.empty()) {
    return error(config_.column_payload, reason);
  }
  if (json_) {
    if (const auto code = json_->check(payload); code != simdjson::SUCCESS) {
      return error(config_.column_payload,
                   std::string("is not valid JSON: ") + simdjson::error_message(code));
    }
  }
  event.value = payload;

  if (const auto reason = read_optional(tuple, relation.aggregateid, event.key); !reason.empty()) {
    return error(config_.column_aggregateid, reason);
  }
  if (const auto reason = read_optional(tuple, relation.type, event.type); !reason.empty()) {
    return error(config_.column_type, reason);
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

}  // namespace outbox::mapping
