#include "outbox/lifecycle/backlog.hpp"

#include <cstdio>
#include <ctime>
#include <sstream>
#include <type_traits>
#include <variant>

#include "outbox/common/log_text.hpp"  // quoted: a JSON string literal
#include "outbox/pgoutput/decoder.hpp"

namespace outbox::lifecycle {
namespace {

void row(std::ostream& out, std::string_view name, const std::string& value) {
  out << name;
  for (std::size_t i = name.size(); i < 22; ++i) out << ' ';
  out << value << '\n';
}

std::string count_text(const BacklogStatus& b, std::uint64_t n) {
  return (b.stopped_at_limit ? ">= " : "") + std::to_string(n);
}

}  // namespace

BacklogCounter::BacklogCounter(std::set<std::uint32_t> outbox_relids, std::string schema,
                               std::string table)
    : outbox_relids_(std::move(outbox_relids)),
      schema_(std::move(schema)),
      table_(std::move(table)) {}

void BacklogCounter::add(std::span<const std::byte> bytes, pgoutput::Lsn lsn) {
  ++count_.changes_scanned;
  pgoutput::DecodeResult decoded = pgoutput::decode(bytes);
  if (const auto* e = std::get_if<pgoutput::DecodeError>(&decoded)) {
    throw BacklogDecodeError("undecodable pgoutput message at LSN " + lsn.to_string() +
                             ", offset " + std::to_string(e->offset) + ": " + e->reason);
  }
  auto& message = std::get<pgoutput::Message>(decoded);
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, pgoutput::Begin>) {
          in_transaction_ = true;
          begin_time_ = m.commit_time;
          begin_lsn_ = m.final_lsn;
          transaction_events_ = 0;
        } else if constexpr (std::is_same_v<T, pgoutput::Relation>) {
          // The newest Relation message for a relid wins (a rename may change it).
          if (m.nspname == schema_ && m.relname == table_) {
            named_outbox_.insert(m.relid);
          } else {
            named_outbox_.erase(m.relid);
          }
        } else if constexpr (std::is_same_v<T, pgoutput::Insert>) {
          if (!in_transaction_) {
            throw BacklogDecodeError("Insert outside a transaction at LSN " + lsn.to_string());
          }
          if (outbox_relids_.contains(m.relid) || named_outbox_.contains(m.relid)) {
            ++transaction_events_;
          }
        } else if constexpr (std::is_same_v<T, pgoutput::Commit>) {
          if (!in_transaction_) {
            throw BacklogDecodeError("Commit without Begin at LSN " + lsn.to_string());
          }
          in_transaction_ = false;
          if (transaction_events_ > 0) {
            count_.pending_events += transaction_events_;
            ++count_.pending_transactions;
            // The first in commit order: the next one the relay delivers. (A transaction applied
            // under a replication origin carries the origin's commit time, which may be older
            // than that of transactions before it: it is not the one waiting longest here.)
            if (!count_.oldest_commit_time) {
              count_.oldest_commit_time = begin_time_;
              count_.oldest_commit_lsn = begin_lsn_;
            }
          }
        }
        // Origin, Type, Update, Delete, Truncate, logical messages: not outbox events.
      },
      message);
}

BacklogCount count_backlog(const std::vector<std::vector<std::byte>>& messages,
                           const std::set<std::uint32_t>& outbox_relids, const std::string& schema,
                           const std::string& table) {
  BacklogCounter counter(outbox_relids, schema, table);
  for (const auto& m : messages) counter.add(m, pgoutput::Lsn{});
  return counter.count();
}

std::optional<double> oldest_age_seconds(const BacklogStatus& b) {
  if (!b.count || !b.count->oldest_commit_time) return std::nullopt;
  const double age = static_cast<double>(b.server_now - *b.count->oldest_commit_time) / 1e6;
  return age < 0 ? 0.0 : age;
}

std::vector<std::string> backlog_problems(const BacklogStatus& b) {
  std::vector<std::string> problems;
  if (!b.count) {
    if (!b.slot_missing && (b.max_pending || b.max_age)) {
      problems.push_back("pending events not counted: " + b.error);
    }
    return problems;
  }
  const BacklogCount& c = *b.count;
  if (b.max_pending) {
    if (c.pending_events > *b.max_pending) {
      problems.push_back(count_text(b, c.pending_events) + " pending events exceed --max-pending " +
                         std::to_string(*b.max_pending));
    } else if (b.stopped_at_limit) {
      problems.push_back("cannot check --max-pending " + std::to_string(*b.max_pending) +
                         ": the scan stopped at --scan-limit " + std::to_string(b.scan_limit) +
                         " changes with " + std::to_string(c.pending_events) +
                         " pending events counted (raise --scan-limit)");
    }
  }
  if (b.max_age) {
    // The scan reads in commit order from the slot's position: the oldest is exact even when the
    // scan stopped at the bound.
    if (auto age = oldest_age_seconds(b);
        age && *age * 1000.0 > static_cast<double>(b.max_age->count())) {
      problems.push_back("oldest pending event committed " + human_duration(*age) +
                         " ago exceeds --max-age " +
                         human_duration(static_cast<double>(b.max_age->count()) / 1000.0));
    }
  }
  return problems;
}

