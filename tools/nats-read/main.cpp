// outbox-nats-read: reads a JetStream stream back, for the demo and the bench (there is no `nats`
// CLI on the machines the project runs on).
//   outbox-nats-read --nats URL --stream NAME
//       prints every message: sequence, subject, headers, data
//   outbox-nats-read --nats URL --stream NAME --wait-count N [--timeout-s S]
//       waits until the stream holds at least N messages, then prints the storage times of its
//       first and last ones (ns since the epoch) on one line; exit 1 after S seconds (default 60)
//   outbox-nats-read --nats URL --stream NAME --delete 1
//       deletes the stream (the bench's, once measured)
// Exit codes: 0 done, 1 the server or the stream failed (or the wait timed out), 2 bad flags.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "outbox/nats/stream_client.hpp"

namespace {

int usage(const char* why) {
  std::fprintf(stderr,
               "outbox-nats-read: %s\nusage: outbox-nats-read --nats URL --stream NAME "
               "[--wait-count N [--timeout-s S] | --delete 1]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  outbox::nats::PublisherConfig config;
  std::string stream;
  long long wait_count = -1;
  long long timeout_s = 60;
  long long remove = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage((flag + ": needs a value").c_str());
    const std::string value = argv[++i];
    char* end = nullptr;
    if (flag == "--nats") {
      config.urls = value;
    } else if (flag == "--stream") {
      stream = value;
    } else if (flag == "--wait-count" || flag == "--timeout-s" || flag == "--delete") {
      const long long n = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 0) {
        return usage((flag + ": not a count: " + value).c_str());
      }
      (flag == "--wait-count" ? wait_count : flag == "--delete" ? remove : timeout_s) = n;
    } else {
      return usage(("unknown flag " + flag).c_str());
    }
  }
  if (config.urls.empty() || stream.empty()) return usage("--nats and --stream are required");
  try {
    outbox::nats::StreamClient client(config, std::chrono::seconds(10));
    if (remove != 0) {
      client.remove(stream);
      return 0;
    }
    if (wait_count >= 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
      for (;;) {
        const outbox::nats::StreamState s = client.state(stream);
        if (s.messages >= static_cast<unsigned long long>(wait_count)) {
          std::printf("%lld %lld\n", static_cast<long long>(s.first_ns),
                      static_cast<long long>(s.last_ns));
          return 0;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          std::fprintf(stderr, "outbox-nats-read: %llu of %lld messages in %s after %lld s\n",
                       static_cast<unsigned long long>(s.messages), wait_count, stream.c_str(),
                       timeout_s);
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    for (const outbox::nats::StoredMessage& m : client.messages(stream)) {
      std::printf("  seq=%llu subject=%s\n    headers:", static_cast<unsigned long long>(m.seq),
                  m.subject.c_str());
      for (const auto& [k, v] : m.headers) std::printf(" %s=%s", k.c_str(), v.c_str());
      std::printf("\n    data:    %s\n", m.data.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "outbox-nats-read: %s\n", e.what());
    return 1;
  }
}
