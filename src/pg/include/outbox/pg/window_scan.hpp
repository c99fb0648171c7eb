// SQL of `outbox-relay reconcile`: what the catalog says of an outbox table (its columns as
// pgoutput's Relation message would list them) and the scans of a time window of its rows. The
// statement builders are pure (for tests); describe_table() blocks on an AdminSession.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/pg/admin.hpp"

namespace outbox::pg {

// `name` as a quoted SQL identifier ("a""b"), as PQescapeIdentifier quotes it, without a
// connection: for statements built before (or without) one.
std::string quote_ident(std::string_view name);

// One table as the catalog describes it: what pgoutput's Relation message would say.
struct CatalogTable {
  std::string schema;
  std::string table;
  std::uint32_t relid = 0;
  std::vector<std::string> columns;  // attnum order, dropped columns left out
  std::vector<std::uint32_t> type_oids;
};

// The table's relid and columns from pg_attribute. Throws Error (e.g. no such table).
CatalogTable describe_table(AdminSession& session, const std::string& schema,
                            const std::string& table);

// The scans of the rows whose `time_column` is in [$1, $2) (timestamptz bounds). Columns come back
// in text form, each type's output function as pgoutput uses it (not a cast to text, which
// differs for boolean and inet), with bytea in hex (the session sets bytea_output).
struct WindowQueries {
  // One per table, unordered: the time column as text, then every column of the table.
  std::vector<std::string> scans;
  // Every table's rows in commit order (see the .cpp): table index, commit time, time, age,
  // ctid (the sort keys), the record time in microseconds (the commit time with
  // track_commit_timestamp, else the time column), the time column as text, then the table's
  // columns (format('%s'), the output function; padded with NULLs to the widest table).
  std::string ordered;
};
inline constexpr std::size_t kOrderedTable = 0, kOrderedStampUs = 5, kOrderedTime = 6,
                             kOrderedColumns = 7;
WindowQueries window_queries(const std::vector<CatalogTable>& tables,
                             const std::string& time_column, bool commit_timestamps);

}  // namespace outbox::pg
