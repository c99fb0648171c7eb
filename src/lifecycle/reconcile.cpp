#include "outbox/lifecycle/reconcile.hpp"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <variant>

#include "outbox/common/qualified_name.hpp"
#include "outbox/kafka/consumer.hpp"
#include "outbox/kafka/producer.hpp"
#include "outbox/mapping/mapper.hpp"
#include "outbox/mapping/topic_template.hpp"
#include "outbox/nats/publisher.hpp"
#include "outbox/nats/stream_client.hpp"
#include "outbox/pg/admin.hpp"
#include "outbox/pg/cursor.hpp"
#include "outbox/pg/window_scan.hpp"
#include "outbox/relay/event_record.hpp"
#include "outbox/sinks/sinks.hpp"

namespace outbox::lifecycle {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kBatchRows = 500;  // rows carry their payloads (the mapper reads them)
constexpr std::uint64_t kProgressEvery = 100'000;
constexpr std::size_t kMaxRepairInFlight = 10'000;
constexpr std::size_t kMaxRepairInFlightBytes = 16U << 20;

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

}  // namespace

std::string format_utc(std::int64_t epoch_us) {
  using namespace std::chrono;
  const sys_time<microseconds> t{microseconds(epoch_us)};
  const sys_days day = floor<days>(t);
  const year_month_day ymd(day);
  std::int64_t rest = (t - day).count();  // microseconds into the day
  const int us = static_cast<int>(rest % 1'000'000);
  rest /= 1'000'000;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d.%06dZ",
                static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                static_cast<unsigned>(ymd.day()), static_cast<int>(rest / 3600),
                static_cast<int>(rest / 60 % 60), static_cast<int>(rest % 60), us);
  return buf;
}

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

// ---- Rows as pgoutput would send them -------------------------------------------------------

pgoutput::Relation relation_of(const ReconcileTable& table) {
  pgoutput::Relation r;
  r.relid = table.relid;
  r.nspname = table.schema;
  r.relname = table.table;
  r.columns.reserve(table.columns.size());
  for (std::size_t i = 0; i < table.columns.size(); ++i) {
    pgoutput::Column c;
    c.name = table.columns[i];
    c.type_oid = i < table.type_oids.size() ? table.type_oids[i] : 0;
    r.columns.push_back(c);
  }
  return r;
}

pgoutput::Insert insert_of(const ReconcileTable& table,
                           std::span<const std::optional<std::string>> values) {
  pgoutput::Insert ins;
  ins.relid = table.relid;
  ins.new_tuple.reserve(values.size());
  for (const auto& v : values) {
    if (v) {
      ins.new_tuple.push_back({pgoutput::ValueKind::kText, *v});
    } else {
      ins.new_tuple.push_back({pgoutput::ValueKind::kNull, {}});
    }
  }
  return ins;
}

// ---- SQL --------------------------------------------------------------------------------------

ReconcileQueries reconcile_queries(const ReconcileOptions& o,
                                   const std::vector<ReconcileTable>& tables,
                                   bool commit_timestamps) {
  const auto& m = o.mapper;
  const mapping::TopicTemplate tmpl(m.topic_template);
  for (const ReconcileTable& t : tables) {
    auto required = [&](const std::string& c, const std::string& role) {
      if (std::find(t.columns.begin(), t.columns.end(), c) == t.columns.end()) {
        throw std::runtime_error("table " + common::QualifiedName{t.schema, t.table}.text() +
                                 " has no column " + c + " (" + role + ")");
      }
    };
    required(m.column_id, "--column-id");
    required(m.column_payload, "--column-payload");
    required(o.column_time, "--column-time");
    for (const auto& c : tmpl.columns()) required(c, "referenced by the topic template");
  }
  return pg::window_queries(tables, o.column_time, commit_timestamps);
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

}  // namespace outbox::lifecycle

