#include "publication_checker.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>
#include <vector>

#include "outbox/common/log_text.hpp"
#include "outbox/common/qualified_name.hpp"

namespace outbox::relay {
using common::quoted;
namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using pgoutput::Lsn;

std::chrono::steady_clock::time_point next_check_due(std::chrono::steady_clock::time_point last,
                                                     bool waiting_for_check,
                                                     std::chrono::milliseconds interval) {
  return last + (waiting_for_check ? kMinCheckGap : interval);
}

PublicationChecker::PublicationChecker(asio::any_io_executor executor, const RelayConfig& config,
                                       Pipeline& pipeline, Metrics& metrics,
                                       std::shared_ptr<spdlog::logger> log, Hooks hooks)
    : executor_(executor),
      config_(config),
      pipeline_(pipeline),
      metrics_(metrics),
      log_(std::move(log)),
      hooks_(std::move(hooks)),
      timer_(executor),
      idle_(executor) {}

pg::PublicationTarget publication_target(const RelayConfig& config) {
  return {config.publication, config.mapper.schema, config.mapper.table, config.mapper.more_tables,
          !config.mapper.message_prefix.empty()};
}

awaitable<void> PublicationChecker::check() {
  const auto timeout = config_.connect_timeout;
  if (!catalog_ || !catalog_->connected()) {
    catalog_ = std::make_unique<pg::ReplicationConnection>(executor_);
    // The stream's server: a check's catalog and WAL position must be those of the WAL decoded.
    co_await catalog_->connect(server_conninfo_.empty() ? config_.conninfo : server_conninfo_,
                               timeout, /*replication=*/false);
  }
  // Read before the check's snapshot: every commit before this position is visible to it. On a
  // hot standby (the relay decoding there, PostgreSQL 16+) the position replayed so far: its
  // snapshots see every commit replayed before them.
  pg::Rows at = co_await catalog_->exec(
      "SELECT CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() "
      "ELSE pg_catalog.pg_current_wal_lsn() END::text",
      timeout);
  std::optional<Lsn> before;
  if (at.size() == 1 && at[0].size() == 1 && at[0][0]) before = Lsn::parse(*at[0][0]);
  if (!before) {
    const bool one = at.size() == 1 && at[0].size() == 1 && at[0][0];
    throw pg::Error::unexpected_reply(
        "SELECT pg_current_wal_lsn()", "one LSN",
        one ? "'" + *at[0][0] + "'" : std::to_string(at.size()) + " rows");
  }
  const pg::PublicationTarget all = publication_target(config_);
  // One check per outbox table (--table repeated), all after `before`; together they say what
  // one check says of one table.
  pg::PublicationCheck check;
  std::vector<pg::PublicationTarget> targets = {all};
  std::string tables =
      all.table.empty() ? "none" : common::QualifiedName{all.schema, all.table}.text();
  for (const auto& [schema, table] : all.more_tables) {
    targets.push_back({all.publication, schema, table});
    tables += "," + common::QualifiedName{schema, table}.text();
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const pg::PublicationTarget& one = targets[i];
    // Prepared: planning this statement costs the server several times what running it does.
    pg::Rows rows = co_await catalog_->exec_prepared(
        "outbox_relay_check_" + std::to_string(i),
        pg::publication_check_sql(one,
                                  [&](const std::string& v) { return catalog_->quote_literal(v); }),
        timeout);
    pg::PublicationCheck part = pg::assess_publication(one, rows);
    if (!part.ok()) {
      last_check_ = Clock::now();
      throw FatalError({kExitConfig, part.problem + "; slot " + config_.slot +
                                         " is not confirmed past " +
                                         pipeline_.confirmable().to_string()});
    }
    check.fingerprint += part.fingerprint + ";";
    check.partitioned = check.partitioned || part.partitioned;
    check.tree_relids.insert(check.tree_relids.end(), part.tree_relids.begin(),
                             part.tree_relids.end());
    check.published_relids.insert(check.published_relids.end(), part.published_relids.begin(),
                                  part.published_relids.end());
  }
  last_check_ = Clock::now();
  if (fingerprint_ && *fingerprint_ != check.fingerprint) {
    throw FatalError(
        {kExitConfig,
         "publication " + config_.publication + " was altered while the relay ran (its " +
             "settings or its rows for table " + tables + " were written after the check at " +
             pipeline_.verified().to_string() +
             "): inserts committed in between may have been hidden from the stream, so slot " +
             config_.slot + " is not confirmed past " + pipeline_.confirmable().to_string() +
             ". Compare the outbox with Kafka (outbox-relay reconcile), then start the relay "
             "again"});
  }
  if (!fingerprint_) {
    log_->info(
        "event=publication_verified slot={} publication={} table={} partitioned={} "
        "published_relations={} at={}",
        config_.slot, config_.publication, quoted(tables), check.partitioned,
        check.published_relids.size(), before->to_string());
  }
  fingerprint_ = check.fingerprint;
  pipeline_.set_outbox_tree(check.partitioned, check.tree_relids);
  pipeline_.publication_verified(*before);
  ++metrics_.publication_checks;
}

// A check while streaming. A check that cannot run ends the session (reconnect with backoff):
// the catalog and the stream come from the same server, and a server shutting down waits for
// the slot to be confirmed up to what it sent, which waits for a check; after the reconnect the
// stream resumes at the confirmed position, so nothing is lost.
awaitable<void> PublicationChecker::periodic() {
  const Lsn was = pipeline_.confirmable();
  try {
    co_await check();
  } catch (const boost::system::system_error& e) {
    // Cancelled by a stop, a failure or a rewind: the stop sequence goes on.
    if (e.code() != asio::error::operation_aborted || !hooks_.leaving()) throw;
    co_return;
  } catch (const pg::Error& e) {
    log_->warn("event=publication_check_failed slot={} confirmed={} error={}: reconnecting",
               config_.slot, pipeline_.confirmable().to_string(), quoted(e.what()));
    throw;
  }
  schedule();
  if (pipeline_.confirmable() > was) hooks_.verified_moved();
}

void PublicationChecker::schedule() {
  // A check under way schedules the next when it ends: a timer armed meanwhile would be due at
  // once (its gap counts from the last check's end) and wake the stream for nothing.
  if (!hooks_.may_schedule() || running_) return;
  const auto due = next_check_due(last_check_, pipeline_.waiting_for_check(),
                                  config_.publication_check_interval);
  if (armed_ && timer_.expiry() <= due) return;
  armed_ = true;
  timer_.expires_at(due);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // re-armed or cancelled
    armed_ = false;
    due_ = true;
    hooks_.wake_stream();
  });
}

