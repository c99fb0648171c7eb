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
#include <variant>

#include "outbox/kafka/consumer.hpp"
#include "outbox/kafka/producer.hpp"
#include "outbox/mapping/mapper.hpp"
#include "outbox/mapping/topic_template.hpp"
#include "outbox/pg/admin.hpp"
#include "outbox/pg/cursor.hpp"

namespace outbox::app {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kBatchRows = 500;  // rows carry their payloads (the mapper reads them)
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

// Commit order, as far as PostgreSQL can tell after the fact:
// - with track_commit_timestamp on, the commit time of the inserting transaction (exact between
//   transactions; rows committed before it was turned on have none and come first);
// - then the time column (within a transaction, clock_timestamp() defaults tell insert order;
//   without commit timestamps this is the main key: for one aggregate, whose writers are
//   serialised by a lock on the aggregate, a later writer's time is the later one when the column
//   is filled at insert time);
// - then the inserting transaction's age, oldest first (age(xmin), which survives xid wraparound);
// - then the table (in --table order) and the row's physical position (ctid): insert order
//   within one transaction as long as the table had no free space to reuse, the usual case for
//   an insert-only table.
ReconcileQueries reconcile_queries(const ReconcileOptions& o,
                                   const std::vector<ReconcileTable>& tables,
                                   bool commit_timestamps) {
  const auto& m = o.mapper;
  const mapping::TopicTemplate tmpl(m.topic_template);
  std::size_t widest = 0;
  for (const auto& t : tables) widest = std::max(widest, t.columns.size());
  ReconcileQueries q;
  std::string branches;
  for (std::size_t k = 0; k < tables.size(); ++k) {
    const ReconcileTable& t = tables[k];
    const std::string name = quote_ident(t.schema) + "." + quote_ident(t.table);
    auto has = [&](const std::string& c) {
      return std::find(t.columns.begin(), t.columns.end(), c) != t.columns.end();
    };
    auto required = [&](const std::string& c, const std::string& role) {
      if (!has(c)) {
        throw std::runtime_error("table " + t.schema + "." + t.table + " has no column " + c +
                                 " (" + role + ")");
      }
    };
    required(m.column_id, "--column-id");
    required(m.column_payload, "--column-payload");
    required(o.column_time, "--column-time");
    for (const auto& c : tmpl.columns()) required(c, "referenced by the topic template");
    const std::string time = "t." + quote_ident(o.column_time);
    const std::string from = " FROM " + name + " AS t WHERE " + time + " >= $1::timestamptz AND " +
                             time + " < $2::timestamptz";
    std::string raw, formatted;
    for (std::size_t i = 0; i < widest; ++i) {
      if (i >= t.columns.size()) {
        formatted += ", NULL::text";
        continue;
      }
      const std::string c = "t." + quote_ident(t.columns[i]);
      raw += ", " + c;
      formatted +=
          ", CASE WHEN " + c + " IS NULL THEN NULL ELSE pg_catalog.format('%s', " + c + ") END";
    }
    q.scans.push_back("SELECT " + time + "::text" + raw + from);
    const std::string commit_ts =
        commit_timestamps ? "pg_catalog.pg_xact_commit_timestamp(t.xmin)" : "NULL::timestamptz";
    if (k > 0) branches += " UNION ALL ";
    branches += "SELECT " + std::to_string(k) + " AS tbl, " + commit_ts + " AS commit_at, " + time +
                "::timestamptz AS at, pg_catalog.age(t.xmin) AS age, t.ctid AS pos, " +
                "(extract(epoch FROM COALESCE(" + commit_ts + ", " + time +
                "::timestamptz)) * 1000000)::bigint AS stamp_us, " + time + "::text AS time_text" +
                formatted + from;
  }
  q.ordered = "SELECT * FROM (" + branches + ") AS r ORDER BY " +
              (commit_timestamps ? "r.commit_at NULLS FIRST, " : "") +
              "r.at, r.age DESC, r.tbl, r.pos";
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
    headers_.clear();
    headers_.push_back({"id", ev.id});
    if (ev.type) headers_.push_back({"type", *ev.type});
    for (const mapping::ExtraHeader& h : ev.headers) headers_.push_back({h.name, h.value});
    const std::string_view topic = ev.topic, id = ev.id;
    const kafka::Record record{ev.topic,
                               ev.key,
                               ev.value,
                               std::span<const kafka::Header>(headers_.data(), headers_.size()),
                               ev.timestamp_ms.value_or(commit_time_ms),
                               ev.partition.value_or(-1)};
    const std::size_t bytes = (ev.value ? ev.value->size() : 0) + (ev.key ? ev.key->size() : 0);
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
  std::vector<kafka::Header> headers_;
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

int run_reconcile(const ReconcileOptions& o, std::ostream& out, std::ostream& err) {
  const auto& m = o.mapper;
  std::vector<std::pair<std::string, std::string>> names{{m.schema, m.table}};
  names.insert(names.end(), m.more_tables.begin(), m.more_tables.end());
  std::string table_names;
  for (const auto& [schema, table] : names) {
    table_names += (table_names.empty() ? "" : ",") + schema + "." + table;
  }
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
  const auto fail = [&](const std::string& message) {
    err << "outbox-relay reconcile: " << message << '\n';
    return 1;
  };

  try {
    pg::AdminSession session(o.conninfo);
    // pgoutput sends bytea in hex whatever the server's default; the mapper decodes that.
    session.exec("SET bytea_output = hex");
    std::vector<ReconcileTable> tables;
    for (const auto& [schema, table] : names) {
      ReconcileTable t{schema, table, 0, {}, {}};
      try {
        for (auto& row : session.exec(
                 "SELECT a.attrelid::oid::text, a.attname, a.atttypid::oid::text FROM "
                 "pg_catalog.pg_attribute AS a WHERE a.attrelid = $1::regclass AND a.attnum > 0 "
                 "AND NOT a.attisdropped ORDER BY a.attnum",
                 {quote_ident(schema) + "." + quote_ident(table)})) {
          t.relid = static_cast<std::uint32_t>(std::stoul(row[0].value_or("0")));
          t.columns.push_back(row[1].value_or(""));
          t.type_oids.push_back(static_cast<std::uint32_t>(std::stoul(row[2].value_or("0"))));
        }
      } catch (const pg::Error& e) {
        return fail("table " + schema + "." + table + ": " + e.what());
      }
      tables.push_back(std::move(t));
    }
    const bool commit_timestamps = session.setting("track_commit_timestamp") == "on";
    ReconcileQueries queries;
    try {
      queries = reconcile_queries(o, tables, commit_timestamps);
    } catch (const std::runtime_error& e) {
      return fail(e.what());
    }
    // The relay's mapper, fed the rows as pgoutput would send them: the same topic, key, value,
    // headers, partition and timestamp column.
    mapping::Mapper mapper(m);
    for (const ReconcileTable& t : tables) mapper.on_relation(relation_of(t), true);
    err << "reconcile: table " << table_names << ", rows with " << o.column_time << " in ["
        << window[0] << ", " << window[1] << ")"
        << (commit_timestamps ? ""
                              : "; track_commit_timestamp is off: repaired records are "
                                "stamped with the time column, not the commit time")
        << "\n";

    // 1. The window's ids and the topics they route to.
    EventIdSet ids;
    std::map<std::string, std::uint64_t> rows_per_topic;
    std::uint64_t rows = 0, unmappable = 0;
    auto phase = Clock::now();
    for (std::size_t k = 0; k < tables.size(); ++k) {
      const ReconcileTable& t = tables[k];
      const std::string name = t.schema + "." + t.table;
      pg::Cursor cursor(session, "scan " + name, queries.scans[k], window, kBatchRows);
      pg::Rows batch;
      while (cursor.fetch(batch)) {
        for (const pg::Row& row : batch) {
          if (++rows % kProgressEvery == 0) {
            err << "reconcile: scanned " << rows << " rows (" << rate(rows, seconds_since(phase))
                << " rows/s)\n";
          }
          const auto values = std::span<const std::optional<std::string>>(row).subspan(1);
          const mapping::MapResult mapped = mapper.map_insert(insert_of(t, values), 0);
          if (const auto* e = std::get_if<mapping::MapError>(&mapped)) {
            ++unmappable;
            print_unmappable(out, *e, name, row[0]);
            continue;
          }
          if (const auto* ev = std::get_if<mapping::Event>(&mapped)) {
            ids.add(ev->id);
            ++rows_per_topic[std::string(ev->topic)];
          }
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
      // With --column-timestamp the records carry the column's time, which may be anything (an
      // event's business time, long past): only the topics' beginning is safe to read from.
      const std::int64_t from_ms =
          m.column_timestamp.empty() ? std::max<std::int64_t>(0, since_us / 1000 - o.margin.count())
                                     : 0;
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
      std::vector<std::size_t> id_column;  // per table, for a look-up before mapping
      for (const ReconcileTable& t : tables) {
        id_column.push_back(static_cast<std::size_t>(
            std::find(t.columns.begin(), t.columns.end(), m.column_id) - t.columns.begin()));
      }
      phase = Clock::now();
      pg::Cursor cursor(session, "scan " + table_names + " in commit order", queries.ordered,
                        window, kBatchRows);
      pg::Rows batch;
      std::uint64_t scanned = 0;
      while (!stalled && cursor.fetch(batch)) {
        for (const pg::Row& row : batch) {
          if (++scanned % kProgressEvery == 0) {
            err << "reconcile: listing missing rows: scanned " << scanned << " rows, " << listed
                << " of " << missing << " missing found\n";
          }
          const std::size_t k = std::stoul(row[kOrderedTable].value_or("0"));
          if (k >= tables.size()) throw std::runtime_error("reconcile: bad table index");
          const ReconcileTable& t = tables[k];
          const auto values = std::span<const std::optional<std::string>>(row).subspan(
              kOrderedColumns, t.columns.size());
          const auto& raw_id = values[id_column[k]];
          if (!raw_id || !ids.is_missing(*raw_id)) continue;
          std::int64_t stamp_us = 0;
          const std::string& text = row[kOrderedStampUs].value_or("0");
          std::from_chars(text.data(), text.data() + text.size(), stamp_us);
          const mapping::MapResult mapped = mapper.map_insert(insert_of(t, values), stamp_us);
          const auto* ev = std::get_if<mapping::Event>(&mapped);
          if (!ev || !ids.is_missing(ev->id)) {
            // Changed since the first scan (counted below as having left the table).
            if (const auto* e = std::get_if<mapping::MapError>(&mapped)) {
              ++unmappable;
              print_unmappable(out, *e, t.schema + "." + t.table, row[kOrderedTime]);
            }
            continue;
          }
          ++listed;
          ids.mark_seen(ev->id);  // list a repeated id once
          out << "missing id=" << field_value(std::string(ev->id)) << " aggregateid="
              << field_value(ev->key ? std::optional<std::string>(*ev->key) : std::nullopt)
              << " topic=" << ev->topic << " time=" << field_value(row[kOrderedTime]);
          if (tables.size() > 1) out << " table=" << t.schema << "." << t.table;
          out << '\n';
          if (!repairer) continue;
          if (!repairer->send(*ev, stamp_us / 1000)) {
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

    out << "summary table=" << table_names << " since=" << window[0] << " until=" << window[1]
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
