// outbox-relay: process entry. Command line, logging, signals, the metrics endpoint and the
// summary line; the relay does the rest. `setup`, `status`, `drop`, `reconcile` and `prune` are
// one-shot commands.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/system_error.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "gap_repair.hpp"
#include "outbox/app/backlog_sampler.hpp"
#include "outbox/app/commands.hpp"
#include "outbox/app/failover_sampler.hpp"
#include "outbox/app/http_server.hpp"
#include "outbox/app/logging.hpp"
#include "outbox/app/options.hpp"
#include "outbox/app/prometheus.hpp"
#include "outbox/aws/eventbridge_publisher.hpp"
#include "outbox/aws/sqs_publisher.hpp"
#include "outbox/common/log_text.hpp"
#include "outbox/common/qualified_name.hpp"
#include "outbox/kafka/producer.hpp"
#include "outbox/lifecycle/failover.hpp"
#include "outbox/lifecycle/prune.hpp"
#include "outbox/lifecycle/reconcile.hpp"
#include "outbox/lifecycle/status.hpp"
#include "outbox/nats/publisher.hpp"
#include "outbox/pg/conninfo.hpp"
#include "outbox/relay/relay.hpp"
#include "outbox/version.hpp"

namespace {

namespace asio = boost::asio;
using outbox::relay::Metrics;
using outbox::relay::State;

constexpr const char* kVersion = OUTBOX_RELAY_VERSION;

outbox::app::HttpResponse handle_http(outbox::relay::Relay& relay,
                                      const outbox::app::RelayIdentity& identity,
                                      const outbox::app::BacklogSampler* backlog,
                                      const outbox::app::FailoverSampler* failover,
                                      std::string_view path) {
  if (path == "/metrics") {
    std::string body = outbox::app::render_prometheus(relay.metrics(), identity);
    if (backlog) {
      body += outbox::app::render_backlog_prometheus(
          backlog->sample(), std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count());
    }
    if (failover) body += outbox::app::render_failover_prometheus(failover->sample());
    return {200, std::string(outbox::app::kPrometheusContentType), std::move(body)};
  }
  if (path == "/healthz") return {200, "text/plain; charset=utf-8", "ok\n"};
  if (path == "/readyz") {
    const Metrics& m = relay.metrics();
    if (m.state == State::kStreaming && m.producer_healthy) {
      return {200, "text/plain; charset=utf-8", "ready: streaming\n"};
    }
    std::string body = std::string("not ready: state ") + outbox::relay::to_string(m.state);
    if (!m.state_reason.empty()) body += ": " + m.state_reason;
    if (!m.producer_healthy) body += "; Kafka producer unhealthy";
    return {503, "text/plain; charset=utf-8", body + "\n"};
  }
  if (path == "/") {
    return {200, "text/plain; charset=utf-8",
            "outbox-relay: /metrics (Prometheus), /healthz (liveness), /readyz (streaming)\n"};
  }
  return {404, "text/plain; charset=utf-8", "not found\n"};
}

// Logs one line per interval while streaming: throughput, positions, lag, in-flight counts.
class SummaryTimer {
 public:
  SummaryTimer(asio::io_context& io, outbox::relay::Relay& relay, std::chrono::milliseconds every)
      : timer_(io), relay_(relay), every_(every) {}

  void start() {
    if (every_.count() == 0) return;
    last_ = std::chrono::steady_clock::now();
    arm();
  }
  // A wait that expired just before (its handler queued, out of cancel()'s reach) must not
  // re-arm: the io_context would never run out of work and the process never exit.
  void stop() {
    stopped_ = true;
    timer_.cancel();
  }

 private:
  void arm() {
    timer_.expires_after(every_);
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopped_) return;
      tick();
      arm();
    });
  }

  void tick() {
    outbox::app::report_suppressed_warnings();
    const Metrics& m = relay_.metrics();
    std::uint64_t events = 0;
    for (const auto& [topic, n] : m.events_published) events += n;
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_).count();
    const std::uint64_t d_events = events - last_events_;
    const std::uint64_t d_bytes = m.bytes_published - last_bytes_;
    last_ = now;
    last_events_ = events;
    last_bytes_ = m.bytes_published;
    if (m.state != State::kStreaming && m.state != State::kBackpressured) return;
    const auto& h = m.commit_to_ack_seconds;
    spdlog::info(
        "event=summary state={} events={} events_per_s={:.1f} bytes={} confirmed={} "
        "received={} server_wal_end={} lag_bytes={} in_flight_events={} in_flight_bytes={} "
        "oldest_in_flight_s={:.3f} commit_to_ack_avg_ms={:.1f} reconnects={} "
        "backpressure_s={:.1f}",
        outbox::relay::to_string(m.state), d_events, seconds > 0 ? d_events / seconds : 0.0,
        d_bytes, m.confirmed_lsn.to_string(), m.received_lsn.to_string(),
        m.server_wal_end.to_string(), outbox::app::lag_bytes(m), m.events_in_flight,
        m.bytes_in_flight, m.oldest_unacked_age_seconds,
        h.count ? 1000.0 * h.sum / static_cast<double>(h.count) : 0.0, m.reconnects,
        m.backpressure_seconds);
  }

  asio::steady_timer timer_;
  outbox::relay::Relay& relay_;
  std::chrono::milliseconds every_;
  bool stopped_ = false;
  std::chrono::steady_clock::time_point last_;
  std::uint64_t last_events_ = 0;
  std::uint64_t last_bytes_ = 0;
};