void PublicationChecker::cancel_timer() {
  timer_.cancel();
  armed_ = false;
  due_ = false;
}

// The periodic check runs beside the stream, on the catalog connection: reading, producing and
// committing go on meanwhile (on a busy server the two queries take tens of milliseconds, and
// the stream stood still twice a second). The check only moves the verified position, which
// caps what is confirmed; a check that fails ends the session from the stream loop.
void PublicationChecker::on_stream_turn() {
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  if (!due_) return;
  due_ = false;
  if (running_) return;  // a running one schedules the next
  running_ = true;
  asio::co_spawn(executor_, background(), asio::detached);
}

awaitable<void> PublicationChecker::background() {
  // Every exception is caught here and handed to the stream loop (on_stream_turn()).
  try {
    co_await periodic();
  } catch (...) {
    if (!hooks_.leaving()) error_ = std::current_exception();
  }
  running_ = false;
  idle_.cancel();
  if (!error_) schedule();
  hooks_.wake_stream();  // on failure the stream ends the session
}

awaitable<void> PublicationChecker::await_background(bool cancel_it) {
  if (!running_) co_return;
  if (cancel_it && catalog_) catalog_->cancel();
  while (running_) {
    idle_.expires_after(std::chrono::milliseconds(100));
    boost::system::error_code ec;
    co_await idle_.async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

awaitable<void> PublicationChecker::resolve_relation(std::uint32_t relid) {
  co_await await_background(false);  // it may know the relation; one user of catalog_
  if (pipeline_.in_outbox_tree(relid)) co_return;
  co_await check();
  if (pipeline_.in_outbox_tree(relid)) co_return;
  pg::Rows rows = co_await catalog_->exec(
      "SELECT 1 FROM pg_catalog.pg_class WHERE oid = " + std::to_string(relid),
      config_.connect_timeout);
  pipeline_.relation_resolved(relid, !rows.empty());
}

void PublicationChecker::cancel() {
  if (catalog_) catalog_->cancel();
}

void PublicationChecker::disconnect() { catalog_.reset(); }

}  // namespace outbox::relay
