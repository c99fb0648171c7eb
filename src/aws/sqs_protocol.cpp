#include "sqs_protocol.hpp"

#include <simdjson.h>

#include <charconv>
#include <set>
#include <stdexcept>

#include "json_protocol.hpp"

namespace outbox::aws {

namespace {

bool valid_entry_id(std::string_view id) {
  if (id.empty() || id.size() > 80) return false;
  for (const char c : id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool binary_type(std::string_view data_type) { return data_type.starts_with("Binary"); }

ServiceError unreadable(std::string what) {
  ServiceError error;
  error.kind = FailureKind::kRetryable;
  error.code = "UnreadableAnswer";
  error.message = "SQS: " + what;
  return error;
}

}  // namespace

std::size_t message_size(const SqsSendEntry& entry) {
  std::size_t size = entry.body.size();
  for (const auto& a : entry.attributes)
    size += a.name.size() + a.data_type.size() + a.value.size();
  return size;
}

void check_batch(const std::vector<SqsSendEntry>& entries) {
  if (entries.empty()) throw std::invalid_argument("SendMessageBatch: no entry");
  if (entries.size() > kSqsMaxBatchEntries) {
    throw std::invalid_argument("SendMessageBatch: " + std::to_string(entries.size()) +
                                " entries, SQS takes at most 10");
  }
  std::set<std::string_view> ids;
  std::size_t total = 0;
  for (const auto& e : entries) {
    if (!valid_entry_id(e.id)) {
      throw std::invalid_argument("SendMessageBatch: entry id \"" + e.id.substr(0, 100) +
                                  "\" is not 1-80 of A-Z a-z 0-9 - _");
    }
    if (!ids.insert(e.id).second) {
      throw std::invalid_argument("SendMessageBatch: entry id \"" + e.id + "\" twice");
    }
    if (e.attributes.size() > kSqsMaxMessageAttributes) {
      throw std::invalid_argument("SendMessageBatch: entry \"" + e.id + "\" has " +
                                  std::to_string(e.attributes.size()) +
                                  " message attributes, SQS takes at most 10");
    }
    total += message_size(e);
  }
  if (total > kSqsMaxBatchBytes) {
    throw std::invalid_argument("SendMessageBatch: " + std::to_string(total) +
                                " bytes, SQS takes at most " + std::to_string(kSqsMaxBatchBytes) +
                                " per call");
  }
}

std::string build_send_message_batch(std::string_view queue_url,
                                     const std::vector<SqsSendEntry>& entries) {
  std::string out;
  std::size_t reserve = 64 + queue_url.size();
  for (const auto& e : entries) reserve += 128 + message_size(e) * 2;
  out.reserve(reserve);
  out += "{\"QueueUrl\":";
  append_json_string(out, queue_url);
  out += ",\"Entries\":[";
  bool first = true;
  for (const auto& e : entries) {
    if (!first) out += ',';
    first = false;
    out += "{\"Id\":";
    append_json_string(out, e.id);
    out += ",\"MessageBody\":";
    append_json_string(out, e.body);
    if (!e.group_id.empty()) {
      out += ",\"MessageGroupId\":";
      append_json_string(out, e.group_id);
    }
    if (!e.deduplication_id.empty()) {
      out += ",\"MessageDeduplicationId\":";
      append_json_string(out, e.deduplication_id);
    }
    if (e.delay_seconds) out += ",\"DelaySeconds\":" + std::to_string(*e.delay_seconds);
    if (!e.attributes.empty()) {
      out += ",\"MessageAttributes\":{";
      bool first_attribute = true;
      for (const auto& a : e.attributes) {
        if (!first_attribute) out += ',';
        first_attribute = false;
        append_json_string(out, a.name);
        out += ":{\"DataType\":";
        append_json_string(out, a.data_type);
        if (binary_type(a.data_type)) {
          out += ",\"BinaryValue\":";
          append_json_string(out, base64(a.value));
        } else {
          out += ",\"StringValue\":";
          append_json_string(out, a.value);
        }
        out += '}';
      }
      out += '}';
    }
    out += '}';
  }
  out += "]}";
  return out;
}

std::string build_get_queue_attributes(std::string_view queue_url) {
  std::string out = "{\"QueueUrl\":";
  append_json_string(out, queue_url);
  out +=
      ",\"AttributeNames\":[\"FifoQueue\",\"ContentBasedDeduplication\","
      "\"MaximumMessageSize\"]}";
  return out;
}

SqsBatchResult parse_send_message_batch(std::string_view body,
                                        const std::vector<SqsSendEntry>& sent) {
  SqsBatchResult result;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(body.data(), body.size()).get(doc) != simdjson::SUCCESS || !doc.is_object()) {
    result.error = unreadable("SendMessageBatch answered no JSON object");
    return result;
  }
  std::set<std::string, std::less<>> answered;
  simdjson::dom::array list;
  if (doc["Successful"].get(list) == simdjson::SUCCESS) {
    for (simdjson::dom::element item : list) {
      SqsEntrySuccess s;
      std::string_view v;
      if (item["Id"].get(v) != simdjson::SUCCESS) {
        result.error = unreadable("SendMessageBatch: a Successful entry without Id");
        return result;
      }
      s.id = std::string(v);
      if (item["MessageId"].get(v) == simdjson::SUCCESS) s.message_id = std::string(v);
      if (item["SequenceNumber"].get(v) == simdjson::SUCCESS) s.sequence_number = std::string(v);
      if (item["MD5OfMessageBody"].get(v) == simdjson::SUCCESS) s.md5_of_body = std::string(v);
      answered.insert(s.id);
      result.successful.push_back(std::move(s));
    }
  }
  if (doc["Failed"].get(list) == simdjson::SUCCESS) {
    for (simdjson::dom::element item : list) {
      SqsEntryFailure f;
      std::string_view v;
      if (item["Id"].get(v) != simdjson::SUCCESS) {
        result.error = unreadable("SendMessageBatch: a Failed entry without Id");
        return result;
      }
      f.id = std::string(v);
      if (item["Code"].get(v) == simdjson::SUCCESS) f.code = std::string(v);
      if (item["Message"].get(v) == simdjson::SUCCESS) f.message = std::string(v);
      bool sender_fault = true;
      if (item["SenderFault"].get(sender_fault) != simdjson::SUCCESS) sender_fault = true;
      f.sender_fault = sender_fault;
      const FailureKind by_code = classify(f.code, 400);
      // The service's own fault, or throttling: the entry may pass later.
      f.kind = !sender_fault || by_code == FailureKind::kRetryable ? FailureKind::kRetryable
               : by_code == FailureKind::kClient                   ? FailureKind::kClient
                                                                   : FailureKind::kFinal;
      answered.insert(f.id);
      result.failed.push_back(std::move(f));
    }
  }
  for (const auto& e : sent) {
    if (!answered.contains(e.id)) {
      result.error = unreadable("SendMessageBatch left entry \"" + e.id + "\" unanswered");
      result.successful.clear();
      result.failed.clear();
      return result;
    }
  }
  return result;
}

SqsQueueAttributesResult parse_get_queue_attributes(std::string_view body) {
  SqsQueueAttributesResult result;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::object attributes;
  if (parser.parse(body.data(), body.size()).get(doc) != simdjson::SUCCESS ||
      doc["Attributes"].get(attributes) != simdjson::SUCCESS) {
    result.error = unreadable("GetQueueAttributes answered no Attributes");
    return result;
  }
  std::string_view v;
  if (attributes["FifoQueue"].get(v) == simdjson::SUCCESS) result.attributes.fifo = v == "true";
  if (attributes["ContentBasedDeduplication"].get(v) == simdjson::SUCCESS) {
    result.attributes.content_based_deduplication = v == "true";
  }
  if (attributes["MaximumMessageSize"].get(v) == simdjson::SUCCESS) {
    std::size_t size = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), size);
    if (ec != std::errc() || end != v.data() + v.size() || size == 0) {
      result.error = unreadable("GetQueueAttributes: MaximumMessageSize \"" +
                                std::string(v.substr(0, 40)) + "\"");
      return result;
    }
    result.attributes.maximum_message_size = size;
  }
  if (attributes["DeduplicationScope"].get(v) == simdjson::SUCCESS) {
    result.attributes.deduplication_scope = std::string(v);
  }
  if (attributes["FifoThroughputLimit"].get(v) == simdjson::SUCCESS) {
    result.attributes.fifo_throughput_limit = std::string(v);
  }
  if (attributes["KmsMasterKeyId"].get(v) == simdjson::SUCCESS) {
    result.attributes.kms_master_key_id = std::string(v);
  }
  return result;
}

}  // namespace outbox::aws
