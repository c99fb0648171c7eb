#include "outbox/sinks/progress_reader.hpp"

#include <exception>

#include "kafka_progress.hpp"
#include "outbox/nats/progress_bucket.hpp"
#include "outbox/pg/progress_table.hpp"

namespace outbox::sinks {

std::string ProgressLocation::where() const {
  if (pg_table) return "PostgreSQL table " + pg_table->schema + "." + pg_table->table;
  return brokers.empty() ? "JetStream key-value bucket " + nats_bucket
                         : "topic " + checkpoint_topic;
}

StoredProgress read_stored_progress(const ProgressLocation& where, const std::string& system_id,
                                    const std::string& slot, std::chrono::milliseconds timeout) {
  StoredProgress out;
  out.key = relay::progress_key(system_id, slot);
  relay::ProgressRead read;
  if (where.pg_table) {
    pg::ProgressTable table(where.pg_conninfo, where.pg_table->schema, where.pg_table->table,
                            timeout, false);
    const pg::ProgressTable::Result r = table.get(out.key);
    read.error = r.error;
    read.written_ms = r.written_ms;
    if (r.value) relay::parse_progress_value(*r.value, read);
  } else if (!where.brokers.empty()) {
    kafka::ConsumerConfig consumer{where.brokers, where.properties};
    read = read_kafka_progress(consumer, where.checkpoint_topic, out.key, timeout);
  } else {
    try {
      nats::ProgressBucket bucket(where.nats, where.nats_bucket, timeout);
      const nats::ProgressBucket::Result r = bucket.get(out.key);
      read.error = r.error;
      if (r.value) relay::parse_progress_value(*r.value, read);
      if (r.value) read.written_ms = r.created_ms;  // the server's time, as Kafka's timestamp
    } catch (const std::exception& e) {             // nats::ConfigError: a setting libnats refused
      read.error = e.what();
    }
  }
  out.lsn = read.last;
  out.timeline = read.timeline;
  out.written_ms = read.written_ms;
  out.bad = read.bad;
  out.error = read.error;
  return out;
}

}  // namespace outbox::sinks
