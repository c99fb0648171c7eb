// Driving an io_context from a test: run it until a condition holds or a deadline passes, run a
// coroutine on it to its end the same way, and a ticking timer that shows the io thread is free.
// Header-only (Boost.Asio). Everything runs on the test's thread.
#pragma once

// clang-format off
// Boost 1.74's Asio headers use std::exchange without including <utility>: it must come first.
#include <utility>
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <variant>

namespace outbox_test {

using namespace std::chrono_literals;

// Runs `io` until `done` holds or `deadline` passed; returns whether `done` holds. The deadline
// is not a measure: the sanitizer build's unit tests run at nice 10 beside the test lanes, where
// a starved test waited 10 s for its first report from the mock cluster.
inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::milliseconds deadline = 60s) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!done() && std::chrono::steady_clock::now() < until) {
    io.restart();
    io.run_one_for(10ms);
  }
  return done();
}

// Runs `io` for `d`, to show that nothing happens meanwhile.
inline void run_for(boost::asio::io_context& io, std::chrono::milliseconds d) {
  io.restart();
  io.run_for(d);
}

// A coroutine spawned on the io_context: whether it ended, how, and its value.
template <typename T>
struct Spawned {
  bool done = false;
  std::exception_ptr error;
  std::optional<T> value;
};

template <typename T>
std::shared_ptr<Spawned<T>> spawn(boost::asio::io_context& io, boost::asio::awaitable<T> task) {
  auto s = std::make_shared<Spawned<T>>();
  boost::asio::co_spawn(io, std::move(task), [s](std::exception_ptr e, T v) {
    s->error = e;
    if (!e) s->value = std::move(v);
    s->done = true;
  });
  return s;
}

inline std::shared_ptr<Spawned<std::monostate>> spawn(boost::asio::io_context& io,
                                                      boost::asio::awaitable<void> task) {
  auto s = std::make_shared<Spawned<std::monostate>>();
  boost::asio::co_spawn(io, std::move(task), [s](std::exception_ptr e) {
    s->error = e;
    if (!e) s->value.emplace();
    s->done = true;
  });
  return s;
}

// Runs `task` to its end (its exception rethrown); nullopt when it had not ended by `deadline`.
template <typename T>
auto run(boost::asio::io_context& io, boost::asio::awaitable<T> task,
         std::chrono::milliseconds deadline = 60s) {
  auto s = spawn(io, std::move(task));
  run_until(
      io, [&] { return s->done; }, deadline);
  if (s->error) std::rethrow_exception(s->error);
  return s->value;
}

// A timer on the io_context that ticks every `period` while it lives, calling `on_tick`: it
// fires only while nothing blocks the io thread.
class Ticker {
 public:
  Ticker(boost::asio::io_context& io, std::chrono::milliseconds period,
         std::function<void()> on_tick = {})
      : state_(std::make_shared<State>(io, period, std::move(on_tick))) {
    arm(state_);
  }
  // A tick whose timer had already expired is not cancelled by cancel(): its handler may still
  // be waiting in the io_context's queue, and runs later (in the next run, maybe after this
  // Ticker is gone) with no error. The state it touches is shared with the handler, and
  // `stopped` keeps it from ticking again.
  ~Ticker() {
    state_->stopped = true;
    state_->timer.cancel();
  }
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;
  int ticks() const { return state_->ticks; }

 private:
  struct State {
    State(boost::asio::io_context& io, std::chrono::milliseconds p, std::function<void()> f)
        : timer(io), period(p), on_tick(std::move(f)) {}
    boost::asio::steady_timer timer;
    std::chrono::milliseconds period;
    std::function<void()> on_tick;
    int ticks = 0;
    bool stopped = false;
  };
  static void arm(const std::shared_ptr<State>& state) {
    state->timer.expires_after(state->period);
    state->timer.async_wait([state](const boost::system::error_code& ec) {
      if (ec || state->stopped) return;
      ++state->ticks;
      if (state->on_tick) state->on_tick();
      arm(state);
    });
  }
  std::shared_ptr<State> state_;
};

}  // namespace outbox_test
