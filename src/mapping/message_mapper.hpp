// Private to src/mapping: --messages, a transactional logical message with the configured prefix
// mapped to an Event from its envelope (envelope.hpp): the topic from the template over the
// envelope's fields, the key its aggregate id, the value its payload, its headers. Changes with
// the envelope and what it may carry, not with the outbox table's columns.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/mapping/envelope.hpp"
#include "outbox/mapping/mapper.hpp"
#include "outbox/mapping/topic_template.hpp"
#include "outbox/pgoutput/messages.hpp"

namespace outbox::mapping {

class JsonChecker;

class MessageMapper {
 public:
  // Throws std::invalid_argument when the topic template references a field that an envelope
  // does not have. `config.message_prefix` is not empty.
  explicit MessageMapper(const MapperConfig& config);

  // See Mapper::map_message(). `json` checks the payload when not null. Views valid until the
  // next call.
  MessageMapResult map(const pgoutput::LogicalMessage& message, JsonChecker* json);

 private:
  // The envelope field of each topic template reference.
  enum class EnvelopeField : std::uint8_t { kId, kAggregateType, kAggregateId, kType };

  std::string prefix_;
  MessageFormat format_;
  bool tombstone_on_empty_payload_;
  TopicTemplate topic_;
  std::vector<EnvelopeField> topic_fields_;
  std::vector<std::string_view> topic_values_;
  std::string topic_scratch_;
  EnvelopeReader envelope_reader_;
  Envelope envelope_;
  std::vector<ExtraHeader> headers_;
  std::string source_;  // "logical messages with prefix 'P'"
};

}  // namespace outbox::mapping
