// A fault-injecting HTTP proxy between an AWS client (the relay's SQS or EventBridge sink, or
// aws::SqsClient in a test) and moto, for the tests of throttling, 5xx, per-entry failures and a
// frozen service. It listens on 127.0.0.1 (an ephemeral port, or the one given), serves on a
// thread of its own and forwards each request to moto over a kept-alive connection of its own.
//
//   AwsFaultProxy proxy({moto().endpoint, {{moto().access_key_id, moto().secret_access_key, ""}}});
//   // point the client at proxy.endpoint() (e.g. --aws-endpoint), then at run time:
//   proxy.fail_calls(CallFault::throttling("SendMessageBatch", 3));   // the next 3 calls: 400
//   proxy.fail_calls(CallFault::server_error(503));                   // the next call: 503
//   proxy.fail_entries(EntryFault::group("order-7", 2));  // its next 2 entries: Failed, not stored
//   proxy.freeze(); ...; proxy.thaw();                    // requests held unanswered meanwhile
//   proxy.counters().calls["SendMessageBatch"], .entries_failed, .held, ...
//
// Signatures: the client signs for the proxy's host:port (its endpoint URL is the proxy's), the
// proxy forwards the request as it came (method, target, header names, values and order, body;
// the Host header too), and moto, whose authentication is on, checks the signature against what
// it receives: the one the client computed. A request whose entries the proxy removed has
// another body, so the proxy signs it again with the key of the same access key id from
// `signing_keys` (same date, region, service and signed headers); a key it does not have is
// answered 500 ProxyCannotSign. A response is forwarded as it came, except an answer merged with
// failed entries (its body and Content-Length change).
//
// Faults, each taken by the first request it matches, in the order they were added:
//  (a) CallFault: the whole call answered with an HTTP status and an error of AWS's JSON protocol
//      ({"__type": code, "message": ...}, and x-amzn-query-error when `query_error` is set):
//      before forwarding (the service never saw it) or after (served, its answer lost).
//  (b) EntryFault: in SendMessageBatch or PutEvents, the entries it selects (by index, by
//      MessageGroupId, or any predicate) are removed from the request before it is forwarded, so
//      moto does not store them, and are answered as failed: in SQS's Failed list (SenderFault
//      false, `code`), in EventBridge's Entries at their place (ErrorCode, FailedEntryCount).
//      A call all of whose entries are removed is not forwarded.
//  (c) freeze(): requests that arrive (or are in the proxy) are held before forwarding, or
//      after moto answered (FreezePoint::kAnswer), until thaw().
//  (d) counters(): what came, what was forwarded, what was failed, what is held.
// Thread-safe: the test calls it from its own thread while the proxy serves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "outbox/aws/sigv4.hpp"

namespace outbox_test {

struct CallFault {
  std::string action;  // "SendMessageBatch" (X-Amz-Target's part after '.'); empty: any call
  int times = 1;       // the calls it answers; -1: every one until clear()
  int status = 400;
  std::string code = "ThrottlingException";  // the body's __type; empty: an empty body
  std::string message = "Rate exceeded (injected by the test proxy)";
  std::string query_error;     // x-amzn-query-error's value ("...RequestThrottled;Sender")
  bool after_forward = false;  // forward first: moto serves it, the client gets the fault

  static CallFault throttling(std::string action = "", int times = 1);
  // SQS's own spelling of throttling: AWS.SimpleQueueService.RequestThrottled.
  static CallFault sqs_request_throttled(std::string action = "", int times = 1);
  // 500 InternalFailure or 503 ServiceUnavailable.
  static CallFault server_error(int status, std::string action = "", int times = 1);
};

// One entry of a SendMessageBatch or PutEvents request, as a predicate sees it.
struct BatchEntry {
  std::string action;  // "SendMessageBatch" or "PutEvents"
  std::size_t index = 0;
  std::string id;                // SQS's Id; empty for PutEvents
  std::string group_id;          // SQS's MessageGroupId
  std::string deduplication_id;  // SQS's MessageDeduplicationId
  std::string body;              // SQS's MessageBody or EventBridge's Detail
  std::string detail_type;       // EventBridge's DetailType
};

struct EntryFault {
  std::string action = "SendMessageBatch";  // or "PutEvents"
  std::function<bool(const BatchEntry&)> select;
  int times = 1;  // the entries it fails; -1: every one it selects until clear()
  std::string code = "ThrottlingException";
  std::string message = "Rate exceeded (injected by the test proxy)";

  static EntryFault index(std::size_t i, std::string action = "SendMessageBatch", int times = 1);
  static EntryFault group(std::string group_id, int times = 1);
  static EntryFault where(std::function<bool(const BatchEntry&)> select,
                          std::string action = "SendMessageBatch", int times = 1);
};

enum class FreezePoint {
  kRequest,  // hold before forwarding: moto has not seen it
  kAnswer,   // forward, hold moto's answer: served, not yet answered
};

struct ProxyCounters {
  std::map<std::string, int> calls;  // requests received per action ("" when no X-Amz-Target)
  int forwarded = 0;                 // requests forwarded to moto
  int answered = 0;                  // responses sent to the client (counted as they start)
  int faulted_calls = 0;             // calls answered by a CallFault
  int entries_forwarded = 0;         // batch entries forwarded (SendMessageBatch, PutEvents)
  int entries_failed = 0;            // batch entries removed and answered failed
  int held = 0;                      // requests held by a freeze right now
  int upstream_errors = 0;           // moto could not be reached (the client's connection closed)
  std::vector<BatchEntry> failed;    // the entries failed, in order
};

struct AwsFaultProxyOptions {
  std::string upstream;  // moto's endpoint URL, http://127.0.0.1:PORT
  // Keys to sign a changed request again (matched by access key id).
  std::vector<outbox::aws::Credentials> signing_keys;
  std::uint16_t port = 0;  // 0: an ephemeral port
};

class AwsFaultProxy {
 public:
  // Listens at once; throws std::runtime_error when it cannot.
  explicit AwsFaultProxy(AwsFaultProxyOptions options);
  // Stops serving; held requests are dropped with their connections.
  ~AwsFaultProxy();
  AwsFaultProxy(const AwsFaultProxy&) = delete;
  AwsFaultProxy& operator=(const AwsFaultProxy&) = delete;

  std::uint16_t port() const;
  std::string endpoint() const;  // http://127.0.0.1:PORT

  void fail_calls(CallFault fault);
  void fail_entries(EntryFault fault);
  void freeze(FreezePoint point = FreezePoint::kRequest);
  void thaw();
  // Drops the faults not used up yet (a freeze too: thaws).
  void clear();
  ProxyCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace outbox_test
