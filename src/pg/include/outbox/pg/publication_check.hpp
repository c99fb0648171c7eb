// Does the publication let the relay see every insert into the outbox table? pgoutput sends only
// what the publication publishes; an insert it hides never shows in the stream, so the relay
// would confirm the slot past it. This is checked before streaming and again while streaming.
//
// The catalog query is built here and run by the caller on any connection (the relay's
// asynchronous one, or the blocking AdminSession of the CLI commands); assess_publication() reads
// its rows. Pure: no I/O. Thread-safe as plain values are.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "outbox/pg/replication_connection.hpp"  // Rows

namespace outbox::pg {

struct PublicationTarget {
  std::string publication;
  std::string schema;
  std::string table;  // empty: no table (a relay of logical messages only)
  // Further tables (schema, table) the publication is created for. The check looks at one
  // table: check each with a target of its own.
  std::vector<std::pair<std::string, std::string>> more_tables = {};
  // --messages: also check that PUBLIC cannot execute pg_logical_emit_message (any overload):
  // pgoutput sends every message of the database whoever wrote it, so an ordinary login could
  // otherwise publish forged events.
  bool messages = false;
};

// What the catalog says about the publication and the outbox table, now.
struct PublicationCheck {
  // Empty when every insert into the table, or into any of its partitions, is published. Else
  // one line naming the publication, the table, what is missing and how to fix it.
  std::string problem;
  // Changes whenever the publication's settings, or its membership rows for the table, its
  // partitions or their schemas, are written, even when written back to the same values: two
  // checks with the same fingerprint saw no change to what the publication hides in between.
  std::string fingerprint;
  bool partitioned = false;
  std::uint32_t table_relid = 0;
  // The table and all its partitions (every level), as of the check.
  std::vector<std::uint32_t> tree_relids;
  // Those under whose relid pgoutput sends the table's inserts: the table itself
  // (publish_via_partition_root, or not partitioned) or its published partitions.
  std::vector<std::uint32_t> published_relids;
  // With `messages`: the pg_logical_emit_message overloads PUBLIC may execute (their
  // signatures), empty when none.
  std::vector<std::string> public_emit;

  bool ok() const { return problem.empty(); }
};

using QuoteFn = std::function<std::string(const std::string&)>;

// One statement returning the rows assess_publication() reads. quote_literal makes a SQL string
// literal of a value.
std::string publication_check_sql(const PublicationTarget& target, const QuoteFn& quote_literal);

// CREATE PUBLICATION for the table (and the more_tables): inserts only, and partitions published
// under the table's own name (publish_via_partition_root), so a partitioned outbox needs no mapping
// of partitions.
std::string create_publication_sql(const PublicationTarget& target,
                                   const QuoteFn& quote_identifier);

// The statements that take EXECUTE on every pg_logical_emit_message overload (`signatures`, as
// regprocedure prints them) from PUBLIC and give it to `writers` (quoted role names), as
// `setup --messages` runs them; a superuser may run them by hand.
std::vector<std::string> restrict_emit_sql(const std::vector<std::string>& signatures,
                                           const std::vector<std::string>& quoted_writers);

// Reads the rows of publication_check_sql(). Throws std::runtime_error on rows of a shape it
// does not know (a broken invariant, not a configuration problem).
PublicationCheck assess_publication(const PublicationTarget& target, const Rows& rows);

}  // namespace outbox::pg
