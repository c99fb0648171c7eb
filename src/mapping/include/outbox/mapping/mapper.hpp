// Maps decoded pgoutput inserts on the outbox table, and logical messages with the --messages
// prefix (their content an envelope, envelope.hpp), to Kafka-ready events, with the defaults of
// Debezium's outbox event router. Owns the relation cache (keyed by relid, replaced on every
// Relation message). Single-threaded: one Mapper per stream, used from the stream's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "outbox/mapping/envelope.hpp"
#include "outbox/mapping/topic_template.hpp"
#include "outbox/pgoutput/lsn.hpp"
#include "outbox/pgoutput/messages.hpp"

namespace outbox::mapping {

// Debezium's table.fields.additional.placement: one more column of the row, sent as a header or
// choosing the partition.
struct Placement {
  enum class Kind : std::uint8_t {
    kHeader,     // header `alias` carries the column's text (a NULL column: a header without value)
    kPartition,  // an integer column: the record goes to that partition (NULL: the partitioner's)
  };
  std::string column;
  Kind kind = Kind::kHeader;
  std::string alias;  // the header's name; the column's name when not given
};

// The record layout: Debezium's outbox event router (the default), or a CloudEvent in the Kafka
// protocol binding's binary content mode (ce_* headers, the payload as the value).
enum class Format : std::uint8_t { kDebezium, kCloudEvents };

struct MapperConfig {
  std::string schema = "public";
  std::string table = "outbox";
  std::string topic_template = "outbox.event.${aggregatetype}";
  std::string column_id = "id";
  std::string column_aggregatetype = "aggregatetype";
  std::string column_aggregateid = "aggregateid";
  std::string column_type = "type";
  std::string column_payload = "payload";
  bool require_json = false;  // reject payloads that are not valid JSON (simdjson)
  std::vector<Placement> additional_placements;
  // A timestamp or timestamptz column that gives the record timestamp (Debezium's
  // table.field.event.timestamp); empty: the commit time. A NULL value falls back to it too.
  std::string column_timestamp;
  // A NULL payload, or a text payload that is empty or only whitespace, gives a tombstone (the
  // key and a null value) instead of a mapping error (Debezium's route.tombstone.on.empty.payload).
  bool tombstone_on_empty_payload = false;
  // Further outbox tables (schema, table), mapped the same way: --table given more than once.
  std::vector<std::pair<std::string, std::string>> more_tables;
  Format format = Format::kDebezium;
  // kCloudEvents: template over columns of ce_source; empty: "/outbox/${<column_aggregatetype>}".
  std::string ce_source;
  // kCloudEvents: the content-type header of every event; empty: by the payload column's type
  // (bytea: application/octet-stream, any other: application/json).
  std::string content_type;
  // Columns holding the W3C trace context, sent as headers traceparent and tracestate; empty:
  // none. An invalid traceparent is not sent (nor the tracestate): Event::invalid_traceparent.
  std::string column_traceparent;
  std::string column_tracestate;
  // --messages: transactional logical decoding messages with this prefix are events too, their
  // content an envelope (envelope.hpp); empty: none. An empty `table` then means messages only.
  std::string message_prefix;
  MessageFormat message_format = MessageFormat::kAuto;
};

// A header after id and type: a CloudEvents attribute, the trace context, or a placement.
struct ExtraHeader {
  std::string_view name;
  std::optional<std::string_view> value;  // nullopt when the column is NULL
};

// One event ready to produce. Views refer into the decoded Insert (and so into the receive buffer)
// or into the Mapper's own scratch storage: valid until the next call on the Mapper.
struct Event {
  std::string_view topic;
  std::optional<std::string_view> key;    // aggregateid; nullopt when NULL
  std::optional<std::string_view> value;  // payload as PostgreSQL's text output gives it
  std::string_view id;                    // header "id"
  std::optional<std::string_view> type;   // header "type"; nullopt when NULL or no such column
  // The CloudEvents attributes (--format cloudevents: ce_specversion, ce_id, ce_source, ce_type,
  // ce_time, ce_subject when the key is not NULL, content-type unless a tombstone), then
  // traceparent and tracestate (when configured, not NULL and valid), then the header
  // placements in their order. Views into the Mapper's storage or the Insert.
  std::span<const ExtraHeader> headers;
  std::optional<std::int32_t> partition;     // partition placement; nullopt: the partitioner's
  std::optional<std::int64_t> timestamp_ms;  // --column-timestamp; nullopt: the commit time
  // The traceparent column held a value that is no valid W3C traceparent: no trace headers.
  bool invalid_traceparent = false;
};

// A row the mapper must reject; never dropped silently by the caller.
struct MapError {
  std::string table;   // "public.outbox"
  std::string column;  // offending column, empty when the whole row is at fault
  std::string reason;  // "is NULL", "is missing from the table", "is not valid JSON: ..."
  std::string id;      // event id when it could be read, else empty
  // Raw text of the payload and aggregate id columns when present, for a dead-letter record.
  // Views into the Insert: valid as long as the Event views would be.
  std::optional<std::string_view> payload;
  std::optional<std::string_view> aggregateid;
  std::optional<std::string_view> type;
  std::string topic;  // the topic the template renders for the row, empty when it cannot
  // The payload is bytea: `payload` is its bytes, decoded (into storage valid as long as the
  // Event views would be) when it could be.
  bool binary_payload = false;
};

// The insert was for a table other than the outbox (possible with a user-made publication).
struct NotOutbox {
  std::string table;
};

using MapResult = std::variant<Event, MapError, NotOutbox>;

// A logical message with another prefix than --messages (other software uses messages too).
struct OtherPrefix {
  std::string_view prefix;
};

using MessageMapResult = std::variant<Event, MapError, OtherPrefix>;

class CloudEventAttributes;
class JsonChecker;
class MessageMapper;

class Mapper {
 public:
  // Throws std::invalid_argument on an invalid topic template.
  explicit Mapper(MapperConfig config);
  ~Mapper();
  Mapper(Mapper&&) noexcept;
  Mapper& operator=(Mapper&&) noexcept;

