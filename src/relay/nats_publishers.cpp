#include "nats_publishers.hpp"

namespace outbox::relay {

NatsPublishers::NatsPublishers(boost::asio::any_io_executor executor, const RelayConfig& config,
                               Handlers handlers)
    : executor_(executor), config_(config), handlers_(std::move(handlers)) {
  renew();
}

void NatsPublishers::renew() {
  publisher_.reset();  // reports still due are dropped: those records are sent again
  publisher_ = std::make_unique<nats::Publisher>(executor_, config_.nats, handlers_.delivery,
                                                 handlers_.fatal, handlers_.refused);
}

sink::ProduceResult NatsPublishers::produce(const sink::Record& record, std::uint64_t opaque,
                                            bool alone) {
  // Alone: after every earlier publish was reported (the caller waits as for a full window).
  if (alone && publisher_->queued() > 0) return {sink::ProduceStatus::kQueueFull, {}, false};
  return publisher_->produce(record, opaque);
}

std::string NatsPublishers::refusal_advice() const {
  return "check the relay's NATS security settings (--nats-creds, --nats-nkey, --nats-tls-ca, "
         "--nats-tls-cert, --nats-tls-key) and the server's authorization";
}

}  // namespace outbox::relay
