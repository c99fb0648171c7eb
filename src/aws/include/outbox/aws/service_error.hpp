// What an AWS call's failure means for the caller, one classification for every service client
// of this module (SQS, EventBridge): whether to send again, give up on an entry, or stop.
#pragma once

#include <string>

namespace outbox::aws {

enum class FailureKind {
  // Throttled, a 5xx, an internal error, a transport failure (connect, TLS, timeout, closed), an
  // unreadable answer: send again later with backoff. The request may have been served (a lost
  // answer): FIFO deduplication ids make a resend harmless within the deduplication interval.
  kRetryable,
  // The service refused this entry, or this request as invalid (too large, a bad parameter, a
  // queue that does not exist): sending it again gets the same answer.
  kFinal,
  // The service refused the client: its signature, its credentials or their access. Nothing
  // this client sends will pass until its credentials change.
  kClient,
};

const char* to_string(FailureKind kind);

struct ServiceError {
  FailureKind kind = FailureKind::kRetryable;
  int http_status = 0;  // 0: no response (transport)
  std::string code;     // the service's error code ("ThrottlingException"), or "Transport"
  // One line for a log or an exit message: the service, the code and what it said; with kClient,
  // the credentials' source and the access key id's last four characters. Never a secret.
  std::string message;
};

}  // namespace outbox::aws
