#include "eventbridge_batching.hpp"

#include <simdjson.h>

#include "json_protocol.hpp"

namespace outbox::aws {

namespace {

// One JSON text (any value), valid UTF-8: simdjson's parse checks both.
bool is_json_text(std::string_view bytes) {
  if (bytes.empty()) return false;
  thread_local simdjson::dom::parser parser;  // its buffers kept from one record to the next
  simdjson::dom::element doc;
  return parser.parse(bytes.data(), bytes.size()).get(doc) == simdjson::SUCCESS;
}

void append_optional(std::string& out, const std::optional<std::string_view>& value) {
  if (value) {
    append_json_string(out, *value);
  } else {
    out += "null";
  }
}

}  // namespace

std::string build_detail(const sink::Record& record) {
  std::optional<std::string_view> id;
  std::optional<std::string_view> type;
  std::size_t others = 0;
  for (const sink::Header& h : record.headers) {
    if (h.name == "id" && !id) {
      id = h.value.value_or("");
    } else if (h.name == "type" && !type && h.value) {
      type = h.value;
    } else {
      ++others;
    }
  }
  std::string out;
  out.reserve(64 + (record.value ? record.value->size() + record.value->size() / 3 : 0));
  out += "{\"id\":";
  append_json_string(out, id.value_or(""));
  if (type) {
    out += ",\"type\":";
    append_json_string(out, *type);
  }
  if (record.key) {
    out += ",\"aggregateid\":";
    append_json_string(out, *record.key);
  }
  if (others > 0) {
    out += ",\"headers\":{";
    bool first = true;
    bool id_seen = false;
    bool type_seen = false;
    for (const sink::Header& h : record.headers) {
      // The first "id" and the first non-null "type" are Detail's own fields (above).
      if (h.name == "id" && !id_seen) {
        id_seen = true;
        continue;
      }
      if (h.name == "type" && !type_seen && h.value) {
        type_seen = true;
        continue;
      }
      if (!first) out += ',';
      first = false;
      append_json_string(out, h.name);
      out += ':';
      append_optional(out, h.value);
    }
    out += '}';
  }
  if (!record.value) {
    out += ",\"payload\":null}";
    return out;
  }
  const std::string_view value = *record.value;
  if (is_json_text(value)) {
    out += ",\"payload\":";
    out += value;
  } else if (simdjson::validate_utf8(value.data(), value.size())) {
    out += ",\"payload\":";
    append_json_string(out, value);
  } else {
    out += ",\"payload_encoding\":\"base64\",\"payload\":\"";
    out += base64(value);
    out += '"';
  }
  out += '}';
  return out;
}

MappedEntry map_record(const sink::Record& record, const std::string& bus) {
  MappedEntry m;
  m.entry.source = std::string(record.topic);
  for (const sink::Header& h : record.headers) {
    if (h.name == "type" && h.value && !h.value->empty()) {
      m.entry.detail_type = std::string(*h.value);
      break;
    }
  }
  if (m.entry.detail_type.empty()) m.entry.detail_type = std::string(kDefaultDetailType);
  m.entry.event_bus_name = bus;
  if (m.entry.source.empty()) {
    m.error = "InvalidSource: the EventBridge Source (the rendered topic) is empty";
    return m;
  }
  m.entry.detail = build_detail(record);
  m.size = entry_size(m.entry);
  if (m.size > kPutEventsMaxBytes) {
    m.error = "EntryTooLarge: the EventBridge entry is " + std::to_string(m.size) +
              " bytes (Source, DetailType and Detail), PutEvents takes at most " +
              std::to_string(kPutEventsMaxBytes);
    m.size_error = true;
  }
  return m;
}

}  // namespace outbox::aws