namespace outbox::lifecycle {
namespace {

// Publishes repaired events with the relay's producer (its defaults: idempotent, acks=all,
// murmur2_random, no delivery deadline), with JetStream the relay's publisher (Nats-Msg-Id =
// the id), or with SQS or EventBridge the relay's sink (sinks::make_aws_record_sink: SQS's FIFO
// group = the key, deduplication id = the id), on a private io_context, a bounded number at a
// time.
class Repairer {
 public:
  // Throws kafka::ConfigError or nats::ConfigError (a bad setting; JetStream: no server).
  Repairer(const ReconcileOptions& o, std::ostream& out) : out_(out), timeout_(o.timeout) {
    if (o.resend()) {
      aws_ = sinks::make_aws_record_sink(io_.get_executor(), o.sqs, o.eventbridge,
                                         {[this](const sink::Delivery& d) { on_delivery(d); },
                                          [this](const std::string& e) { fatal_ = e; },
                                          [this](const std::string& e) { fatal_ = e; }});
    } else if (o.nats.urls.empty()) {
      kafka_ = std::make_unique<kafka::Producer>(
          io_.get_executor(), kafka::ProducerConfig{o.brokers, o.properties, {}},
          [this](const kafka::Delivery& d) { on_delivery(d); },
          [this](const std::string& e) { fatal_ = e; });
    } else {
      nats::PublisherConfig c = o.nats;
      c.ack_timeout = o.timeout;
      nats_ = std::make_unique<nats::Publisher>(
          io_.get_executor(), c, [this](const sink::Delivery& d) { on_delivery(d); },
          [this](const std::string& e) { fatal_ = e; });
    }
    last_progress_ = Clock::now();
  }

