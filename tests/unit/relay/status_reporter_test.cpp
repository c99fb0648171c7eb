// StatusReporter: when the slot is told what (prompt and coalesced confirmations, the idle
// cadence, nothing while nothing advances, nothing after stop()).
#include "outbox/relay/status_reporter.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <functional>
#include <vector>

#include "outbox_test/asio_run.hpp"

namespace {

using namespace std::chrono_literals;
using outbox::pgoutput::Lsn;
using outbox::relay::StatusReporter;

class StatusReporterTest : public ::testing::Test {
 protected:
  // Runs the io_context until `done` or the deadline; returns whether `done` became true.
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds deadline = 30s) {
    return outbox_test::run_until(io, done, deadline);
  }
  // Runs the io_context for `d` (to show that nothing happens meanwhile).
  void run_for(std::chrono::milliseconds d) { outbox_test::run_for(io, d); }

  StatusReporter make(std::chrono::milliseconds interval, std::chrono::milliseconds delay) {
    return StatusReporter(
        io.get_executor(), interval, delay, [this] { return positions; },
        [this](const StatusReporter::Positions& p) {
          if (!connected) return false;
          sent.push_back(p);
          return true;
        });
  }

  boost::asio::io_context io;
  StatusReporter::Positions positions{Lsn(100), Lsn(100)};
  bool connected = true;
  std::vector<StatusReporter::Positions> sent;
};

TEST_F(StatusReporterTest, ConfirmationsAreCoalescedIntoOneUpdateAfterTheDelay) {
  StatusReporter r = make(1h, 50ms);
  positions = {Lsn(300), Lsn(200)};
  r.confirm_soon();
  positions = {Lsn(400), Lsn(250)};
  r.confirm_soon();  // coalesced with the first
  r.confirm_soon();
  ASSERT_TRUE(run_until([&] { return !sent.empty(); }));
  run_for(100ms);
  ASSERT_EQ(sent.size(), 1u) << "one update for every confirmation meanwhile";
  EXPECT_EQ(sent[0].flush, Lsn(250)) << "the position when the update goes out";
  EXPECT_EQ(sent[0].write, Lsn(400));
  EXPECT_EQ(r.last_reported(), Lsn(250));
}

TEST_F(StatusReporterTest, NothingIsArmedWhileNothingAdvances) {
  StatusReporter r = make(1h, 20ms);
  r.send_now();
  ASSERT_EQ(sent.size(), 1u);
  r.confirm_soon();  // flush 100 was reported already
  run_for(100ms);
  EXPECT_EQ(sent.size(), 1u);
  positions.flush = Lsn(50);  // lower than reported: never an update for it
  r.confirm_soon();
  run_for(100ms);
  EXPECT_EQ(sent.size(), 1u);
}

TEST_F(StatusReporterTest, TheIdleCadenceSendsWhateverHappens) {
  StatusReporter r = make(30ms, 1h);
  r.start();
  ASSERT_TRUE(run_until([&] { return sent.size() >= 3; }))
      << "the cadence answers the walsender even when nothing advances";
  for (const auto& p : sent) EXPECT_EQ(p.flush, Lsn(100));
  r.stop();
  const std::size_t n = sent.size();
  run_for(100ms);
  EXPECT_EQ(sent.size(), n) << "nothing after stop()";
}

TEST_F(StatusReporterTest, AnUpdateThatCannotGoOutIsNotCountedAsReported) {
  StatusReporter r = make(1h, 10ms);
  connected = false;
  positions.flush = Lsn(500);
  r.confirm_soon();
  run_for(50ms);
  EXPECT_TRUE(sent.empty());
  EXPECT_EQ(r.last_reported(), Lsn(0)) << "the next confirmation must try again";
  connected = true;
  r.confirm_soon();
  ASSERT_TRUE(run_until([&] { return !sent.empty(); }));
  EXPECT_EQ(sent.back().flush, Lsn(500));
}

}  // namespace

// A wait that expired just before stop() (its handler already queued, where cancel() does not
// reach it) sends nothing and arms nothing: the io_context runs out of work. A cadence re-armed
// there kept the relay's process alive after it logged event=fatal.
TEST_F(StatusReporterTest, AWaitThatExpiredJustBeforeStopDoesNothing) {
  StatusReporter r = make(0ms, 0ms);  // both waits due at once
  r.start();
  positions = {Lsn(300), Lsn(300)};
  r.confirm_soon();
  // The reactor's turn comes first and queues both expired waits; stop() runs after that,
  // before their handlers.
  boost::asio::post(io, [&] { r.stop(); });
  io.run_for(500ms);
  EXPECT_TRUE(io.stopped()) << "a timer is still armed after stop(): the io_context never ends";
  EXPECT_TRUE(sent.empty()) << sent.size() << " updates after stop()";
  // start() again arms a fresh cadence.
  io.restart();
  r.start();
  ASSERT_TRUE(run_until([&] { return !sent.empty(); }));
  r.stop();
}
