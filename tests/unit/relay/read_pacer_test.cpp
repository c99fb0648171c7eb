// Paced reading: a busy stream is read in pauses that adapt to the socket's backlog; a trickle is
// read at once.
#include "outbox/relay/read_pacer.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace outbox::relay {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const Clock::time_point t0 = Clock::time_point{} + 1h;
constexpr std::size_t kBusyPerMs = 8192;    // 8 MB/s
constexpr std::size_t kCapacity = 1 << 20;  // the socket's receive buffer
constexpr std::size_t kThin = 1000;         // less than one libpq read (16 KiB)
constexpr std::size_t kMiddle = 100000;     // more than one read, less than a quarter buffer
constexpr std::size_t kDeep = kCapacity / 4 + 1;

TEST(ReadPacer, StartsIdleWithTheMaximumPause) {
  ReadPacer p(500us, t0);
  EXPECT_FALSE(p.busy(t0));
  EXPECT_EQ(p.pause(), 500us);
}

TEST(ReadPacer, BusyFromEightMegabytesPerSecond) {
  ReadPacer p(500us, t0);
  p.on_frame(kBusyPerMs);
  EXPECT_FALSE(p.busy(t0 + 999us)) << "judged over whole milliseconds only";
  EXPECT_TRUE(p.busy(t0 + 1ms));

  ReadPacer slow(500us, t0);
  slow.on_frame(kBusyPerMs - 1);
  EXPECT_FALSE(slow.busy(t0 + 1ms)) << "a trickle is read at once";
}

TEST(ReadPacer, RateIsPerMillisecondOverLongerWindows) {
  ReadPacer p(500us, t0);
  p.on_frame(2 * kBusyPerMs - 1);
  EXPECT_FALSE(p.busy(t0 + 2ms)) << "the bytes of two milliseconds fall short of 8 MB/s";

  ReadPacer q(500us, t0);
  q.on_frame(2 * kBusyPerMs);
  EXPECT_TRUE(q.busy(t0 + 2ms));
}

TEST(ReadPacer, VerdictHoldsUntilTheNextWindowEnds) {
  ReadPacer p(500us, t0);
  p.on_frame(kBusyPerMs);
  ASSERT_TRUE(p.busy(t0 + 1ms));
  EXPECT_TRUE(p.busy(t0 + 1500us)) << "no new window yet";
  EXPECT_FALSE(p.busy(t0 + 2ms)) << "nothing came in the second millisecond";
}

TEST(ReadPacer, WindowsStayOnWholeMilliseconds) {
  // Judged at +1.9 ms over one millisecond: the remaining 0.9 ms belongs to the next window,
  // which therefore ends at +2 ms.
  ReadPacer p(500us, t0);
  p.on_frame(kBusyPerMs);
  ASSERT_TRUE(p.busy(t0 + 1900us));
  EXPECT_FALSE(p.busy(t0 + 2ms));
}

TEST(ReadPacer, NoPauseConfiguredIsNeverBusy) {
  ReadPacer p(0us, t0);
  p.on_frame(100 * kBusyPerMs);
  EXPECT_FALSE(p.busy(t0 + 1ms));
}

TEST(ReadPacer, DeepBacklogReadsNowAndHalvesThePause) {
  ReadPacer p(1000us, t0);
  EXPECT_TRUE(p.read_now(kDeep, kCapacity));
  EXPECT_EQ(p.pause(), 500us);
  EXPECT_TRUE(p.read_now(kDeep, kCapacity));
  EXPECT_EQ(p.pause(), 250us);
  EXPECT_FALSE(p.read_now(kCapacity / 4, kCapacity)) << "a quarter of the buffer is not deep";
  EXPECT_EQ(p.pause(), 250us);
}

TEST(ReadPacer, PauseNeverHalvesBelowTheFloor) {
  ReadPacer p(1000us, t0);
  for (int i = 0; i < 20; ++i) p.read_now(kDeep, kCapacity);
  EXPECT_EQ(p.pause(), 25us);

  ReadPacer tiny(10us, t0);  // a maximum below the floor is the floor
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(tiny.read_now(kDeep, kCapacity));
  EXPECT_EQ(tiny.pause(), 10us);
}

TEST(ReadPacer, ThinBacklogGrowsThePauseUpToTheMaximum) {
  ReadPacer p(1000us, t0);
  for (int i = 0; i < 20; ++i) p.read_now(kDeep, kCapacity);
  ASSERT_EQ(p.pause(), 25us);
  EXPECT_FALSE(p.read_now(kThin, kCapacity));
  EXPECT_EQ(p.pause(), 32us) << "a quarter more, and a microsecond so that it grows from 1 us";
  EXPECT_FALSE(p.read_now(kThin, kCapacity));
  EXPECT_EQ(p.pause(), 41us);
  for (int i = 0; i < 100; ++i) p.read_now(kThin, kCapacity);
  EXPECT_EQ(p.pause(), 1000us);
}

TEST(ReadPacer, MiddleBacklogKeepsThePause) {
  ReadPacer p(1000us, t0);
  p.read_now(kDeep, kCapacity);
  ASSERT_EQ(p.pause(), 500us);
  EXPECT_FALSE(p.read_now(kMiddle, kCapacity));
  EXPECT_EQ(p.pause(), 500us);
}

}  // namespace
}  // namespace outbox::relay
