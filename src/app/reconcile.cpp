#include "outbox/app/reconcile.hpp"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <charconv>
#include <chrono>
#include <map>
#include <ostream>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "outbox/kafka/consumer.hpp"
#include "outbox/kafka/producer.hpp"
#include "outbox/mapping/topic_template.hpp"
#include "outbox/pg/admin.hpp"
#include "outbox/pg/cursor.hpp"

namespace outbox::app {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kScanBatchRows = 5000;
constexpr std::size_t kRepairBatchRows = 500;  // rows carry their payloads in the repair scan
constexpr std::uint64_t kProgressEvery = 100'000;
constexpr std::size_t kMaxRepairInFlight = 10'000;
constexpr std::size_t kMaxRepairInFlightBytes = 16U << 20;

std::string quote_ident(const std::string& name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string secs(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", seconds);
  return buf;
}

std::string rate(std::uint64_t n, double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", seconds > 0 ? static_cast<double>(n) / seconds : 0.0);
  return buf;
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Renders a row's topic from the template's column values (nullopt when one is NULL).
std::optional<std::string> render_topic(const mapping::TopicTemplate& tmpl, const pg::Row& row,
                                        std::size_t first_column) {
  std::vector<std::string_view> values;
  values.reserve(tmpl.columns().size());
  for (std::size_t i = 0; i < tmpl.columns().size(); ++i) {
    const auto& v = row[first_column + i];
    if (!v) return std::nullopt;
    values.emplace_back(*v);
  }
  std::string topic;
  tmpl.render(values, topic);
  return topic;
}

// Why a row cannot be relayed (the relay stops on it with exit code 3, or dead-letters it), or
// an empty string.
std::string unmappable_reason(const ReconcileOptions& o, const mapping::TopicTemplate& tmpl,
                              const pg::Row& row, bool payload_null, std::size_t first_column) {
  if (!row[0]) return "column " + o.mapper.column_id + " is NULL";
  if (payload_null) return "column " + o.mapper.column_payload + " is NULL";
  for (std::size_t i = 0; i < tmpl.columns().size(); ++i) {
    if (!row[first_column + i]) return "column " + tmpl.columns()[i] + " is NULL";
  }
  return {};
}

}  // namespace

// ---- EventIdSet ----------------------------------------------------------------------------

std::optional<EventIdSet::Uuid> EventIdSet::parse_uuid(std::string_view text) {
  if (text.size() != 36) return std::nullopt;
  Uuid out{};
  std::size_t byte = 0;
  for (std::size_t i = 0; i < 36;) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (text[i] != '-') return std::nullopt;
      ++i;
      continue;
    }
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;  // upper case is kept as text: matching stays exact
    };
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[byte++] = static_cast<unsigned char>(hi << 4 | lo);
    i += 2;
  }
  return out;
}

void EventIdSet::add(std::string_view id) {
  if (sealed_) throw std::logic_error("EventIdSet::add after seal");
  if (auto uuid = parse_uuid(id)) {
    uuids_.push_back(*uuid);
  } else {
    texts_.emplace_back(id);
  }
}

void EventIdSet::seal() {
  std::sort(uuids_.begin(), uuids_.end());
  std::sort(texts_.begin(), texts_.end());
  const std::size_t before = size();
  uuids_.erase(std::unique(uuids_.begin(), uuids_.end()), uuids_.end());
  texts_.erase(std::unique(texts_.begin(), texts_.end()), texts_.end());
  uuids_.shrink_to_fit();
  texts_.shrink_to_fit();
  duplicates_ += before - size();
  seen_.assign(size(), false);
  sealed_ = true;
}

std::optional<std::size_t> EventIdSet::find(std::string_view id) const {
  if (auto uuid = parse_uuid(id)) {
    auto it = std::lower_bound(uuids_.begin(), uuids_.end(), *uuid);
    if (it == uuids_.end() || *it != *uuid) return std::nullopt;
    return static_cast<std::size_t>(it - uuids_.begin());
  }
  auto it = std::lower_bound(texts_.begin(), texts_.end(), id,
                             [](const std::string& a, std::string_view b) { return a < b; });
  if (it == texts_.end() || *it != id) return std::nullopt;
  return uuids_.size() + static_cast<std::size_t>(it - texts_.begin());
}

