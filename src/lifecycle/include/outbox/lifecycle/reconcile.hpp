// `outbox-relay reconcile`: the last safety net. Lists the outbox rows of a time window that Kafka
// lacks (matched by the "id" header), and with --repair publishes them with the relay's record
// shape. One-shot and blocking (pg::AdminSession, pg::Cursor, kafka::Consumer, and a
// kafka::Producer on a private io_context); report on `out`, progress and errors on `err`.
// With ReconcileOptions::nats (run --nats's gap repair), JetStream instead: nats::StreamClient
// reads the ids stored on each subject, a nats::Publisher publishes the repair.
//
// Memory: the window's ids (EventIdSet: 16 bytes per UUID id, the text for any other id; up to
// three times that for a moment while the table scan grows its vector), one batch of rows, one
// counter per topic, librdkafka's consumer prefetch (kafka::Consumer: 8 partitions x 8 MiB) and,
// with --repair, at most 10,000 records or 16 MiB in the producer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/lifecycle/options.hpp"
#include "outbox/pg/window_scan.hpp"
#include "outbox/pgoutput/messages.hpp"

namespace outbox::lifecycle {

int run_reconcile(const ReconcileOptions& options, std::ostream& out, std::ostream& err);

// The event ids of a window, compact: an id in PostgreSQL's uuid text form (lower-case
// 8-4-4-4-12 hex) is kept as 16 bytes, any other id as its text; matching stays exact on the text.
// add() while scanning the table, then seal(), then mark_seen() while reading Kafka.
// Not thread-safe.
class EventIdSet {
 public:
  void add(std::string_view id);
  // Sorts and drops duplicate ids (counted); add() may not be called afterwards.
  void seal();
  // Marks `id` as present in Kafka; false when it is not an id of the window.
  bool mark_seen(std::string_view id);
  bool contains(std::string_view id) const;
  // An id of the window not seen in Kafka.
  bool is_missing(std::string_view id) const;

  std::size_t size() const { return uuids_.size() + texts_.size(); }
  std::size_t missing() const;
  std::size_t duplicates() const { return duplicates_; }
  std::size_t memory_bytes() const;

 private:
  using Uuid = std::array<unsigned char, 16>;
  static std::optional<Uuid> parse_uuid(std::string_view text);
  // Index into uuids_ or texts_ (with an offset of uuids_.size()), or nullopt.
  std::optional<std::size_t> find(std::string_view id) const;

  std::vector<Uuid> uuids_;
  std::vector<std::string> texts_;
  std::vector<bool> seen_;  // uuids_ then texts_
  std::size_t duplicates_ = 0;
  bool sealed_ = false;
};

// The ids of `window` (in its order, each once) that are not in `seen`: the matching rule of
// reconcile in one pure call.
std::vector<std::string> missing_ids(const std::vector<std::string>& window,
                                     const std::vector<std::string>& seen);

// One outbox table as the catalog describes it (pg::describe_table), and the scans of the window
// (pg::window_queries; the column numbers of `ordered`: pg::kOrdered*).
using ReconcileTable = pg::CatalogTable;
using ReconcileQueries = pg::WindowQueries;

// The relation as pgoutput announces it; views into `table`, which must outlive it.
pgoutput::Relation relation_of(const ReconcileTable& table);

// The Insert pgoutput would send for a row whose columns, in `table`'s order, are `values`
// (PostgreSQL's text output of each; NULL as nullopt). Views into `values`.
pgoutput::Insert insert_of(const ReconcileTable& table,
                           std::span<const std::optional<std::string>> values);

// The scans of the window (pg::window_queries) over the time column, after checking that every
// table has the columns the mapping needs. Throws std::runtime_error naming a table and a
// required column it lacks (id, payload, the time column, the topic template's). Pure.
ReconcileQueries reconcile_queries(const ReconcileOptions& options,
                                   const std::vector<ReconcileTable>& tables,
                                   bool commit_timestamps);

// `value` as a field of a key=value line: bare when it has no space, quote, backslash or '=';
// else in double quotes with '"' and '\' escaped. NULL is printed as NULL.
std::string field_value(const std::optional<std::string>& value);

}  // namespace outbox::lifecycle
