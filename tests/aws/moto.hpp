// The moto server of scripts/aws-up.sh for the aws tests: started (or found running) once per
// test process, its endpoint, region and test key read back from the state folder's env file.
// Plus a small loop helper: run the io_context until a callback's result came, with a deadline.
#pragma once

// clang-format off
#include <utility>
// clang-format on
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace outbox_test {

struct Moto {
  std::string endpoint;
  std::string region;
  std::string access_key_id;
  std::string secret_access_key;
};

inline const Moto& moto() {
  static const Moto server = [] {
    // aws-up.sh is idempotent (a running server: 0.1 s); one moto for every lane, in the default
    // state folder (.local), whose env file it writes.
    const std::string command =
        "env -u OUTBOX_STATE_DIR bash -c 'set -e; source \"" + std::string(OUTBOX_SOURCE_DIR) +
        "/scripts/lib.sh\"; mkdir -p \"$SHARED_DIR\"; "
        // One start at a time: test processes run in parallel (ctest -j) would race for the port.
        // -o: the lock's descriptor is not inherited, else the moto_server a start leaves running
        // would hold the lock for its life and every later test would wait on it.
        "flock -o -w 300 \"$SHARED_DIR/.aws-up.lock\" \"$REPO/scripts/aws-up.sh\" >/dev/null; "
        "source \"$ENV_FILE\"; "
        "printf \"%s\\n\" \"$OUTBOX_AWS_ENDPOINT\" \"$OUTBOX_AWS_REGION\" "
        "\"$OUTBOX_AWS_ACCESS_KEY_ID\" \"$OUTBOX_AWS_SECRET_ACCESS_KEY\"'";
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) throw std::runtime_error("cannot run scripts/aws-up.sh");
    std::string out;
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
    if (::pclose(pipe) != 0) throw std::runtime_error("scripts/aws-up.sh failed");
    std::istringstream lines(out);
    Moto m;
    std::getline(lines, m.endpoint);
    std::getline(lines, m.region);
    std::getline(lines, m.access_key_id);
    std::getline(lines, m.secret_access_key);
    if (m.endpoint.empty() || m.secret_access_key.empty()) {
      throw std::runtime_error("scripts/aws-up.sh left no OUTBOX_AWS_* variables");
    }
    return m;
  }();
  return server;
}

// Starts an operation with a completion callback and runs `io` until it completed, at most
// `timeout`. None when it did not.
template <class Result>
std::optional<Result> await_result(boost::asio::io_context& io,
                                   const std::function<void(std::function<void(Result)>)>& start,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  std::optional<Result> result;
  start([&result](Result r) { result = std::move(r); });
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!result && std::chrono::steady_clock::now() < deadline) {
    // Again each time: an io_context that ran out of work stays stopped, and would not run what
    // another thread posts to it later (the credentials chain's file reads).
    io.restart();
    io.run_one_for(std::chrono::milliseconds(50));
  }
  return result;
}

}  // namespace outbox_test