  // Queues one event as the relay's Pipeline builds its record (headers id, type, then the
  // mapper's; the mapper's partition; its timestamp, else `commit_time_ms`); false when Kafka
  // made no progress for the timeout (or failed for good).
  bool send(const mapping::Event& ev, std::int64_t commit_time_ms) {
    if (!wait([&] {
          return in_flight_.size() < kMaxRepairInFlight &&
                 in_flight_bytes_ < kMaxRepairInFlightBytes;
        })) {
      return false;
    }
    const kafka::Record record = relay::event_record(ev, commit_time_ms, headers_).record;
    const std::string_view topic = ev.topic, id = ev.id;
    const std::size_t bytes = (ev.value ? ev.value->size() : 0) + (ev.key ? ev.key->size() : 0);
    const std::uint64_t opaque = next_opaque_++;
    for (;;) {
      const kafka::ProduceResult r = aws_     ? aws_->produce(record, opaque, false)
                                     : kafka_ ? kafka_->produce(record, opaque)
                                              : nats_->produce(record, opaque);
      switch (r.status) {
        case kafka::ProduceStatus::kQueued:
          if (in_flight_.empty()) last_progress_ = Clock::now();
          in_flight_.emplace(opaque, InFlight{std::string(id), bytes});
          in_flight_bytes_ += bytes;
          return true;
        case kafka::ProduceStatus::kQueueFull: {
          const std::size_t before = in_flight_.size();
          if (before == 0) {  // JetStream: the connection is not up yet; SQS: its attributes
            if (fatal_ || Clock::now() - last_progress_ >= timeout_) return false;
            if (io_.stopped()) io_.restart();
            io_.run_one_for(std::chrono::milliseconds(10));
            continue;
          }
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
    if (d.ok && aws_) {
      ++acknowledged_;
      out_ << "resent id=" << field_value(it->second.id) << " topic=" << d.topic << '\n';
    } else if (d.ok) {
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
  std::vector<kafka::Header> headers_;
  boost::asio::io_context io_{1};
  std::unordered_map<std::uint64_t, InFlight> in_flight_;
  std::size_t in_flight_bytes_ = 0;
  std::uint64_t next_opaque_ = 1;
  std::uint64_t acknowledged_ = 0;
  std::uint64_t failed_ = 0;
  std::optional<std::string> fatal_;
  Clock::time_point last_progress_ = Clock::now();
  // Last: destroyed first, while the handlers' state still lives. One of them.
  std::unique_ptr<kafka::Producer> kafka_;
  std::unique_ptr<nats::Publisher> nats_;
  std::unique_ptr<relay::RecordSink> aws_;
};

}  // namespace

namespace {

// "column C is NULL" as the relay words a mapping error (its dead letters, its exit 3 message).
std::string map_error_reason(const mapping::MapError& e) {
  return e.column.empty() ? e.reason : "column " + e.column + " " + e.reason;
}

void print_unmappable(std::ostream& out, const mapping::MapError& e, const std::string& table,
                      const std::optional<std::string>& time) {
  out << "unmappable id=" << field_value(e.id) << " aggregateid="
      << field_value(e.aggregateid ? std::optional<std::string>(*e.aggregateid) : std::nullopt)
      << " table=" << table << " time=" << field_value(time)
      << " reason=" << field_value(map_error_reason(e))
      << " (the relay stops on it with exit code 3 or dead-letters it; not repaired)\n";
}

}  // namespace

namespace {

using pg::kOrderedColumns;
using pg::kOrderedStampUs;
using pg::kOrderedTable;
using pg::kOrderedTime;

// One run of reconcile, step by step: the tables and the window, the window's ids (scan), what
// Kafka holds of them (read_kafka), what it lacks in commit order, repaired with --repair
// (list_missing), and the summary with the exit code.
class Reconciliation {
 public:
  Reconciliation(const ReconcileOptions& o, std::ostream& out, std::ostream& err)
      : o_(o), m_(o.mapper), out_(out), err_(err) {
    names_.emplace_back(m_.schema, m_.table);
    names_.insert(names_.end(), m_.more_tables.begin(), m_.more_tables.end());
    for (const auto& [schema, table] : names_) {
      table_names_ +=
          (table_names_.empty() ? "" : ",") + common::QualifiedName{schema, table}.text();
    }
  }

  int run() {
    const std::int64_t start_us = now_us();
    since_us_ = o_.since.resolve(start_us);
    const std::int64_t until_us = o_.until ? o_.until->resolve(start_us) : start_us;
    if (since_us_ >= until_us) {
      err_ << "outbox-relay reconcile: --until " << (o_.until ? o_.until->text : "(now)") << " ("
           << format_utc(until_us) << ") is not after --since " << o_.since.text << " ("
           << format_utc(since_us_) << ")\n";
      return 2;
    }
    window_ = {format_utc(since_us_), format_utc(until_us)};
    try {
      pg::AdminSession session(o_.conninfo);
      if (auto failed = open(session)) return *failed;
      // The relay's mapper, fed the rows as pgoutput would send them: the same topic, key, value,
      // headers, partition and timestamp column.
      mapping::Mapper mapper(m_);
      for (const ReconcileTable& t : tables_) mapper.on_relation(relation_of(t), true);
      err_ << "reconcile: table " << table_names_ << ", rows with " << o_.column_time << " in ["
           << window_[0] << ", " << window_[1] << ")"
           << (commit_timestamps_ ? ""
                                  : "; track_commit_timestamp is off: repaired records are "
                                    "stamped with the time column, not the commit time")
           << "\n";
      scan(session, mapper);
      if (nats()) {
        read_nats();
      } else if (o_.resend()) {
        err_ << "reconcile: " << broker()
             << " cannot be read back: nothing is compared, every row of the window is sent "
                "again (at-least-once)\n";
      } else {
        read_kafka();
      }
      list_missing(session, mapper);
      return summary();
    } catch (const kafka::ConfigError& e) {
      err_ << "outbox-relay reconcile: Kafka configuration (-X, --kafka-config): " << e.what()
           << '\n';
      return 2;
    } catch (const nats::ConfigError& e) {
      return fail("JetStream: " + std::string(e.what()));
    } catch (const pg::Error& e) {
      return fail(e.what());
    } catch (const std::runtime_error& e) {
      return fail(e.what());
    }
  }

 private:
  int fail(const std::string& message) {
    err_ << "outbox-relay reconcile: " << message << '\n';
    return 1;
  }

  // The tables as the catalog describes them and the window's statements; the exit code when
  // that failed.
  std::optional<int> open(pg::AdminSession& session) {
    // pgoutput sends bytea in hex whatever the server's default; the mapper decodes that.
    session.exec("SET bytea_output = hex");
    for (const auto& [schema, table] : names_) {
      try {
        tables_.push_back(pg::describe_table(session, schema, table));
      } catch (const pg::Error& e) {
        return fail("table " + common::QualifiedName{schema, table}.text() + ": " + e.what());
      }
    }
    commit_timestamps_ = session.setting("track_commit_timestamp") == "on";
    try {
      queries_ = reconcile_queries(o_, tables_, commit_timestamps_);
    } catch (const std::runtime_error& e) {
      return fail(e.what());
    }
    return std::nullopt;
  }

  // 1. The window's ids and the topics they route to.
  void scan(pg::AdminSession& session, mapping::Mapper& mapper) {
    const auto phase = Clock::now();
    for (std::size_t k = 0; k < tables_.size(); ++k) {
      const ReconcileTable& t = tables_[k];
      const std::string name = common::QualifiedName{t.schema, t.table}.text();
      pg::Cursor cursor(session, "scan " + name, queries_.scans[k], window_, kBatchRows);
      pg::Rows batch;
      while (cursor.fetch(batch)) {
        for (const pg::Row& row : batch) {
          if (++rows_ % kProgressEvery == 0) {
            err_ << "reconcile: scanned " << rows_ << " rows (" << rate(rows_, seconds_since(phase))
                 << " rows/s)\n";
          }
          const auto values = std::span<const std::optional<std::string>>(row).subspan(1);
          const mapping::MapResult mapped = mapper.map_insert(insert_of(t, values), 0);
          if (const auto* e = std::get_if<mapping::MapError>(&mapped)) {
            ++unmappable_;
            print_unmappable(out_, *e, name, row[0]);
            continue;
          }
          if (const auto* ev = std::get_if<mapping::Event>(&mapped)) {
            ids_.add(ev->id);
            ++rows_per_topic_[std::string(ev->topic)];
          }
        }
      }
      cursor.close();
    }
    ids_.seal();
    const double scan_seconds = seconds_since(phase);
    err_ << "reconcile: scanned " << rows_ << " rows in " << secs(scan_seconds) << " ("
         << rate(rows_, scan_seconds) << " rows/s); " << ids_.size() << " ids in "
         << ids_.memory_bytes() << " bytes; " << rows_per_topic_.size() << " topics\n";
    if (ids_.duplicates() > 0) {
      err_ << "reconcile: " << ids_.duplicates() << " rows repeat an id of another row\n";
    }
  }

  // 2. Kafka: every record of those topics from the window's start (less the margin) to the
  // end each partition has now.
  void read_kafka() {
    if (rows_per_topic_.empty()) return;
    std::uint64_t matched = 0, without_id = 0;
    kafka::Consumer consumer(kafka::ConsumerConfig{o_.brokers, o_.properties});
    // With --column-timestamp the records carry the column's time, which may be anything (an
    // event's business time, long past): only the topics' beginning is safe to read from.
    const std::int64_t from_ms =
        m_.column_timestamp.empty()
            ? std::max<std::int64_t>(0, since_us_ / 1000 - o_.margin.count())
            : 0;
    std::vector<kafka::PartitionRange> ranges;
    std::uint64_t planned = 0;
    for (const auto& [topic, count] : rows_per_topic_) {
      const kafka::TopicPlan plan = consumer.plan(topic, from_ms, o_.timeout);
      if (!plan.exists) {
        ++topics_absent_;
        err_ << "reconcile: topic " << topic << " does not exist: its " << count
             << " rows are missing\n";
        continue;
      }
      ++topics_read_;
      for (const auto& p : plan.partitions) {
        planned += static_cast<std::uint64_t>(std::max<std::int64_t>(0, p.end - p.start));
        ranges.push_back(p);
      }
    }
    err_ << "reconcile: reading " << topics_read_ << " topics (" << ranges.size()
         << " partitions, up to " << planned << " records) from records stamped at or after "
         << format_utc(from_ms * 1000) << "\n";
    const auto phase = Clock::now();
    records_ = consumer.read(
        ranges,
        [&](const kafka::ConsumedRecord& r) {
          if (!r.id_header) {
            ++without_id;
          } else if (ids_.mark_seen(*r.id_header)) {
            ++matched;
          }
          if (++records_ % kProgressEvery == 0) {
            err_ << "reconcile: read " << records_ << " of up to " << planned << " records ("
                 << rate(records_, seconds_since(phase)) << " records/s)\n";
          }
        },
        o_.timeout);
    const double read_seconds = seconds_since(phase);
    err_ << "reconcile: read " << records_ << " records in " << secs(read_seconds) << " ("
         << rate(records_, read_seconds) << " records/s); " << matched
         << " carry an id of the window";
    if (without_id > 0) err_ << ", " << without_id << " have no id header";
    err_ << "\n";
  }

  bool nats() const { return !o_.nats.urls.empty(); }
  const char* broker() const {
    if (!o_.sqs.queue_url.empty()) return "SQS";
    if (!o_.eventbridge.bus.empty()) return "EventBridge";
    return nats() ? "JetStream" : "Kafka";
  }

  // 2, with JetStream: the messages stored on each subject from the window's start less the
  // margin (JetStream's storage time: the publisher sets no time of its own), headers only.
  void read_nats() {
    if (rows_per_topic_.empty()) return;
    std::uint64_t matched = 0, without_id = 0;
    const std::int64_t from_ms = std::max<std::int64_t>(0, since_us_ / 1000 - o_.margin.count());
    nats::StreamClient client(o_.nats, o_.timeout);
    err_ << "reconcile: reading the JetStream messages of " << rows_per_topic_.size()
         << " subjects stored at or after " << format_utc(from_ms * 1000) << "\n";
    const auto phase = Clock::now();
    for (const auto& [subject, count] : rows_per_topic_) {
      const nats::SubjectIds got = client.read_ids(
          subject, from_ms * 1'000'000,
          [&](std::string_view id) {
            if (ids_.mark_seen(id)) ++matched;
          },
          o_.timeout);
      if (got.stream.empty()) {
        ++topics_absent_;
        err_ << "reconcile: no JetStream stream captures subject " << subject << ": its " << count
             << " rows are missing\n";
        continue;
      }
      ++topics_read_;
      records_ += got.messages;
      without_id += got.without_id;
    }
    const double read_seconds = seconds_since(phase);
    err_ << "reconcile: read " << records_ << " messages in " << secs(read_seconds) << " ("
         << rate(records_, read_seconds) << " messages/s); " << matched
         << " carry an id of the window";
    if (without_id > 0) err_ << ", " << without_id << " have no id header";
    err_ << "\n";
  }

  // 3. What Kafka (or JetStream) lacks, in commit order; with --repair, published in that order.
  void list_missing(pg::AdminSession& session, mapping::Mapper& mapper) {
    missing_ = ids_.missing();
    if (missing_ == 0) return;
    if (o_.repair) repairer_.emplace(o_, out_);
    std::vector<std::size_t> id_column;  // per table, for a look-up before mapping
    for (const ReconcileTable& t : tables_) {
      id_column.push_back(static_cast<std::size_t>(
          std::find(t.columns.begin(), t.columns.end(), m_.column_id) - t.columns.begin()));
    }
    const auto phase = Clock::now();
    pg::Cursor cursor(session, "scan " + table_names_ + " in commit order", queries_.ordered,
                      window_, kBatchRows);
    pg::Rows batch;
    std::uint64_t scanned = 0;
    while (!stalled_ && cursor.fetch(batch)) {
      for (const pg::Row& row : batch) {
        if (++scanned % kProgressEvery == 0) {
          err_ << "reconcile: listing missing rows: scanned " << scanned << " rows, " << listed_
               << " of " << missing_ << " missing found\n";
        }
        const std::size_t k = std::stoul(row[kOrderedTable].value_or("0"));
        if (k >= tables_.size()) throw std::runtime_error("reconcile: bad table index");
        const ReconcileTable& t = tables_[k];
        const auto values = std::span<const std::optional<std::string>>(row).subspan(
            kOrderedColumns, t.columns.size());
        const auto& raw_id = values[id_column[k]];
        if (!raw_id || !ids_.is_missing(*raw_id)) continue;
        std::int64_t stamp_us = 0;
        const std::string& text = row[kOrderedStampUs].value_or("0");
        std::from_chars(text.data(), text.data() + text.size(), stamp_us);
        const mapping::MapResult mapped = mapper.map_insert(insert_of(t, values), stamp_us);
        const auto* ev = std::get_if<mapping::Event>(&mapped);
        if (!ev || !ids_.is_missing(ev->id)) {
          // Changed since the first scan (counted below as having left the table).
          if (const auto* e = std::get_if<mapping::MapError>(&mapped)) {
            ++unmappable_;
            print_unmappable(out_, *e, common::QualifiedName{t.schema, t.table}.text(),
                             row[kOrderedTime]);
          }
          continue;
        }
        ++listed_;
        ids_.mark_seen(ev->id);  // list a repeated id once
        out_ << (o_.resend() ? "resend id=" : "missing id=") << field_value(std::string(ev->id))
             << " aggregateid="
             << field_value(ev->key ? std::optional<std::string>(*ev->key) : std::nullopt)
             << " topic=" << ev->topic << " time=" << field_value(row[kOrderedTime]);
        if (tables_.size() > 1)
          out_ << " table=" << common::QualifiedName{t.schema, t.table}.text();
        out_ << '\n';
        if (!repairer_) continue;
        if (!repairer_->send(*ev, stamp_us / 1000)) {
          stalled_ = true;
          break;
        }
      }
    }
    if (!stalled_) cursor.close();
    if (repairer_ && !stalled_) stalled_ = !repairer_->finish();
    err_ << "reconcile: listed " << listed_ << " missing rows in " << secs(seconds_since(phase))
         << "\n";
    if (listed_ < missing_ && !stalled_) {
      err_ << "reconcile: " << missing_ - listed_
           << " missing rows left the table (or their columns changed) between the scans\n";
    }
  }

  // The summary line, and the exit code.
  int summary() {
    out_ << "summary table=" << table_names_ << " since=" << window_[0] << " until=" << window_[1]
         << " rows_scanned=" << rows_;
    if (o_.resend()) {
      // Nothing read back: every id of the window counts as missing, and is sent again.
      out_ << " destination=" << broker() << " compared=0 unmappable=" << unmappable_;
    } else {
      out_ << " topics_read=" << topics_read_;
      if (topics_absent_ > 0) out_ << " topics_absent=" << topics_absent_;
      out_ << " records_read=" << records_ << " missing=" << missing_
           << " unmappable=" << unmappable_;
    }
    if (o_.resend()) {
      // Every id of the window sent again: resent counts the acknowledged ones.
      out_ << " resent=" << (repairer_ ? repairer_->acknowledged() : 0)
           << " failed=" << (repairer_ ? repairer_->failed() : 0);
      if (repairer_ && repairer_->in_flight() > 0) {
        out_ << " unacknowledged=" << repairer_->in_flight();
      }
    } else if (repairer_) {
      out_ << " repaired=" << repairer_->acknowledged() << " failed=" << repairer_->failed();
      if (repairer_->in_flight() > 0) out_ << " unacknowledged=" << repairer_->in_flight();
    }
    out_ << '\n';
    out_.flush();
    if (repairer_ && repairer_->fatal()) {
      return fail(std::string(broker()) + (nats() || o_.resend() ? " publisher" : " producer") +
                  " failed: " + *repairer_->fatal() +
                  (o_.resend() ? "; run reconcile again to send the window again"
                               : "; run reconcile again to see what is still missing"));
    }
    if (stalled_) {
      return fail(std::string("no acknowledgement from ") + broker() + " for " +
                  std::to_string(o_.timeout.count()) + " ms; " +
                  std::to_string(repairer_ ? repairer_->in_flight() : 0) +
                  " events were in flight and may still arrive: run reconcile again");
    }
    if (unmappable_ > 0) return 1;
    if (!o_.repair) return missing_ > 0 ? 1 : 0;
    return repairer_ && (repairer_->failed() > 0 || repairer_->acknowledged() < listed_) ? 1 : 0;
  }

  const ReconcileOptions& o_;
  const mapping::MapperConfig& m_;
  std::ostream& out_;
  std::ostream& err_;
  std::vector<std::pair<std::string, std::string>> names_;
  std::string table_names_;  // "schema.table,..." for messages
  std::int64_t since_us_ = 0;
  std::vector<std::string> window_;  // the bounds as timestamptz text: $1, $2 of the scans
  std::vector<ReconcileTable> tables_;
  bool commit_timestamps_ = false;
  ReconcileQueries queries_;
  EventIdSet ids_;
  std::map<std::string, std::uint64_t> rows_per_topic_;
  std::uint64_t rows_ = 0, unmappable_ = 0, records_ = 0;
  std::size_t topics_read_ = 0, topics_absent_ = 0;
  std::size_t missing_ = 0;
  std::uint64_t listed_ = 0;
  std::optional<Repairer> repairer_;  // with --repair, once something is missing
  bool stalled_ = false;
};

}  // namespace

int run_reconcile(const ReconcileOptions& o, std::ostream& out, std::ostream& err) {
  return Reconciliation(o, out, err).run();
}

}  // namespace outbox::lifecycle
