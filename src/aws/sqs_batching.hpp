// The SQS sink's logic without I/O (unit-tested in tests/unit/aws/sqs_batching_test.cpp):
// a sink::Record mapped to an SQS message (map_record), and the order of sending
// (GroupScheduler: batches within SQS's limits, at most one entry of a message group in flight).
// Private to src/aws.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "outbox/aws/sqs_client.hpp"
#include "outbox/sink/record.hpp"

namespace outbox::aws {

// The message attributes the sink adds beside the record's headers.
inline constexpr std::string_view kBodyAttribute = "outbox.body";        // base64, null, empty
inline constexpr std::string_view kHeadersAttribute = "outbox.headers";  // the rest, as JSON
inline constexpr std::string_view kKeyAttribute = "key";
inline constexpr std::string_view kTopicAttribute = "topic";  // the rendered --topic

// Text SQS takes in a body or a String attribute: valid UTF-8 of XML's characters (#x9, #xA,
// #xD, #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF).
bool sqs_text(std::string_view text);
// Valid UTF-8 (any code point but surrogates).
bool utf8_text(std::string_view text);
// A MessageGroupId or MessageDeduplicationId as SQS takes it: 1-128 of ASCII 0x21-0x7E.
bool sqs_id(std::string_view text);
// A message attribute's name as SQS takes it: 1-256 of A-Z a-z 0-9 _ - ., not starting or
// ending with '.', no "..", not starting with "AWS." or "Amazon." (any case).
bool sqs_attribute_name(std::string_view name);
// `text` when sqs_id(text), else "sha256:" + the hex SHA-256 of it (71 characters): the same
// text always gives the same id, so a group stays one group.
std::string sqs_id_for(std::string_view text);

struct MappedMessage {
  SqsSendEntry entry;       // Id left empty (the publisher numbers the entries of a call)
  std::string error;        // not empty: the record cannot be an SQS message (final)
  bool size_error = false;  // with error: over the queue's MaximumMessageSize
};

// The SQS message of a record (docs/aws.md, "The message"):
// - body: the value when it is SQS text; else its base64 with attribute outbox.body=base64; a
//   NULL value is the body "null" with outbox.body=null, an empty one "null" with
//   outbox.body=empty (SQS refuses an empty body).
// - FIFO: MessageGroupId = sqs_id_for(key), or of the topic for a record without key;
//   MessageDeduplicationId = sqs_id_for(the id header), or, without one, of topic, key and value.
// - attributes: id, type, key, topic (String; Binary when a value is not SQS text), outbox.body,
//   headers named outbox.*, then the other headers in order; a header with a NULL or empty value
//   is left out (SQS refuses an empty attribute). Past SQS's 10, and for a header whose name SQS
//   refuses, the 10th attribute is outbox.headers: a JSON object of the rest (name -> value), so
//   nothing is dropped; a value there that is not UTF-8 makes the record unsendable.
// - over `max_message_size` (body and attributes, as SQS counts): unsendable, size_error.
MappedMessage map_record(const sink::Record& record, bool fifo, std::size_t max_message_size);

// The order of sending. Entries are added in the relay's order; each belongs to a message group
// (empty: none, a standard queue: every entry on its own). A batch holds at most one entry of a
// group, and no entry of a group goes while another of its group is in flight or waits for a
// retry: SQS answers each entry on its own, so a refused or throttled entry followed by a later
// one of its group that passed would reorder the group. Other groups flow.
class GroupScheduler {
 public:
  using Clock = std::chrono::steady_clock;
  using Seq = std::uint64_t;

  // Seqs must increase.
  void add(Seq seq, const std::string& group, std::size_t bytes);
  // The next batch, marked in flight: at most `max_entries` entries and `max_bytes` together,
  // from groups with nothing in flight and no retry pending before `now`, each group's first
  // entry. Empty when none is ready.
  std::vector<Seq> next_batch(std::size_t max_entries, std::size_t max_bytes,
                              Clock::time_point now);
  // Acknowledged (or given up for good): gone; the next entry of its group may go.
  void done(Seq seq);
  // Failed, to be sent again not before `at`, still the first of its group.
  void retry(Seq seq, Clock::time_point at);
  // The earliest pending retry.
  std::optional<Clock::time_point> next_retry() const;
  // Forgets everything.
  void clear();
  // Entries held (waiting, in flight or to be retried).
  std::size_t held() const { return entries_.size(); }
  std::size_t in_flight() const { return in_flight_; }

 private:
  struct Entry {
    std::string group;
    std::size_t bytes = 0;
  };
  struct Group {
    std::deque<Seq> entries;
    bool busy = false;  // its first entry is in flight or waits for a retry
  };
  void make_ready(const std::string& group);

  std::map<Seq, Entry> entries_;
  std::unordered_map<std::string, Group> groups_;
  std::deque<std::string> ready_;                          // groups whose first entry may go
  std::multimap<Clock::time_point, std::string> delayed_;  // groups waiting for a retry
  std::size_t in_flight_ = 0;
};

}  // namespace outbox::aws
