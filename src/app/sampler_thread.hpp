// A thread of its own for a figure that takes a blocking call to measure (libpq: the backlog
// count, a standby's copy of the slot): measured every `every`, the last result kept for
// /metrics. Private to the app module (BacklogSampler, FailoverSampler).
//
// The thread owns what it shares with its owner (it may outlive it by one measure): last() is
// thread-safe; start() and the destructor are called from the owning thread. The destructor stops
// the thread and waits for a measure in progress at most 5 s (a server that does not answer must
// not hold the process), then leaves the thread to end on its own when that measure returns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace outbox::app {

template <class Sample>
class SamplerThread {
 public:
  // Records a measure into the sample, under the lock; `stopping`: the owner is stopping.
  using Record = std::function<void(Sample& sample, bool stopping)>;
  // Measures on the thread, without the lock (it blocks), and returns how to record it.
  using Measure = std::function<Record()>;

  SamplerThread() = default;
  ~SamplerThread() {
    if (!thread_.joinable()) return;
    std::unique_lock lock(state_->mutex);
    state_->stop = true;
    state_->wake.notify_all();
    const bool done =
        state_->wake.wait_for(lock, std::chrono::seconds(5), [this] { return state_->done; });
    lock.unlock();
    if (done) {
      thread_.join();
    } else {
      thread_.detach();  // owns its state; ends when its measure returns
    }
  }
  SamplerThread(const SamplerThread&) = delete;
  SamplerThread& operator=(const SamplerThread&) = delete;

  // Measures now and every `every` after, or first after one interval (`wait_first`).
  void start(Measure measure, std::chrono::milliseconds every, bool wait_first) {
    thread_ = std::thread(loop, state_, std::move(measure), every, wait_first);
  }

  Sample last() const {
    std::lock_guard lock(state_->mutex);
    return state_->sample;
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable wake;
    bool stop = false;
    bool done = false;
    Sample sample;
  };

  static void loop(std::shared_ptr<State> state, Measure measure, std::chrono::milliseconds every,
                   bool wait_first) {
    // true when stopped meanwhile (then the thread ends, done said).
    const auto pause = [&](std::unique_lock<std::mutex>& lock) {
      if (!state->wake.wait_for(lock, every, [&] { return state->stop; })) return false;
      state->done = true;
      state->wake.notify_all();
      return true;
    };
    if (wait_first) {
      std::unique_lock lock(state->mutex);
      if (pause(lock)) return;
    }
    for (;;) {
      const Record record = measure();
      std::unique_lock lock(state->mutex);
      record(state->sample, state->stop);
      if (pause(lock)) return;
    }
  }

  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;
};

}  // namespace outbox::app
