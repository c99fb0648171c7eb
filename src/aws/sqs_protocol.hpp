// SQS's JSON bodies: the requests built and the answers read, without I/O (unit-tested in
// tests/unit/aws/sqs_protocol_test.cpp). Private to src/aws.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "outbox/aws/sqs_client.hpp"

namespace outbox::aws {

// Throws std::invalid_argument when SQS would refuse the batch whole (see send_message_batch).
void check_batch(const std::vector<SqsSendEntry>& entries);

std::string build_send_message_batch(std::string_view queue_url,
                                     const std::vector<SqsSendEntry>& entries);
std::string build_get_queue_attributes(std::string_view queue_url);

// The Successful and Failed lists of a SendMessageBatch answer; `error` set (retryable) when the
// answer cannot be read or leaves an entry of `sent` unanswered.
SqsBatchResult parse_send_message_batch(std::string_view body,
                                        const std::vector<SqsSendEntry>& sent);
SqsQueueAttributesResult parse_get_queue_attributes(std::string_view body);

}  // namespace outbox::aws
