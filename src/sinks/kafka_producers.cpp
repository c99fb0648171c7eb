#include "kafka_producers.hpp"

#include <charconv>

namespace outbox::sinks {
using relay::DeliveryMode;

KafkaProducers::KafkaProducers(boost::asio::any_io_executor executor,
                               kafka::ProducerConfig producer, DeliveryMode delivery,
                               std::string transactional_id, Handlers handlers)
    : executor_(executor),
      producer_(std::move(producer)),
      delivery_(delivery),
      transactional_id_(std::move(transactional_id)),
      handlers_(std::move(handlers)) {
  // Every refusal names the broker (the relay's messages are broker-neutral).
  if (handlers_.refused) {
    handlers_.refused = [refused = std::move(handlers_.refused)](const std::string& what) {
      refused("Kafka broker " + what);
    };
  }
  renew();
}

// The producer: idempotent, and stopping at the first refused batch rather than letting later
// records of its partition pass the refused ones (enable.gapless.guarantee, set last so that -X
// cannot turn it off). Exactly-once: two transactional producers, the transactional.id and the
// same with kSpareSuffix, which take turns, one Kafka transaction each, committed one after the
// other. With one, the next transaction's first AddPartitionsToTxn usually reached the
// coordinator while it still wrote the last commit's markers: CONCURRENT_TRANSACTIONS, and
// librdkafka retries after a fixed 20 ms. The other producer's id has no transaction completing.
std::unique_ptr<kafka::Producer> KafkaProducers::make(const std::string& suffix) {
  kafka::ProducerConfig c = producer_;
  if (delivery_ == DeliveryMode::kExactlyOnce) {
    // A failed record makes the Kafka transaction abortable: nothing of it becomes visible.
    c.transactional_id = transactional_id_ + suffix;
  } else {
    c.properties.emplace_back("enable.gapless.guarantee", "true");
    // librdkafka's message.timeout.ms fails the oldest queued records of a partition while later
    // ones still go; the relay keeps the deadline (delivery_timeout()) and halts everything.
    for (const auto& [key, value] : producer_.properties) {
      if (key != "message.timeout.ms") continue;
      long long ms = 0;
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
      delivery_timeout_.reset();
      if (ec == std::errc() && p == value.data() + value.size() && ms > 0) {
        delivery_timeout_ = std::chrono::milliseconds(ms);
      }
    }
    c.properties.emplace_back("message.timeout.ms", "0");
  }
  return std::make_unique<kafka::Producer>(executor_, c, handlers_.delivery, handlers_.fatal,
                                           handlers_.refused);
}

kafka::Producer& KafkaProducers::progress() {
  // A fatal error (its idempotent sequence lost) stops only this producer: the next record
  // goes through a new one.
  if (progress_ && progress_->stopped()) reaper_.retire(std::move(progress_));
  if (!progress_) {
    progress_ = std::make_unique<kafka::Producer>(
        executor_, producer_, handlers_.delivery, [](const std::string&) {}, handlers_.refused);
  }
  return *progress_;
}

void KafkaProducers::halt() {
  if (current_) current_->purge();
  if (alone_) alone_->purge();
}

void KafkaProducers::renew() {
  // The old ones end on the reaper's thread (rd_kafka_destroy blocks): the relay's loop goes on.
  // Reports still due are dropped: those records are sent again.
  reaper_.retire(std::move(alone_));
  reaper_.retire(std::move(current_));
  reaper_.retire(std::move(spare_));
  current_ = make("");
  if (delivery_ == DeliveryMode::kExactlyOnce) spare_ = make(kSpareSuffix);
}

void KafkaProducers::reset() {
  progress_.reset();
  alone_.reset();
  current_.reset();  // reports still due are dropped: those records are sent again
  spare_.reset();
}

kafka::ProduceResult KafkaProducers::produce(const kafka::Record& record, std::uint64_t opaque,
                                             bool alone) {
  if (!alone || delivery_ == DeliveryMode::kExactlyOnce) {
    return current_->produce(record, opaque);
  }
  if (!alone_) {
    // For the records of a refused batch: one record a batch, sent when nothing else is in
    // flight, and nothing produced after it until its report, so that the bad one is told from
    // its neighbours and no later record passes either.
    kafka::ProducerConfig single = producer_;
    single.properties.emplace_back("batch.num.messages", "1");
    single.properties.emplace_back("linger.ms", "0");
    alone_ = std::make_unique<kafka::Producer>(executor_, single, handlers_.delivery,
                                               handlers_.fatal, handlers_.refused);
  }
  return alone_->produce(record, opaque);
}

bool KafkaProducers::fenced() const {
  return (current_ && current_->fenced()) || (spare_ && spare_->fenced());
}

std::size_t KafkaProducers::queued() const {
  return (current_ ? current_->queued() : 0) + (alone_ ? alone_->queued() : 0);
}

std::string KafkaProducers::refusal_advice() const {
  return "check the relay's Kafka security settings (security.protocol, sasl.mechanism, "
         "sasl.username, sasl.password, ssl.ca.location, ssl.certificate.location) and the "
         "broker's";
}

}  // namespace outbox::sinks
