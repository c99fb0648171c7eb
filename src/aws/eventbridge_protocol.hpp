// EventBridge's PutEvents bodies without I/O (unit-tested in tests/unit/aws/sqs_protocol_test.cpp
// beside SQS's). Private to src/aws.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "outbox/aws/eventbridge_client.hpp"

namespace outbox::aws {

// Throws std::invalid_argument when EventBridge would refuse the call whole.
void check_put_events(const std::vector<PutEventsEntry>& entries);
std::string build_put_events(const std::vector<PutEventsEntry>& entries);
// `error` set (retryable) when the answer cannot be read or its Entries do not match `sent`.
PutEventsResult parse_put_events(std::string_view body, std::size_t sent);

}  // namespace outbox::aws