// --failover: before the relay starts, checks the primary (lifecycle::check_failover_primary)
// and makes a missing publication and slot as the relay would, the slot a failover slot. A
// refusal is exit code 1; an unprotected primary (synchronized_standby_slots) is a warning, not a
// refusal: after a promotion the new primary has no standby yet, and a relay that refused to
// start then would stop the outbox. Refusals of the slot itself are left to the relay.
int prepare_failover_slot(const outbox::app::Options& options) {
  namespace pg = outbox::pg;
  const auto& r = options.relay;
  try {
    pg::AdminSession db(r.conninfo);
    const outbox::lifecycle::FailoverCheck check =
        outbox::lifecycle::check_failover_primary(db, r.slot);
    if (!check.refusals.empty()) {
      std::fprintf(stderr, "outbox-relay: %s\n", check.refusals.front().c_str());
      return outbox::relay::kExitError;
    }
    for (const std::string& problem : check.unprotected) {
      spdlog::warn("event=failover_unprotected slot={} problem={}", r.slot,
                   outbox::common::quoted(problem));
    }
    pg::BootstrapOptions bootstrap{
        {r.publication, r.mapper.schema, r.mapper.table, r.mapper.more_tables}, r.slot, r.create};
    bootstrap.failover = true;
    const pg::BootstrapResult result = db.ensure_slot_and_publication(bootstrap);
    if (result.created_publication) {
      spdlog::info("event=created_publication publication={}", r.publication);
    }
    if (result.created_slot) {
      spdlog::info("event=created_slot slot={} failover=true consistent_point={}", r.slot,
                   result.created_slot->to_string());
    }
  } catch (const pg::Error& e) {
    std::fprintf(stderr, "outbox-relay: --failover: %s\n", e.what());
    return outbox::relay::kExitError;
  }
  return outbox::relay::kExitOk;
}