bool EventIdSet::mark_seen(std::string_view id) {
  if (!sealed_) throw std::logic_error("EventIdSet::mark_seen before seal");
  auto i = find(id);
  if (!i) return false;
  seen_[*i] = true;
  return true;
}

bool EventIdSet::contains(std::string_view id) const { return find(id).has_value(); }

bool EventIdSet::is_missing(std::string_view id) const {
  auto i = find(id);
  return i && !seen_[*i];
}

std::size_t EventIdSet::missing() const {
  return static_cast<std::size_t>(std::count(seen_.begin(), seen_.end(), false));
}

std::size_t EventIdSet::memory_bytes() const {
  std::size_t bytes = uuids_.capacity() * sizeof(Uuid) + texts_.capacity() * sizeof(std::string) +
                      seen_.capacity() / 8;
  for (const auto& t : texts_) {
    if (t.capacity() > 15) bytes += t.capacity() + 1;  // beyond the small-string buffer
  }
  return bytes;
}

std::vector<std::string> missing_ids(const std::vector<std::string>& window,
                                     const std::vector<std::string>& seen) {
  EventIdSet ids;
  for (const auto& id : window) ids.add(id);
  ids.seal();
  for (const auto& id : seen) ids.mark_seen(id);
  std::vector<std::string> out;
  std::set<std::string> reported;
  for (const auto& id : window) {
    if (ids.is_missing(id) && reported.insert(id).second) out.push_back(id);
  }
  return out;
}

// ---- SQL --------------------------------------------------------------------------------------

// Commit order, as far as PostgreSQL can tell after the fact:
// - with track_commit_timestamp on, the commit time of the inserting transaction (exact between
//   transactions; rows committed before it was turned on have none and come first);
// - then the time column (within a transaction, clock_timestamp() defaults tell insert order;
//   without commit timestamps this is the main key: for one aggregate, whose writers are
//   serialised by a lock on the aggregate, a later writer's time is the later one when the column
//   is filled at insert time);
// - then the inserting transaction's age, oldest first (age(xmin), which survives xid wraparound);
// - then the row's physical position (ctid): insert order within one transaction as long as the
//   table had no free space to reuse, the usual case for an insert-only table.
ReconcileQueries reconcile_queries(const ReconcileOptions& o,
                                   const std::vector<std::string>& columns, bool with_payload,
                                   bool commit_timestamps) {
  const auto& m = o.mapper;
  const std::string table = quote_ident(m.schema) + "." + quote_ident(m.table);
  auto has = [&](const std::string& c) {
    return std::find(columns.begin(), columns.end(), c) != columns.end();
  };
  auto required = [&](const std::string& c, const std::string& role) {
    if (!has(c)) {
      throw std::runtime_error("table " + m.schema + "." + m.table + " has no column " + c + " (" +
                               role + ")");
    }
    return "t." + quote_ident(c);
  };
  auto optional = [&](const std::string& c) {
    return has(c) ? "t." + quote_ident(c) + "::text" : std::string("NULL::text");
  };
  const std::string id = required(m.column_id, "--column-id") + "::text";
  const std::string payload = required(m.column_payload, "--column-payload");
  const std::string time = required(o.column_time, "--column-time");
  std::string topic_columns;
  const mapping::TopicTemplate tmpl(m.topic_template);
  for (const auto& c : tmpl.columns()) {
    topic_columns += ", " + required(c, "referenced by the topic template") + "::text";
  }
  const std::string from = " FROM " + table + " AS t WHERE " + time + " >= $1::timestamptz AND " +
                           time + " < $2::timestamptz";
  ReconcileQueries q;
  q.scan = "SELECT " + id + ", " + payload + " IS NULL, " + optional(m.column_aggregateid) + ", " +
           time + "::text" + topic_columns + from;
  const std::string commit_ts = "pg_catalog.pg_xact_commit_timestamp(t.xmin)";
  // The record timestamp: the commit time as the relay stamps it, else the row's time.
  const std::string stamp =
      "(extract(epoch FROM " +
      (commit_timestamps ? "COALESCE(" + commit_ts + ", " + time + "::timestamptz)"
                         : time + "::timestamptz") +
      ") * 1000)::bigint";
  q.ordered = "SELECT " + id + ", " + optional(m.column_aggregateid) + ", " +
              optional(m.column_type) + ", " + (with_payload ? payload + "::text" : "NULL::text") +
              ", " + time + "::text, " + stamp + topic_columns + from + " ORDER BY " +
              (commit_timestamps ? commit_ts + " NULLS FIRST, " : "") + time +
              ", pg_catalog.age(t.xmin) DESC, t.ctid";
  return q;
}

