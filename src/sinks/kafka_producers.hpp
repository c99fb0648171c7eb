// The Kafka producers of one relay, behind one small interface: the batching producer
// (idempotent, stopping at the first refused batch: enable.gapless.guarantee), the send-alone
// producer for the records of a refused batch (made on first use), and with exactly-once the
// spare transactional producer the current one takes turns with. A rewind makes them anew.
// Private to the sinks; not thread-safe: the io_context's thread only.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "outbox/kafka/producer.hpp"
#include "outbox/relay/record_sink.hpp"
#include "outbox/relay/relay.hpp"

namespace outbox::sinks {

class KafkaProducers : public relay::RecordSink {
 public:
  // Exactly-once: the spare producer's transactional.id is the current one's with this. No slot
  // name has a '#', so a derived id of one slot never equals the spare of another.
  static constexpr const char* kSpareSuffix = "#2";

  // Throws kafka::ConfigError for a bad property (before anything runs). A refusal of the
  // credentials reaches handlers.refused as "Kafka broker " + librdkafka's words.
  KafkaProducers(boost::asio::any_io_executor executor, kafka::ProducerConfig producer,
                 relay::DeliveryMode delivery, std::string transactional_id, Handlers handlers);

  // Queues a record on the current producer, or alone on the send-alone producer (at-least-once;
  // exactly-once sends every record in the transaction).
  kafka::ProduceResult produce(const kafka::Record& record, std::uint64_t opaque,
                               bool alone) override;
  kafka::Producer& current() { return *current_; }
  kafka::Producer& spare() { return *spare_; }  // exactly-once
  // Exactly-once: after a commit the other producer holds the next transaction.
  void take_turns() { std::swap(current_, spare_); }
  // The current producer stopped (a refused batch, a lost sequence, fenced).
  bool stopped() const override { return current_ && current_->stopped(); }
  // At-least-once: enable.gapless.guarantee (make()).
  bool stops_at_refusal() const override { return delivery_ != relay::DeliveryMode::kExactlyOnce; }
  // A transactional producer was fenced by a newer one of its transactional.id.
  bool fenced() const;
  // Records queued or in flight in the current and the send-alone producers.
  std::size_t queued() const override;
  // The producer of the at-least-once progress records (progress_record.hpp), made on first use:
  // no gapless guarantee (a refused progress record must not stop the events' producer), kept
  // across renew().
  kafka::Producer& progress();
  // Purges the current and the send-alone producers (kafka::Producer::purge()).
  void halt() override;
  // New producers (a rewind): reports still due from the old ones are dropped; the old ones end
  // on a thread of their own (kafka::ProducerReaper), never blocking the io_context.
  void renew() override;
  // No producers (the relay ends).
  void reset() override;
  std::string refusal_advice() const override;
  std::string client() const override { return "Kafka producer"; }
  // At-least-once: -X message.timeout.ms, which the relay keeps for itself (librdkafka gets 0).
  std::optional<std::chrono::milliseconds> delivery_timeout() const override {
    return delivery_timeout_;
  }

 private:
  std::unique_ptr<kafka::Producer> make(const std::string& suffix);

  boost::asio::any_io_executor executor_;
  kafka::ProducerConfig producer_;
  relay::DeliveryMode delivery_;
  std::string transactional_id_;
  Handlers handlers_;
  std::optional<std::chrono::milliseconds> delivery_timeout_;
  // Destroys renewed producers off the io_context's thread; joined last (declared first).
  kafka::ProducerReaper reaper_;
  std::unique_ptr<kafka::Producer> current_;
  std::unique_ptr<kafka::Producer> spare_;     // exactly-once
  std::unique_ptr<kafka::Producer> alone_;     // made on the first refused batch
  std::unique_ptr<kafka::Producer> progress_;  // made on first use
};

}  // namespace outbox::sinks
