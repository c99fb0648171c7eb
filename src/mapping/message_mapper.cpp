#include "message_mapper.hpp"

#include <optional>
#include <stdexcept>
#include <utility>

#include "json_checker.hpp"
#include "topic_name.hpp"

namespace outbox::mapping {

MessageMapper::MessageMapper(const MapperConfig& config)
    : prefix_(config.message_prefix),
      format_(config.message_format),
      tombstone_on_empty_payload_(config.tombstone_on_empty_payload),
      topic_(config.topic_template),
      topic_values_(topic_.columns().size()),
      source_("logical messages with prefix '" + config.message_prefix + "'") {
  // A reference names an envelope field by its name or by the table column mapped to it.
  for (const std::string& name : topic_.columns()) {
    if (name == "id" || name == config.column_id) {
      topic_fields_.push_back(EnvelopeField::kId);
    } else if (name == "aggregatetype" || name == config.column_aggregatetype) {
      topic_fields_.push_back(EnvelopeField::kAggregateType);
    } else if (name == "aggregateid" || name == config.column_aggregateid) {
      topic_fields_.push_back(EnvelopeField::kAggregateId);
    } else if (name == "type" || name == config.column_type) {
      topic_fields_.push_back(EnvelopeField::kType);
    } else {
      throw std::invalid_argument("topic template '" + topic_.text() + "' references ${" + name +
                                  "}, which a message envelope does not have (id, "
                                  "aggregatetype, aggregateid, type)");
    }
  }
}

MessageMapResult MessageMapper::map(const pgoutput::LogicalMessage& message, JsonChecker* json) {
  if (message.prefix != prefix_) return OtherPrefix{message.prefix};
  const auto error = [&](std::string reason) {
    return MapError{.table = source_,
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
  if (auto bad = envelope_reader_.read(message.content, format_, envelope_); !bad.empty()) {
    return error("content " + bad);
  }

  Event event;
  event.id = envelope_.id;
  event.key = envelope_.aggregate_id;
  event.type = envelope_.type;
  if (envelope_.payload) {
    event.value = envelope_.payload;
  } else if (!tombstone_on_empty_payload_) {
    return error("has no payload");
  }
  if (json != nullptr && event.value) {
    if (const auto bad = json->check(*event.value); !bad.empty()) {
      return error("has a payload that is not valid JSON: " + std::string(bad));
    }
  }
  for (std::size_t i = 0; i < topic_fields_.size(); ++i) {
    std::optional<std::string_view> value;
    switch (topic_fields_[i]) {
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
  if (!is_valid_topic(topic_scratch_))
    return error(invalid_topic_reason(topic_scratch_, topic_.text()));
  event.topic = topic_scratch_;
  headers_.clear();
  for (const EnvelopeHeader& h : envelope_.headers) headers_.push_back({h.name, h.value});
  event.headers = headers_;
  return event;
}

}  // namespace outbox::mapping