  // Caches (replaces) the relation. Call for every Relation message. Without `is_outbox`, the
  // relation is the outbox when its name is the configured table; the caller passes it for a
  // relation it knows better (a partition of the outbox published under its own name).
  void on_relation(const pgoutput::Relation& relation);
  void on_relation(const pgoutput::Relation& relation, bool is_outbox);

  // The relation is one of the configured tables by name.
  bool is_outbox_name(const pgoutput::Relation& relation) const;
  // The relation has the columns an outbox row needs (id, payload, the topic template's).
  bool has_outbox_columns(const pgoutput::Relation& relation) const;

  // Maps an insert. A relid never announced by a Relation message is a MapError (protocol
  // violation). The topic is rendered from the template into scratch storage. `commit_time_us`
  // (microseconds since the Unix epoch, the transaction's commit time) gives ce_time when no
  // --column-timestamp value does; only --format cloudevents reads it.
  MapResult map_insert(const pgoutput::Insert& insert, std::int64_t commit_time_us = 0);

  // Most headers an Event carries (Event::headers).
  std::size_t max_headers() const { return extra_headers_.size(); }

  // Maps a logical message with the configured prefix from its envelope: topic from the
  // template over the envelope's fields, key the aggregate id, value the payload, headers the
  // envelope's. A non-transactional message with the prefix, or content that is no envelope, is
  // a MapError whose payload is the raw content. Views valid until the next call.
  MessageMapResult map_message(const pgoutput::LogicalMessage& message);

  // "schema.table" of a relation announced by a Relation message; empty when never announced.
  std::string_view relation_name(std::uint32_t relid) const;

  const MapperConfig& config() const { return config_; }

 private:
  struct CachedRelation {
    std::string qualified_name;    // schema.table
    std::size_t column_count = 0;  // an Insert's tuple must have exactly this many values
    bool is_outbox = false;
    // Column index in the tuple for each mapped column; -1 when absent from the table.
    int id = -1, aggregatetype = -1, aggregateid = -1, type = -1, payload = -1;
    std::vector<int> topic_columns;  // index per template reference; -1 when absent
    std::vector<std::string> topic_column_names;
    std::vector<int> placement_columns;          // index per additional placement; -1 when absent
    std::vector<std::uint32_t> placement_types;  // their type OIDs
    int timestamp = -1;                          // --column-timestamp
    std::uint32_t timestamp_type = 0;
    bool bytea_payload = false;  // the payload column is bytea: its text is decoded to bytes
    int traceparent = -1, tracestate = -1;  // --column-traceparent, --column-tracestate
    std::vector<int> source_columns;        // index per ce_source template reference
  };

  // Reads the timestamp column, the CloudEvents attributes, the trace context and the placements
  // of `insert` into `event`. Returns the offending column and why, or an empty reason.
  std::pair<std::string_view, std::string> map_extras(const CachedRelation& relation,
                                                      const pgoutput::TupleData& tuple,
                                                      Event& event, std::int64_t commit_time_us);

  MapperConfig config_;
  TopicTemplate topic_;
  std::unordered_map<std::uint32_t, CachedRelation> relations_;
  std::string topic_scratch_;
  std::vector<std::string_view> topic_values_;
  std::vector<ExtraHeader> extra_headers_;  // one per header placement, set per event
  std::string payload_bytes_;               // a bytea payload, decoded
  // Some option adds headers or reads the timestamp column: map_extras() runs.
  bool extras_ = false;
  // The parts, each in a file of its own in src/mapping (simdjson stays private to this target):
  std::unique_ptr<MessageMapper> messages_;           // null unless --messages
  std::unique_ptr<JsonChecker> json_;                 // null unless config_.require_json
  std::unique_ptr<CloudEventAttributes> cloudevent_;  // null unless --format cloudevents
};

}  // namespace outbox::mapping