int run_relay(const outbox::app::Options& options) {
  outbox::app::setup_logging({options.log_level, options.log_format, options.relay.slot});
  for (const std::string& w : options.warnings) spdlog::warn("event=config_warning {}", w);
  outbox::relay::RelayConfig config = options.relay;
  if (const int rc = outbox::app::repair_slot_gap(options, config); rc != outbox::relay::kExitOk) {
    return rc;
  }
  if (options.failover) {
    if (const int rc = prepare_failover_slot(options); rc != outbox::relay::kExitOk) return rc;
  }

  asio::io_context io(1);
  std::unique_ptr<outbox::relay::Relay> relay;
  try {
    relay = std::make_unique<outbox::relay::Relay>(io, config,
                                                   outbox::sinks::make_sink_factory(options.sinks));
  } catch (const outbox::kafka::ConfigError& e) {
    std::fprintf(stderr, "outbox-relay: Kafka configuration (-X, --kafka-config): %s\n", e.what());
    return outbox::relay::kExitUsage;
  } catch (const outbox::nats::ConfigError& e) {
    std::fprintf(stderr, "outbox-relay: NATS configuration (--nats*): %s\n", e.what());
    return outbox::relay::kExitUsage;
  } catch (const outbox::aws::EventBridgeConfigError& e) {
    std::fprintf(stderr, "outbox-relay: EventBridge configuration (--eventbridge*, AWS_*): %s\n",
                 e.what());
    return outbox::relay::kExitUsage;
  } catch (const outbox::aws::SqsConfigError& e) {
    std::fprintf(stderr, "outbox-relay: SQS configuration (--sqs, --aws-*): %s\n", e.what());
    return outbox::relay::kExitUsage;
  } catch (const outbox::aws::CredentialsError& e) {
    // The message names every source asked and why it had none, never a secret.
    std::fprintf(stderr, "outbox-relay: AWS credentials: %s\n", e.what());
    return outbox::relay::kExitError;
  } catch (const std::invalid_argument& e) {
    // A topic template the mapper refuses: a bad flag value.
    std::fprintf(stderr, "outbox-relay: --topic: %s\n", e.what());
    return outbox::relay::kExitUsage;
  } catch (const std::exception& e) {
    // Anything else (librdkafka could not create its handle, out of memory) is not the flags.
    std::fprintf(stderr, "outbox-relay: cannot start: %s\n", e.what());
    return outbox::relay::kExitError;
  }

  const auto& m = options.relay.mapper;
  const outbox::app::RelayIdentity identity{
      options.relay.slot, options.relay.publication,
      m.table.empty() ? "" : outbox::common::QualifiedName{m.schema, m.table}.text(), kVersion};
  // Declared before the HTTP server, whose handler reads it.
  std::unique_ptr<outbox::app::BacklogSampler> backlog;
  // The backlog counts outbox inserts: a relay of messages only (no table) has none to count.
  if (options.metrics_addr && options.backlog_interval.count() > 0 && !m.table.empty()) {
    outbox::lifecycle::StatusOptions where;
    where.conninfo = options.relay.conninfo;
    where.slot = options.relay.slot;
    where.publication = options.relay.publication;
    where.schema = m.schema;
    where.table = m.table;
    where.scan_limit = options.backlog_scan_limit;
    backlog = std::make_unique<outbox::app::BacklogSampler>(where, options.backlog_interval);
    backlog->start();
  }
  std::unique_ptr<outbox::app::FailoverSampler> failover;
  // --standby, or else the hosts of a multi-host --pg with --failover.
  const std::vector<std::string> standbys = outbox::lifecycle::standby_targets(
      options.standby, options.failover ? options.relay.conninfo : std::string());
  if (options.metrics_addr && !standbys.empty()) {
    failover = std::make_unique<outbox::app::FailoverSampler>(standbys, options.relay.slot,
                                                              std::chrono::seconds(10));
    failover->start();
  }
  std::unique_ptr<outbox::app::HttpServer> http;
  if (options.metrics_addr) {
    const auto& a = *options.metrics_addr;
    const std::string shown =
        (a.host.find(':') != std::string::npos ? "[" + a.host + "]" : a.host) + ":" +
        std::to_string(a.port);
    try {
      http = std::make_unique<outbox::app::HttpServer>(
          io, asio::ip::tcp::endpoint(asio::ip::make_address(a.host), a.port),
          [&relay, &identity, &backlog, &failover](std::string_view path) {
            return handle_http(*relay, identity, backlog.get(), failover.get(), path);
          });
      http->start();
      spdlog::info("event=metrics_listening addr={} port={}", shown, http->local_endpoint().port());
    } catch (const boost::system::system_error& e) {
      if (options.metrics_addr_explicit) {
        std::fprintf(stderr, "outbox-relay: --metrics-addr %s: cannot listen: %s\n", shown.c_str(),
                     e.code().message().c_str());
        return outbox::relay::kExitError;
      }
      spdlog::warn(
          "event=metrics_unavailable addr={} error={}: running without /metrics, /healthz "
          "and /readyz (give --metrics-addr to choose another address, or off)",
          shown, outbox::common::quoted(e.code().message()));
    }
  }

  SummaryTimer summary(io, *relay, options.summary_interval);
  summary.start();

  asio::signal_set signals(io, SIGINT, SIGTERM);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int signo) {
        if (ec) return;
        spdlog::info("event=signal signal={}", signo);
        relay->request_stop();
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);

  int exit_code = outbox::relay::kExitError;
  // The one top-level coroutine; its completion decides the exit code and ends the loop.
  asio::co_spawn(io, relay->run(), [&](std::exception_ptr error, int code) {
    exit_code = code;
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        spdlog::critical("event=crash error={}", outbox::common::quoted(e.what()));
      }
      exit_code = outbox::relay::kExitError;
    }
    boost::system::error_code ignored;
    signals.cancel(ignored);
    summary.stop();
    if (http) http->stop();
  });
  io.run();
  http.reset();
  relay.reset();
  if (exit_code == outbox::relay::kExitSlotLost) {
    // Why PostgreSQL invalidated the slot, and the commands that recover the events.
    // A NATS URL may hold a password: named by a placeholder then, as the conninfo is.
    const std::string& nats = options.sinks.nats.urls;
    const outbox::lifecycle::AdviceDestination to =
        !nats.empty()
            ? outbox::lifecycle::AdviceDestination{"JetStream", nats.find('@') == std::string::npos
                                                                    ? "--nats " + nats
                                                                    : "--nats \"$NATS_URL\""}
        : !options.sinks.sqs.queue_url.empty()
            ? outbox::lifecycle::AdviceDestination{"the SQS queue", ""}
        : !options.sinks.eventbridge.bus.empty()
            ? outbox::lifecycle::AdviceDestination{"the EventBridge bus", ""}
            : outbox::lifecycle::AdviceDestination{"Kafka",
                                                   "--brokers " + options.sinks.kafka.brokers};
    const std::string advice = outbox::lifecycle::slot_lost_advice(
        options.relay.conninfo, options.relay.slot, to,
        m.table.empty() ? "" : outbox::common::QualifiedName{m.schema, m.table}.text());
    spdlog::shutdown();
    if (!advice.empty()) std::fprintf(stderr, "outbox-relay: %s\n", advice.c_str());
    return exit_code;
  }
  spdlog::shutdown();
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  outbox::app::CommandLine cl;
  try {
    cl = outbox::app::parse_command_line(std::vector<std::string>(argv + 1, argv + argc),
                                         [](const std::string& name) -> std::optional<std::string> {
                                           const char* value = std::getenv(name.c_str());
                                           return value ? std::optional<std::string>(value)
                                                        : std::nullopt;
                                         });
  } catch (const outbox::app::UsageError& e) {
    std::fprintf(stderr, "outbox-relay: %s\n", e.what());
    return outbox::relay::kExitUsage;
  }
  // Parsed once, before any connection: libpq's own parse errors quote the text (a password).
  const std::string* conninfo = nullptr;
  switch (cl.command) {
    case outbox::app::Command::kSetup:
      conninfo = cl.setup.help ? nullptr : &cl.setup.conninfo;
      break;
    case outbox::app::Command::kStatus:
      conninfo = cl.status.help ? nullptr : &cl.status.conninfo;
      break;
    case outbox::app::Command::kDrop:
      conninfo = cl.drop.help ? nullptr : &cl.drop.conninfo;
      break;
    case outbox::app::Command::kReconcile:
      conninfo = cl.reconcile.help ? nullptr : &cl.reconcile.conninfo;
      break;
    case outbox::app::Command::kPrune:
      conninfo = cl.prune.help ? nullptr : &cl.prune.conninfo;
      break;
    case outbox::app::Command::kRun:
      conninfo = cl.run.help || cl.run.version ? nullptr : &cl.run.relay.conninfo;
      break;
  }
  if (conninfo) {
    if (const std::string problem = outbox::pg::check_conninfo(*conninfo); !problem.empty()) {
      std::fprintf(stderr, "outbox-relay: --pg: %s\n", problem.c_str());
      return outbox::relay::kExitUsage;
    }
  }
  switch (cl.command) {
    case outbox::app::Command::kSetup:
      if (cl.setup.help) break;
      return outbox::app::run_setup(cl.setup, std::cout, std::cerr);
    case outbox::app::Command::kStatus:
      if (cl.status.help) break;
      for (const std::string& w : cl.status.progress.warnings) {
        std::fprintf(stderr, "outbox-relay status: warning: %s\n", w.c_str());
      }
      return outbox::lifecycle::run_status(cl.status, std::cout, std::cerr);
    case outbox::app::Command::kDrop:
      if (cl.drop.help) break;
      return outbox::app::run_drop(cl.drop, std::cout, std::cerr);
    case outbox::app::Command::kReconcile:
      if (cl.reconcile.help) break;
      for (const std::string& w : cl.reconcile.warnings) {
        std::fprintf(stderr, "outbox-relay reconcile: warning: %s\n", w.c_str());
      }
      // The AWS publishers log (their bus, their credentials' source): on stderr, beside
      // reconcile's progress, so that stdout stays its report.
      if (cl.reconcile.resend()) spdlog::set_default_logger(spdlog::stderr_color_mt("reconcile"));
      return outbox::lifecycle::run_reconcile(cl.reconcile, std::cout, std::cerr);
    case outbox::app::Command::kPrune:
      if (cl.prune.help) break;
      for (const std::string& w : cl.prune.progress.warnings) {
        std::fprintf(stderr, "outbox-relay prune: warning: %s\n", w.c_str());
      }
      return outbox::lifecycle::run_prune(cl.prune, std::cout, std::cerr);
    case outbox::app::Command::kRun:
      if (cl.run.help) break;
      if (cl.run.version) {
        std::cout << "outbox-relay " << kVersion << "\n";
        return 0;
      }
      return run_relay(cl.run);
  }
  std::cout << outbox::app::usage(cl.command);
  return 0;
}
