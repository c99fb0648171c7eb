// The relay's progress record read from outside the relay (`prune`): the last position the relay
// confirmed for a database system and slot, from the compacted checkpoint topic (Kafka), the
// key-value bucket (JetStream) or the PostgreSQL table (SQS, EventBridge), as the relay writes it
// (docs/failures.md). Blocking, for one-shot commands; never on the relay's io thread.
// Thread-safety: free functions, no shared state.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "outbox/nats/publisher.hpp"
#include "outbox/pgoutput/lsn.hpp"
#include "outbox/relay/progress_record.hpp"
#include "outbox/sinks/sinks.hpp"

namespace outbox::sinks {

// Where the relay keeps its record: Kafka (`brokers` non-empty), JetStream (`nats.urls`
// non-empty) or, with SQS and EventBridge, a PostgreSQL table of the database (`pg_table`, read
// over `pg_conninfo`), with the relay's names (--checkpoint-topic, --nats-progress-bucket,
// --progress-table).
struct ProgressLocation {
  std::string brokers;
  std::vector<std::pair<std::string, std::string>> properties;  // librdkafka's
  std::string checkpoint_topic = "outbox-relay.checkpoints";
  nats::PublisherConfig nats;
  std::string nats_bucket = "outbox-relay-progress";
  std::optional<ProgressTableName> pg_table;  // its schema filled (the outbox table's)
  std::string pg_conninfo;                    // the command's --pg

  bool given() const { return !brokers.empty() || !nats.urls.empty() || pg_table.has_value(); }
  // "topic T", "JetStream key-value bucket B" or "PostgreSQL table S.T".
  std::string where() const;
};

struct StoredProgress {
  std::string key;                        // SYSTEM_ID/SLOT
  std::optional<pgoutput::Lsn> lsn;       // the last record; none: no record under the key
  std::optional<std::uint32_t> timeline;  // the timeline it was written on (older: none)
  // When it was written (Unix ms): Kafka's timestamp, or the time JetStream stored the key's value.
  std::optional<std::int64_t> written_ms;
  std::string bad;    // a value under the key that is not a position
  std::string error;  // the store could not be read: why
};

// The record's key: the server's system identifier and the slot's name.
using relay::progress_key;

// Reads the record of `slot` on `system_id`. Kafka's topic is read read_committed: a record of an
// exactly-once transaction still open or aborted is not taken for delivered (an older record can
// only make a check stricter).
StoredProgress read_stored_progress(const ProgressLocation& where, const std::string& system_id,
                                    const std::string& slot, std::chrono::milliseconds timeout);

}  // namespace outbox::sinks
