// The seam between the relay and its broker. The relay names no broker: it is given a
// SinkFactory (the app builds one from the flags: outbox/sinks/sinks.hpp) and asks it, once,
// for the parts it talks to, all interfaces of relay/:
//   - a RecordSink (record_sink.hpp): records in, delivery reports out, stop/halt/renew;
//   - the ProgressStore (progress_store.hpp) of the progress record, made with the sink (it may
//     share the sink's clients: Kafka writes it through a producer of the sink's);
//   - with --delivery exactly-once, the broker's Transactions (transactions.hpp) over that sink.
// A new broker is a directory that implements these, plus a branch of the factory that builds
// it from its flags: nothing in relay/ changes.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/any_io_executor.hpp>
#include <memory>

#include "outbox/relay/metrics.hpp"
#include "outbox/relay/pipeline.hpp"
#include "outbox/relay/progress_store.hpp"
#include "outbox/relay/record_sink.hpp"
#include "outbox/relay/relay.hpp"
#include "outbox/relay/transactions.hpp"

namespace outbox::relay {

class SinkFactory {
 public:
  struct Parts {
    // Null: the relay records no progress and trusts the slot alone (a sink whose broker cannot
    // be read back keeps its record elsewhere: SQS and EventBridge in the database itself).
    std::unique_ptr<ProgressStore> progress;
    std::unique_ptr<RecordSink> sink;  // never null
  };

  virtual ~SinkFactory() = default;
  // The sink and its progress store, on `executor` (the relay's io_context): reports go to
  // `handlers`, the progress record's outcomes to `written`. Called once, when the Relay is
  // constructed: a bad setting throws (the broker's ConfigError) before anything runs.
  virtual Parts make(boost::asio::any_io_executor executor, const RelayConfig& config,
                     RecordSink::Handlers handlers, ProgressStore::Written written) = 0;
  // Exactly-once's cycle over the sink make() made; null (the default) when the broker has no
  // transactions (the flags refuse --delivery exactly-once with it).
  virtual std::unique_ptr<Transactions> transactions(const RelayConfig& /*config*/,
                                                     Pipeline& /*pipeline*/, Metrics& /*metrics*/,
                                                     std::shared_ptr<spdlog::logger> /*log*/,
                                                     Transactions::Host& /*host*/) {
    return nullptr;
  }
  // Every distinct destination costs the client memory for the process's life (librdkafka
  // keeps state for every topic produced to): --max-topics bounds them.
  virtual bool bounds_topics() const = 0;
};

}  // namespace outbox::relay
