#include "outbox/mapping/mapper.hpp"

#include <cstdint>
#include <string>
#include <utility>

#include "cloudevent_attributes.hpp"
#include "column_values.hpp"
#include "json_checker.hpp"
#include "message_mapper.hpp"
#include "timestamps.hpp"
#include "topic_name.hpp"
#include "trace_context.hpp"

namespace outbox::mapping {

using pgoutput::TupleData;
using pgoutput::ValueKind;

Mapper::Mapper(MapperConfig config) : config_(std::move(config)), topic_(config_.topic_template) {
  topic_values_.resize(topic_.columns().size());
  if (!config_.message_prefix.empty()) messages_ = std::make_unique<MessageMapper>(config_);
  if (config_.require_json) json_ = std::make_unique<JsonChecker>();
  std::size_t headers = 0;
  if (config_.format == Format::kCloudEvents) {
    cloudevent_ = std::make_unique<CloudEventAttributes>(config_);
    headers += CloudEventAttributes::kMaxHeaders;
  }
  if (!config_.column_traceparent.empty()) headers += 2;
  for (const Placement& placement : config_.additional_placements) {
    if (placement.kind == Placement::Kind::kHeader) ++headers;
  }
  extra_headers_.resize(headers);
  extras_ =
      headers > 0 || !config_.additional_placements.empty() || !config_.column_timestamp.empty();
}

Mapper::~Mapper() = default;
Mapper::Mapper(Mapper&&) noexcept = default;
Mapper& Mapper::operator=(Mapper&&) noexcept = default;

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
    if (cloudevent_) {
      for (const std::string& name : cloudevent_->source_columns()) {
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
  if (cloudevent_) {
    const CloudEventAttributes::Columns columns{.source = relation.source_columns,
                                                .has_type = relation.type >= 0,
                                                .bytea_payload = relation.bytea_payload};
    if (auto bad = cloudevent_->append(event, tuple, columns, time_us,
                                       time_us != commit_time_us || event.timestamp_ms.has_value(),
                                       extra_headers_, header);
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
    if (const auto bad = json_->check(*event.value); !bad.empty()) {
      return error(config_.column_payload, "is not valid JSON: " + std::string(bad));
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
    return error(culprit, invalid_topic_reason(topic_scratch_, topic_.text()));
  }
  event.topic = topic_scratch_;
  return event;
}

MessageMapResult Mapper::map_message(const pgoutput::LogicalMessage& message) {
  if (!messages_) return OtherPrefix{message.prefix};
  return messages_->map(message, json_.get());
}

}  // namespace outbox::mapping