std::string field_value(const std::optional<std::string>& value) {
  if (!value) return "NULL";
  const bool plain = !value->empty() && value->find_first_of(" \"\\=\t\n\r") == std::string::npos;
  if (plain) return *value;
  std::string out = "\"";
  for (char c : *value) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  }
  return out + "\"";
}

}  // namespace outbox::app

namespace outbox::app {
namespace {

// Column positions in the rows of the two queries (see ReconcileQueries).
constexpr std::size_t kScanId = 0, kScanPayloadNull = 1, kScanAggregateId = 2, kScanTime = 3,
                      kScanTopicColumns = 4;
constexpr std::size_t kOrdId = 0, kOrdAggregateId = 1, kOrdType = 2, kOrdPayload = 3, kOrdTime = 4,
                      kOrdStamp = 5, kOrdTopicColumns = 6;

// Publishes repaired events with the relay's producer (its defaults: idempotent, acks=all,
// murmur2_random, no delivery deadline) on a private io_context, a bounded number at a time.
class Repairer {
 public:
  Repairer(const ReconcileOptions& o, std::ostream& out)
      : out_(out),
        timeout_(o.timeout),
        producer_(
            io_.get_executor(), kafka::ProducerConfig{o.brokers, o.properties, {}},
            [this](const kafka::Delivery& d) { on_delivery(d); },
            [this](const std::string& e) { fatal_ = e; }) {}

  // Queues one event; false when Kafka made no progress for the timeout (or failed for good).
  bool send(std::string_view topic, std::string_view id, std::optional<std::string_view> key,
            std::string_view value, std::optional<std::string_view> type,
            std::int64_t timestamp_ms) {
    if (!wait([&] {
          return in_flight_.size() < kMaxRepairInFlight &&
                 in_flight_bytes_ < kMaxRepairInFlightBytes;
        })) {
      return false;
    }
    std::array<kafka::Header, 2> headers{kafka::Header{"id", id}, kafka::Header{}};
    std::size_t n = 1;
    if (type) headers[n++] = {"type", *type};
    const kafka::Record record{topic, key, value, std::span<const kafka::Header>(headers.data(), n),
                               timestamp_ms};
    const std::size_t bytes = value.size() + (key ? key->size() : 0);
    const std::uint64_t opaque = next_opaque_++;
    for (;;) {
      const kafka::ProduceResult r = producer_.produce(record, opaque);
      switch (r.status) {
        case kafka::ProduceStatus::kQueued:
          if (in_flight_.empty()) last_progress_ = Clock::now();
          in_flight_.emplace(opaque, InFlight{std::string(id), bytes});
          in_flight_bytes_ += bytes;
          return true;
        case kafka::ProduceStatus::kQueueFull: {
          const std::size_t before = in_flight_.size();
          if (!wait([&] { return in_flight_.size() < before; })) return false;
          continue;
        }
        case kafka::ProduceStatus::kFailed:
          ++failed_;
          out_ << "failed id=" << field_value(std::string(id)) << " topic=" << topic
               << " error=" << field_value(r.error) << '\n';
          return true;
      }
    }
  }