std::string format_backlog_text(const BacklogStatus& b) {
  std::ostringstream out;
  if (!b.count) {
    row(out, "pending_events", "unknown (" + b.error + ")");
    return out.str();
  }
  const BacklogCount& c = *b.count;
  std::string pending = count_text(b, c.pending_events) + " (in " +
                        count_text(b, c.pending_transactions) + " transactions; scanned " +
                        std::to_string(c.changes_scanned) + " changes";
  if (b.scanned_upto) pending += " up to " + b.scanned_upto->to_string();
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f", b.scan_seconds);
  pending += " in " + std::string(seconds) + " s)";
  row(out, "pending_events", pending);
  if (b.stopped_at_limit) {
    row(out, "scan",
        "stopped at --scan-limit " + std::to_string(b.scan_limit) +
            " changes: counts are lower bounds");
  }
  if (c.oldest_commit_time) {
    row(out, "oldest_pending",
        format_pg_timestamp(*c.oldest_commit_time) + " (age " +
            human_duration(oldest_age_seconds(b).value_or(0)) + ", commit LSN " +
            (c.oldest_commit_lsn ? c.oldest_commit_lsn->to_string() : "-") + ")");
  } else {
    row(out, "oldest_pending", "-");
  }
  return out.str();
}

std::string format_backlog_json_fields(const BacklogStatus& b) {
  std::string o;
  if (!b.count) {
    o += ",\"pending_events\":null,\"backlog_error\":" + common::quoted(b.error);
  } else {
    const BacklogCount& c = *b.count;
    o += ",\"pending_events\":" + std::to_string(c.pending_events);
    o += ",\"pending_transactions\":" + std::to_string(c.pending_transactions);
    o += std::string(",\"pending_lower_bound\":") + (b.stopped_at_limit ? "true" : "false");
    o += ",\"oldest_pending_commit_time\":" +
         (c.oldest_commit_time ? common::quoted(format_pg_timestamp(*c.oldest_commit_time))
                               : "null");
    o +=
        ",\"oldest_pending_commit_unix_us\":" +
        (c.oldest_commit_time ? std::to_string(*c.oldest_commit_time + pgoutput::kPgEpochUnixMicros)
                              : "null");
    char age[32] = "null";
    if (auto a = oldest_age_seconds(b)) std::snprintf(age, sizeof age, "%.3f", *a);
    o += ",\"oldest_pending_age_seconds\":" + std::string(age);
    o += ",\"oldest_pending_commit_lsn\":" +
         (c.oldest_commit_lsn ? common::quoted(c.oldest_commit_lsn->to_string()) : "null");
    o += ",\"scanned_changes\":" + std::to_string(c.changes_scanned);
    o += ",\"scanned_upto_lsn\":" +
         (b.scanned_upto ? common::quoted(b.scanned_upto->to_string()) : "null");
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.3f", b.scan_seconds);
    o += ",\"scan_seconds\":" + std::string(seconds);
    o += ",\"backlog_error\":null";
  }
  o += ",\"scan_limit\":" + std::to_string(b.scan_limit);
  o += ",\"max_pending\":" + (b.max_pending ? std::to_string(*b.max_pending) : "null");
  o += ",\"max_age_seconds\":" +
       (b.max_age ? std::to_string(static_cast<double>(b.max_age->count()) / 1000.0) : "null");
  return o;
}

std::string format_pg_timestamp(pgoutput::PgTimestamp t) {
  const std::int64_t unix_us = t + pgoutput::kPgEpochUnixMicros;
  std::int64_t secs = unix_us / 1'000'000;
  std::int64_t micros = unix_us % 1'000'000;
  if (micros < 0) {
    micros += 1'000'000;
    --secs;
  }
  const std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%06lld+00", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(micros));
  return buf;
}

std::string human_duration(double seconds) {
  char buf[48];
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
    return buf;
  }
  const auto s = static_cast<std::uint64_t>(seconds);
  if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%llum %02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(buf, sizeof buf, "%lluh %02llum", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s % 3600 / 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llud %02lluh", static_cast<unsigned long long>(s / 86400),
                  static_cast<unsigned long long>(s % 86400 / 3600));
  }
  return buf;
}

}  // namespace outbox::lifecycle
