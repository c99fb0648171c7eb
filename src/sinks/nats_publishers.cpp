#include "nats_publishers.hpp"

namespace outbox::sinks {

NatsPublishers::NatsPublishers(boost::asio::any_io_executor executor, nats::PublisherConfig config,
                               Handlers handlers)
    : executor_(executor), config_(std::move(config)), handlers_(std::move(handlers)) {
  make(true);  // at start, here: servers that cannot be tried are a configuration error
}

NatsPublishers::~NatsPublishers() {
  reset();
  worker_.join();
}

void NatsPublishers::renew() {
  reset();  // reports still due are dropped: those records are sent again
  make(false);
}

void NatsPublishers::reset() {
  if (publisher_) nats::Publisher::retire(std::move(publisher_), worker_.get_executor());
}

void NatsPublishers::make(bool connect_here) {
  current_connected_ = false;
  std::optional<boost::asio::any_io_executor> connector;
  if (!connect_here) connector = worker_.get_executor();
  publisher_ = std::make_unique<nats::Publisher>(
      executor_, config_, handlers_.delivery, handlers_.fatal,
      [this](const std::string& m) {
        if (connected_once_ && !current_connected_) return;  // an outage (see the header)
        handlers_.refused(m);
      },
      connector);
}

sink::ProduceResult NatsPublishers::produce(const sink::Record& record, std::uint64_t opaque,
                                            bool alone) {
  // Alone: after every earlier publish was reported (the caller waits as for a full window).
  if (alone && publisher_->queued() > 0) return {sink::ProduceStatus::kQueueFull, {}, false};
  sink::ProduceResult r = publisher_->produce(record, opaque);
  if (r.status == sink::ProduceStatus::kQueued) connected_once_ = current_connected_ = true;
  return r;
}

std::string NatsPublishers::refusal_advice() const {
  return "check the relay's NATS security settings (--nats-creds, --nats-nkey, --nats-tls-ca, "
         "--nats-tls-cert, --nats-tls-key) and the server's authorization";
}

}  // namespace outbox::sinks