  // Waits for every acknowledgement; false when Kafka made no progress for the timeout.
  bool finish() {
    return wait([&] { return in_flight_.empty(); });
  }

  std::uint64_t acknowledged() const { return acknowledged_; }
  std::uint64_t failed() const { return failed_; }
  std::size_t in_flight() const { return in_flight_.size(); }
  const std::optional<std::string>& fatal() const { return fatal_; }

 private:
  struct InFlight {
    std::string id;
    std::size_t bytes = 0;
  };

  template <typename Done>
  bool wait(Done done) {
    while (!done()) {
      if (fatal_ || Clock::now() - last_progress_ >= timeout_) return false;
      if (io_.stopped()) io_.restart();
      io_.run_one_for(std::chrono::milliseconds(100));
    }
    return !fatal_;
  }

  void on_delivery(const kafka::Delivery& d) {
    auto it = in_flight_.find(d.opaque);
    if (it == in_flight_.end()) return;
    last_progress_ = Clock::now();
    if (d.ok) {
      ++acknowledged_;
      out_ << "repaired id=" << field_value(it->second.id) << " topic=" << d.topic
           << " partition=" << d.partition << " offset=" << d.offset << '\n';
    } else {
      ++failed_;
      out_ << "failed id=" << field_value(it->second.id) << " topic=" << d.topic
           << " error=" << field_value(d.error) << '\n';
    }
    in_flight_bytes_ -= it->second.bytes;
    in_flight_.erase(it);
  }

