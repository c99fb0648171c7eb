// The lane's environment (docs/testing.md, "Lanes"): scripts/test.sh runs the end-to-end tests
// in lanes, each with its own PostgreSQL, Kafka and NATS on ports of its own, and hands them out
// with ctest's resource groups (each such test asks for `lanes:1`). ctest tells the test process
// which lane it got in CTEST_RESOURCE_GROUP_0_LANES ("id:pg15-2,slots:1"); test.sh wrote that
// lane's variables (OUTBOX_PG, OUTBOX_BROKERS, the ports, OUTBOX_STATE_DIR...) to
// $OUTBOX_LANES_DIR/<id>.env, one NAME=VALUE a line. They are put into this process's environment
// before main(), so that the fixtures and every script a test runs (kafka-up.sh, pg-up.sh, a
// restart) see that lane's servers. Without ctest's variables (a run by hand, or ctest without a
// resource spec) nothing changes.
#include "outbox_test/support.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace outbox_test {

namespace {

[[noreturn]] void lane_error(const std::string& what) {
  std::fprintf(stderr, "outbox test lane: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(2);
}

// The lane's id from "id:NAME,slots:1"; empty when ctest gave no lane.
std::string lane_id() {
  const char* groups = std::getenv("CTEST_RESOURCE_GROUP_COUNT");
  // ctest sets it, to 0, for a test that asked for no resource (run with a resource spec).
  if (groups == nullptr || *groups == '\0' || std::string(groups) == "0") return {};
  const char* spec = std::getenv("CTEST_RESOURCE_GROUP_0_LANES");
  if (spec == nullptr) {
    lane_error("ctest gave resource groups but no CTEST_RESOURCE_GROUP_0_LANES");
  }
  const std::string text = spec;
  const auto start = text.find("id:");
  if (start == std::string::npos) lane_error("no id in CTEST_RESOURCE_GROUP_0_LANES=" + text);
  const auto end = text.find(',', start);
  return text.substr(start + 3, end == std::string::npos ? std::string::npos : end - start - 3);
}

// At exit, one line with this test process's seconds is appended to <id>.times beside the
// lane's variables: test.sh sums each lane's busy time from them.
std::string times_path;
std::chrono::steady_clock::time_point started;

void record_time() {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const std::string line = std::to_string(seconds) + "\n";
  const int fd = ::open(times_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t n = ::write(fd, line.data(), line.size());  // one append
  ::close(fd);
}

bool load() {
  const std::string id = lane_id();
  if (id.empty()) return false;
  const char* dir = std::getenv("OUTBOX_LANES_DIR");
  if (dir == nullptr || *dir == '\0') lane_error("lane " + id + " but OUTBOX_LANES_DIR is not set");
  const std::string path = std::string(dir) + "/" + id + ".env";
  std::ifstream in(path);
  if (!in) lane_error("cannot read " + path + " (lane " + id + ")");
  int count = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0) lane_error(path + ": not NAME=VALUE: " + line);
    ::setenv(line.substr(0, eq).c_str(), line.substr(eq + 1).c_str(), 1);
    ++count;
  }
  if (count == 0) lane_error(path + " is empty");
  times_path = std::string(dir) + "/" + id + ".times";
  started = std::chrono::steady_clock::now();
  std::atexit(record_time);
  return true;
}

// Before main(): gtest's fixtures and static objects of the test read the environment later.
[[maybe_unused]] const bool loaded_at_start = load_lane_env();

}  // namespace

bool load_lane_env() {
  static const bool loaded = load();
  return loaded;
}

}  // namespace outbox_test
