#include "errors.hpp"

namespace outbox::nats {

using sink::ErrorKind;

Classified classify_ack_error(natsStatus status, jsErrCode code) {
  // The server's JetStream error codes are an open set (new servers add codes): the ones that
  // say something about the record are named, any other refusal is final for the record.
  switch (code) {
    case JSStreamMessageExceedsMaximumErr:
      return {ErrorKind::kSize, "MESSAGE_EXCEEDS_MAXIMUM"};
    case JSInsufficientResourcesErr:
    case JSMemoryResourcesExceededErr:
    case JSStorageResourcesExceededErr:
      return {ErrorKind::kRecord, "INSUFFICIENT_RESOURCES"};
    case JSStreamStoreFailedErr:
      // Also a stream at its limits with discard new ("maximum messages exceeded").
      return {ErrorKind::kRecord, "STORE_FAILED"};
    case JSStreamNotFoundErr:
      return {ErrorKind::kRecord, "NO_STREAM"};
    case JSNotEnabledErr:
    case JSNotEnabledForAccountErr:
      return {ErrorKind::kRecord, "JETSTREAM_NOT_ENABLED"};
    default:
      break;
  }
  if (code != 0) return {ErrorKind::kRecord, "REFUSED_" + std::to_string(static_cast<int>(code))};
  return classify_status(status);
}

Classified classify_status(natsStatus status) {
  switch (status) {
    case NATS_OK:
      return {ErrorKind::kNone, ""};
    // No stream captures the subject: the server answers "no responders" to the publish.
    case NATS_NO_RESPONDERS:
      return {ErrorKind::kRecord, "NO_STREAM"};
    case NATS_MAX_PAYLOAD:
      return {ErrorKind::kSize, "MAX_PAYLOAD"};
    case NATS_NOT_PERMITTED:
    case NATS_CONNECTION_AUTH_FAILED:
    case NATS_SECURE_CONNECTION_WANTED:
    case NATS_SECURE_CONNECTION_REQUIRED:
    case NATS_SSL_ERROR:
      return {ErrorKind::kAuthorization, natsStatus_GetText(status)};
    case NATS_TIMEOUT:
      return {ErrorKind::kTransient, "ACK_TIMEOUT"};
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NOT_YET_CONNECTED:
    case NATS_IO_ERROR:
    case NATS_NO_SERVER:
    case NATS_STALE_CONNECTION:
    case NATS_INSUFFICIENT_BUFFER:
    case NATS_DRAINING:
      return {ErrorKind::kTransient, "CONNECTION_LOST"};
    default:
      // Client-side states (invalid argument, no memory, ...): final for the record.
      return {ErrorKind::kRecord, natsStatus_GetText(status)};
  }
}

}  // namespace outbox::nats
