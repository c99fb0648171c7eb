// outbox-relay: process entry. Flags, logging, signals; the relay does the rest.
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "outbox/app/options.hpp"
#include "outbox/kafka/producer.hpp"
#include "outbox/relay/relay.hpp"

namespace {

void setup_logging(const std::string& level) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto root = std::make_shared<spdlog::logger>("app", sink);
  root->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %n %v");
  root->set_level(spdlog::level::from_str(level));
  root->flush_on(spdlog::level::info);
  spdlog::set_default_logger(root);
  // One named logger per module, cloned from the root so they share sink, pattern and level.
  for (const char* name : {"relay", "pg", "kafka"}) spdlog::register_logger(root->clone(name));
}

}  // namespace

int main(int argc, char** argv) {
  outbox::app::Options options;
  try {
    options = outbox::app::parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const outbox::app::UsageError& e) {
    std::fprintf(stderr, "outbox-relay: %s\n", e.what());
    return outbox::relay::kExitUsage;
  }
  if (options.help) {
    std::cout << outbox::app::usage();
    return 0;
  }
  if (options.version) {
    std::cout << "outbox-relay 0.1.0\n";
    return 0;
  }
  setup_logging(options.log_level);

  boost::asio::io_context io(1);
  std::unique_ptr<outbox::relay::Relay> relay;
  try {
    relay = std::make_unique<outbox::relay::Relay>(io, options.relay);
  } catch (const outbox::kafka::ConfigError& e) {
    std::fprintf(stderr, "outbox-relay: -X: %s\n", e.what());
    return outbox::relay::kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "outbox-relay: %s\n", e.what());
    return outbox::relay::kExitUsage;
  }

  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int signo) {
        if (ec) return;
        spdlog::info("event=signal signal={}", signo);
        relay->request_stop();
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);

  int exit_code = outbox::relay::kExitError;
  // The one top-level coroutine; its completion decides the exit code.
  boost::asio::co_spawn(io, relay->run(), [&](std::exception_ptr error, int code) {
    exit_code = code;
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        spdlog::critical("event=crash error=\"{}\"", e.what());
      }
      exit_code = outbox::relay::kExitError;
    }
    boost::system::error_code ignored;
    signals.cancel(ignored);
  });
  io.run();
  spdlog::shutdown();
  return exit_code;
}
