#include "outbox/aws/eventbridge_client.hpp"

#include <simdjson.h>

#include <stdexcept>

#include "eventbridge_protocol.hpp"
#include "json_protocol.hpp"

namespace outbox::aws {

std::size_t entry_size(const PutEventsEntry& entry) {
  std::size_t size = entry.source.size() + entry.detail_type.size() + entry.detail.size();
  for (const auto& r : entry.resources) size += r.size();
  return size;
}

void check_put_events(const std::vector<PutEventsEntry>& entries) {
  if (entries.empty()) throw std::invalid_argument("PutEvents: no entry");
  if (entries.size() > kPutEventsMaxEntries) {
    throw std::invalid_argument("PutEvents: " + std::to_string(entries.size()) +
                                " entries, EventBridge takes at most 10");
  }
  std::size_t total = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e.source.empty() || e.detail_type.empty() || e.detail.empty()) {
      throw std::invalid_argument("PutEvents: entry " + std::to_string(i) +
                                  " lacks Source, DetailType or Detail");
    }
    total += entry_size(e);
  }
  if (total > kPutEventsMaxBytes) {
    throw std::invalid_argument("PutEvents: " + std::to_string(total) +
                                " bytes, EventBridge takes at most 262144 per call");
  }
}

std::string build_put_events(const std::vector<PutEventsEntry>& entries) {
  std::string out = "{\"Entries\":[";
  bool first = true;
  for (const auto& e : entries) {
    if (!first) out += ',';
    first = false;
    out += "{\"Source\":";
    append_json_string(out, e.source);
    out += ",\"DetailType\":";
    append_json_string(out, e.detail_type);
    out += ",\"Detail\":";
    append_json_string(out, e.detail);
    if (!e.event_bus_name.empty()) {
      out += ",\"EventBusName\":";
      append_json_string(out, e.event_bus_name);
    }
    if (!e.resources.empty()) {
      out += ",\"Resources\":[";
      for (std::size_t i = 0; i < e.resources.size(); ++i) {
        if (i > 0) out += ',';
        append_json_string(out, e.resources[i]);
      }
      out += ']';
    }
    out += '}';
  }
  out += "]}";
  return out;
}

PutEventsResult parse_put_events(std::string_view body, std::size_t sent) {
  PutEventsResult result;
  auto unreadable = [&result](std::string what) {
    ServiceError error;
    error.kind = FailureKind::kRetryable;
    error.code = "UnreadableAnswer";
    error.message = "EventBridge: " + std::move(what);
    result.error = std::move(error);
    result.entries.clear();
    return result;
  };
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::array list;
  if (parser.parse(body.data(), body.size()).get(doc) != simdjson::SUCCESS ||
      doc["Entries"].get(list) != simdjson::SUCCESS) {
    return unreadable("PutEvents answered no Entries");
  }
  if (list.size() != sent) {
    return unreadable("PutEvents answered " + std::to_string(list.size()) + " entries for " +
                      std::to_string(sent));
  }
  for (simdjson::dom::element item : list) {
    PutEventsEntryResult r;
    std::string_view v;
    if (item["EventId"].get(v) == simdjson::SUCCESS && !v.empty()) {
      r.event_id = std::string(v);
      r.kind = FailureKind::kRetryable;  // unused when ok()
    } else {
      if (item["ErrorCode"].get(v) == simdjson::SUCCESS) r.error_code = std::string(v);
      if (item["ErrorMessage"].get(v) == simdjson::SUCCESS) r.error_message = std::string(v);
      if (r.error_code.empty())
        return unreadable("PutEvents: an entry with no EventId nor ErrorCode");
      r.kind = classify(r.error_code, 400);
    }
    result.entries.push_back(std::move(r));
  }
  return result;
}

struct EventBridgeClient::Impl {
  JsonServiceClient client;
  Impl(boost::asio::any_io_executor ex, EventBridgeConfig config)
      : client(std::move(ex), {"EventBridge", "events", "AWSEvents", "application/x-amz-json-1.1"},
               config.endpoint_url, std::move(config.region), credentials_of(config),
               std::move(config.http)) {}
};

EventBridgeClient::EventBridgeClient(boost::asio::any_io_executor executor,
                                     EventBridgeConfig config)
    : impl_(std::make_unique<Impl>(std::move(executor), std::move(config))) {}

EventBridgeClient::~EventBridgeClient() = default;

void EventBridgeClient::put_events(std::vector<PutEventsEntry> entries,
                                   std::function<void(PutEventsResult)> handler) {
  check_put_events(entries);
  const std::size_t sent = entries.size();
  impl_->client.call("PutEvents", build_put_events(entries),
                     [handler = std::move(handler), sent](JsonCallResult answer) {
                       if (answer.error) {
                         PutEventsResult result;
                         result.error = std::move(answer.error);
                         handler(std::move(result));
                         return;
                       }
                       handler(parse_put_events(answer.body, sent));
                     });
}

void EventBridgeClient::call(const std::string& action, std::string json_body,
                             std::function<void(EventBridgeCallResult)> handler) {
  impl_->client.call(
      action, std::move(json_body), [handler = std::move(handler)](JsonCallResult answer) {
        handler(EventBridgeCallResult{std::move(answer.error), std::move(answer.body)});
      });
}

}  // namespace outbox::aws