  std::ostream& out_;
  std::chrono::milliseconds timeout_;
  boost::asio::io_context io_{1};
  std::unordered_map<std::uint64_t, InFlight> in_flight_;
  std::size_t in_flight_bytes_ = 0;
  std::uint64_t next_opaque_ = 1;
  std::uint64_t acknowledged_ = 0;
  std::uint64_t failed_ = 0;
  std::optional<std::string> fatal_;
  Clock::time_point last_progress_ = Clock::now();
  kafka::Producer producer_;  // last: destroyed first, while the handlers' state still lives
};

}  // namespace

int run_reconcile(const ReconcileOptions& o, std::ostream& out, std::ostream& err) {
  const auto& m = o.mapper;
  const std::string table_name = m.schema + "." + m.table;
  const std::int64_t start_us = now_us();
  const std::int64_t since_us = o.since.resolve(start_us);
  const std::int64_t until_us = o.until ? o.until->resolve(start_us) : start_us;
  if (since_us >= until_us) {
    err << "outbox-relay reconcile: --until " << (o.until ? o.until->text : "(now)") << " ("
        << format_utc(until_us) << ") is not after --since " << o.since.text << " ("
        << format_utc(since_us) << ")\n";
    return 2;
  }
  const std::vector<std::string> window{format_utc(since_us), format_utc(until_us)};
  const mapping::TopicTemplate tmpl(m.topic_template);
  const auto fail = [&](const std::string& message) {
    err << "outbox-relay reconcile: " << message << '\n';
    return 1;
  };

  try {
    pg::AdminSession session(o.conninfo);
    std::vector<std::string> columns;
    try {
      for (auto& row :
           session.exec("SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = $1::regclass "
                        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                        {quote_ident(m.schema) + "." + quote_ident(m.table)})) {
        columns.push_back(row[0].value_or(""));
      }
    } catch (const pg::Error& e) {
      return fail("table " + table_name + ": " + e.what());
    }
    const bool commit_timestamps = session.setting("track_commit_timestamp") == "on";
    ReconcileQueries queries;
    try {
      queries = reconcile_queries(o, columns, o.repair, commit_timestamps);
    } catch (const std::runtime_error& e) {
      return fail(e.what());
    }
    err << "reconcile: table " << table_name << ", rows with " << o.column_time << " in ["
        << window[0] << ", " << window[1] << ")\n";

    // 1. The window's ids and the topics they route to.
    EventIdSet ids;
    std::map<std::string, std::uint64_t> rows_per_topic;
    std::uint64_t rows = 0, unmappable = 0;
    auto phase = Clock::now();
    {
      pg::Cursor cursor(session, "scan " + table_name, queries.scan, window, kScanBatchRows);
      pg::Rows batch;
      while (cursor.fetch(batch)) {
        for (const pg::Row& row : batch) {
          if (++rows % kProgressEvery == 0) {
            err << "reconcile: scanned " << rows << " rows (" << rate(rows, seconds_since(phase))
                << " rows/s)\n";
          }
          const bool payload_null = row[kScanPayloadNull].value_or("f") == "t";
          const std::string reason =
              unmappable_reason(o, tmpl, row, payload_null, kScanTopicColumns);
          if (!reason.empty()) {
            ++unmappable;
            out << "unmappable id=" << field_value(row[kScanId])
                << " aggregateid=" << field_value(row[kScanAggregateId])
                << " time=" << field_value(row[kScanTime]) << " reason=" << field_value(reason)
                << " (the relay stops on it with exit code 3 or dead-letters it; not repaired)\n";
            continue;
          }
          ids.add(*row[kScanId]);
          ++rows_per_topic[*render_topic(tmpl, row, kScanTopicColumns)];
        }
      }
      cursor.close();
    }
    ids.seal();
    const double scan_seconds = seconds_since(phase);
    err << "reconcile: scanned " << rows << " rows in " << secs(scan_seconds) << " ("
        << rate(rows, scan_seconds) << " rows/s); " << ids.size() << " ids in "
        << ids.memory_bytes() << " bytes; " << rows_per_topic.size() << " topics\n";
    if (ids.duplicates() > 0) {
      err << "reconcile: " << ids.duplicates() << " rows repeat an id of another row\n";
    }

    // 2. Kafka: every record of those topics from the window's start (less the margin) to the
    // end each partition has now.
    std::uint64_t records = 0, matched = 0, without_id = 0;
    std::size_t topics_read = 0, topics_absent = 0;
    if (!rows_per_topic.empty()) {
      kafka::Consumer consumer(kafka::ConsumerConfig{o.brokers, o.properties});
      const std::int64_t from_ms = std::max<std::int64_t>(0, since_us / 1000 - o.margin.count());
      std::vector<kafka::PartitionRange> ranges;
      std::uint64_t planned = 0;
      for (const auto& [topic, count] : rows_per_topic) {
        const kafka::TopicPlan plan = consumer.plan(topic, from_ms, o.timeout);
        if (!plan.exists) {
          ++topics_absent;
          err << "reconcile: topic " << topic << " does not exist: its " << count
              << " rows are missing\n";
          continue;
        }
        ++topics_read;
        for (const auto& p : plan.partitions) {
          planned += static_cast<std::uint64_t>(std::max<std::int64_t>(0, p.end - p.start));
          ranges.push_back(p);
        }
      }
      err << "reconcile: reading " << topics_read << " topics (" << ranges.size()
          << " partitions, up to " << planned << " records) from records stamped at or after "
          << format_utc(from_ms * 1000) << "\n";
      phase = Clock::now();
      records = consumer.read(
          ranges,
          [&](const kafka::ConsumedRecord& r) {
            if (!r.id_header) {
              ++without_id;
            } else if (ids.mark_seen(*r.id_header)) {
              ++matched;
            }
            if (++records % kProgressEvery == 0) {
              err << "reconcile: read " << records << " of up to " << planned << " records ("
                  << rate(records, seconds_since(phase)) << " records/s)\n";
            }
          },
          o.timeout);
      const double read_seconds = seconds_since(phase);
      err << "reconcile: read " << records << " records in " << secs(read_seconds) << " ("
          << rate(records, read_seconds) << " records/s); " << matched
          << " carry an id of the window";
      if (without_id > 0) err << ", " << without_id << " have no id header";
      err << "\n";
    }

    // 3. What Kafka lacks, in commit order; with --repair, published in that order.
    const std::size_t missing = ids.missing();
    std::uint64_t listed = 0;
    std::optional<Repairer> repairer;
    bool stalled = false;
    if (missing > 0) {
      if (o.repair) repairer.emplace(o, out);
      phase = Clock::now();
      pg::Cursor cursor(session, "scan " + table_name + " in commit order", queries.ordered, window,
                        o.repair ? kRepairBatchRows : kScanBatchRows);
      pg::Rows batch;
      std::uint64_t scanned = 0;
      while (!stalled && cursor.fetch(batch)) {
        for (const pg::Row& row : batch) {
          if (++scanned % kProgressEvery == 0) {
            err << "reconcile: listing missing rows: scanned " << scanned << " rows, " << listed
                << " of " << missing << " missing found\n";
          }
          if (!row[kOrdId] || !ids.is_missing(*row[kOrdId])) continue;
          const auto topic = render_topic(tmpl, row, kOrdTopicColumns);
          if (!topic || (o.repair && !row[kOrdPayload])) continue;  // changed since the scan
          ++listed;
          const std::string& id = *row[kOrdId];
          ids.mark_seen(id);  // list a repeated id once
          out << "missing id=" << field_value(id)
              << " aggregateid=" << field_value(row[kOrdAggregateId]) << " topic=" << *topic
              << " time=" << field_value(row[kOrdTime]) << '\n';
          if (!repairer) continue;
          std::int64_t stamp = 0;
          const std::string& text = row[kOrdStamp].value_or("0");
          std::from_chars(text.data(), text.data() + text.size(), stamp);
          const auto& key = row[kOrdAggregateId];
          const auto& type = row[kOrdType];
          if (!repairer->send(
                  *topic, id, key ? std::optional<std::string_view>(*key) : std::nullopt,
                  *row[kOrdPayload], type ? std::optional<std::string_view>(*type) : std::nullopt,
                  stamp)) {
            stalled = true;
            break;
          }
        }
      }
      if (!stalled) cursor.close();
      if (repairer && !stalled) stalled = !repairer->finish();
      err << "reconcile: listed " << listed << " missing rows in " << secs(seconds_since(phase))
          << "\n";
      if (listed < missing && !stalled) {
        err << "reconcile: " << missing - listed
            << " missing rows left the table (or their columns changed) between the scans\n";
      }
    }

    out << "summary table=" << table_name << " since=" << window[0] << " until=" << window[1]
        << " rows_scanned=" << rows << " topics_read=" << topics_read;
    if (topics_absent > 0) out << " topics_absent=" << topics_absent;
    out << " records_read=" << records << " missing=" << missing << " unmappable=" << unmappable;
    if (repairer) {
      out << " repaired=" << repairer->acknowledged() << " failed=" << repairer->failed();
      if (repairer->in_flight() > 0) out << " unacknowledged=" << repairer->in_flight();
    }
    out << '\n';
    out.flush();
    if (repairer && repairer->fatal()) {
      return fail("Kafka producer failed: " + *repairer->fatal() +
                  "; run reconcile again to see what is still missing");
    }
    if (stalled) {
      return fail("no acknowledgement from Kafka for " + std::to_string(o.timeout.count()) +
                  " ms; " + std::to_string(repairer ? repairer->in_flight() : 0) +
                  " events were in flight and may still arrive: run reconcile again");
    }
    if (unmappable > 0) return 1;
    if (!o.repair) return missing > 0 ? 1 : 0;
    return repairer && (repairer->failed() > 0 || repairer->acknowledged() < listed) ? 1 : 0;
  } catch (const kafka::ConfigError& e) {
    err << "outbox-relay reconcile: Kafka configuration (-X, --kafka-config): " << e.what() << '\n';
    return 2;
  } catch (const pg::Error& e) {
    return fail(e.what());
  } catch (const std::runtime_error& e) {
    return fail(e.what());
  }
}

}  // namespace outbox::app
