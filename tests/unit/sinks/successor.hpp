// A successor of a transactional.id, as a relay that took the slot over makes one: a producer of
// the same transactional.id, initialised on the test's io_context.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "outbox/kafka/producer.hpp"
#include "outbox_test/asio_run.hpp"

namespace outbox::sinks::test {

// Use with ASSERT_NO_FATAL_FAILURE; `out` holds the successor while it lives.
inline void initialise_successor(boost::asio::io_context& io, kafka::ProducerConfig config,
                                 const std::string& transactional_id,
                                 std::unique_ptr<kafka::Producer>& out) {
  config.transactional_id = transactional_id;
  out = std::make_unique<kafka::Producer>(
      io.get_executor(), config, [](const sink::Delivery&) {}, [](const std::string&) {});
  const auto r = outbox_test::run(io, out->init_transactions(std::chrono::seconds(10)));
  ASSERT_TRUE(r.has_value() && r->ok()) << (r ? r->error : "init_transactions did not end");
}

}  // namespace outbox::sinks::test
