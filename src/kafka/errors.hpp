// librdkafka error codes to the kafka module's ErrorKind. Internal to the kafka module (and its
// unit tests): librdkafka types never appear in include/outbox/kafka.
#pragma once

#include <librdkafka/rdkafka.h>

#include "outbox/kafka/producer.hpp"

namespace outbox::kafka {

// What `err` means for the record it came with (or the produce call that returned it). A code
// outside the enum of the librdkafka built against is final for the record.
ErrorKind classify(rd_kafka_resp_err_t err);

}  // namespace outbox::kafka
