// The module's one classification of nats.c's outcomes into sink::ErrorKind.
#pragma once

#include <nats/nats.h>

#include <string>

#include "outbox/sink/record.hpp"

namespace outbox::nats {

struct Classified {
  sink::ErrorKind kind = sink::ErrorKind::kNone;
  std::string name;  // a stable upper-case name for metrics and logs, e.g. NO_STREAM
};

// A publish acknowledgement carrying an error: the client's status and, when the server
// answered with one, its JetStream error code.
Classified classify_ack_error(natsStatus status, jsErrCode code);

// A status returned by a call (publish, connect).
Classified classify_status(natsStatus status);

}  // namespace outbox::nats
