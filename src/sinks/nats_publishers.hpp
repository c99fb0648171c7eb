// The relay's NATS JetStream sink (--nats): one nats::Publisher behind RecordSink. JetStream
// acknowledges every publish on its own, so a record sent alone needs no producer of its own: it
// waits until nothing else is in flight. A stopped publisher (connection lost, acknowledgement
// overdue) is never reconnected: renew() makes a new one after the relay's rewind, so that
// nothing the old connection buffered reaches the server behind what the cut lost. After the
// first, a publisher connects and is closed on a thread of its own (a server that accepts TCP and
// does not answer held the io thread for the connect timeout, /healthz and the walsender's
// keepalives with it: 2.5 s measured in NatsRelay.ServerFrozenThenThawed).
// Private to the sinks; not thread-safe: the io_context's thread only.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "outbox/nats/publisher.hpp"
#include "outbox/relay/record_sink.hpp"

namespace outbox::sinks {

class NatsPublishers : public relay::RecordSink {
 public:
  // Throws nats::ConfigError for a bad URL or an unreadable credentials, NKey or TLS file.
  NatsPublishers(boost::asio::any_io_executor executor, nats::PublisherConfig config,
                 Handlers handlers);
  // Waits for the publishers handed to the worker (connecting or closing).
  ~NatsPublishers() override;

  sink::ProduceResult produce(const sink::Record& record, std::uint64_t opaque,
                              bool alone) override;
  bool stopped() const override { return publisher_ && publisher_->stopped(); }
  std::size_t queued() const override { return publisher_ ? publisher_->queued() : 0; }
  // A publisher stops by itself at its first failure (connection lost, acknowledgement overdue)
  // and publishes nothing after it.
  void halt() override {}
  void renew() override;
  void reset() override;
  std::string refusal_advice() const override;
  std::string client() const override { return "NATS publisher"; }

 private:
  void make(bool connect_here);

  boost::asio::any_io_executor executor_;
  nats::PublisherConfig config_;
  Handlers handlers_;
  // Connects and closes publishers off the io thread; joined in the destructor (declared
  // before the publisher, destroyed after it).
  boost::asio::thread_pool worker_{1};
  std::unique_ptr<nats::Publisher> publisher_;
  // A publish was taken by some publisher of this process, and by the current one. nats.c
  // reports a server that does not answer a new connection (frozen, overloaded) the way it
  // reports refused credentials; once a publisher of the same settings got through, that is an
  // outage: the publisher's stop rewinds and retries instead of ending the relay.
  bool connected_once_ = false;
  bool current_connected_ = false;
};

}  // namespace outbox::sinks
