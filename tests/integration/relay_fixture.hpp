// RelayIntegration: the end-to-end fixture of tests/support (outbox_test/e2e_fixture.hpp) as the
// relay and publication tests use it: three aggregate types (so three topics), the outbox table
// without a seq column (seq is the payload's). Included by each integration test file; everything
// in it is internal to the including file.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "outbox_test/e2e_fixture.hpp"

namespace outbox_test {
namespace {

using namespace std::chrono_literals;

constexpr int kAggregates = 50;
constexpr int kAggregateTypes = 3;
// Slack between the test's wall clock around COMMIT and the commit time the relay stamps.
constexpr std::int64_t kTimestampSlackMs = 2000;

class RelayIntegration : public E2eTest {
 protected:
  RelayIntegration() : E2eTest({"it", {"Order", "Customer", "Invoice"}, OUTBOX_TEST_LOG_DIR}) {}
};

}  // namespace
}  // namespace outbox_test
