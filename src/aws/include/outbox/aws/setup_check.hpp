// What `outbox-relay setup --sqs QUEUE_URL` and `setup --eventbridge BUS` check in the account
// before the database is touched: blocking calls on an io_context of their own, with a deadline,
// that read and never create or change anything (docs/aws.md#what-setup-checks).
//
// SQS (GetQueueAttributes, "All"): the queue exists and the credentials may read it; FIFO (each
// aggregate's events in order) or standard (at-least-once, no order: a warning); content-based
// deduplication (harmless: the relay sends an explicit MessageDeduplicationId); the queue's
// MaximumMessageSize; a customer managed KMS key (the relay then needs kms:GenerateDataKey). The
// same for the dead-letter queue (--sqs-dlq). EventBridge (DescribeEventBus): the bus exists, and
// the dead-letter bus. A queue or bus that does not exist is an error naming it, with the AWS CLI
// command that would create it: setup creates nothing in the account.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "outbox/aws/credentials.hpp"
#include "outbox/aws/eventbridge_publisher.hpp"
#include "outbox/aws/sqs_publisher.hpp"

namespace outbox::aws {

struct SetupCheck {
  std::vector<std::string> lines;     // what was found, one line each (stdout)
  std::vector<std::string> warnings;  // usable, but not what the relay is best at (stderr)
  std::string error;                  // empty: usable; else one line (exit 1)
};

// Throws SqsConfigError (a queue URL, endpoint or region that cannot be used: exit 2) or
// CredentialsError (a shared file that cannot be read: exit 1). A service that does not answer
// within `timeout` (retried with backoff while throttled or unreachable) is an error.
SetupCheck check_sqs_setup(const SqsSinkOptions& options, const EnvLookup& env,
                           std::chrono::milliseconds timeout);

// Throws EventBridgeConfigError or CredentialsError, as above.
SetupCheck check_eventbridge_setup(const EventBridgeSinkOptions& options, const EnvLookup& env,
                                   std::chrono::milliseconds timeout);

}  // namespace outbox::aws
