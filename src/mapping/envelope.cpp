#include "outbox/mapping/envelope.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "outbox/v1/event.pb.h"

namespace outbox::mapping {

namespace {

namespace od = simdjson::ondemand;

// The JSON envelope's fields; the names of the outbox table's columns (and of event.proto).
enum Field : unsigned {
  kId = 1,
  kAggregateType = 2,
  kAggregateId = 4,
  kType = 8,
  kPayload = 16,
  kHeaders = 32,
};

Field field_of(std::string_view key) {
  if (key == "id") return kId;
  if (key == "aggregatetype" || key == "aggregate_type") return kAggregateType;
  if (key == "aggregateid" || key == "aggregate_id") return kAggregateId;
  if (key == "type") return kType;
  if (key == "payload") return kPayload;
  if (key == "headers") return kHeaders;
  return Field{0};
}

std::string json_error(std::string_view where, simdjson::error_code code) {
  return "is not a valid JSON envelope (" + std::string(where) +
         "): " + simdjson::error_message(code);
}

std::string_view trim_right(std::string_view text) {
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\r' ||
                           text.back() == '\t')) {
    text.remove_suffix(1);
  }
  return text;
}

std::string check_required(const Envelope& out, const char* format) {
  if (out.id.empty()) return std::string("is ") + format + " without an id";
  if (out.aggregate_type.empty()) return std::string("is ") + format + " without an aggregate type";
  return {};
}

}  // namespace

struct EnvelopeReader::Impl {
  od::parser parser;
  std::string padded;  // the content and simdjson's padding
  outbox::v1::Event event;
  std::vector<EnvelopeHeader> headers;

  // A JSON string field. Returns why it is not one, or empty.
  static std::string string_of(od::value& value, std::string_view name, std::string_view& out) {
    if (const auto error = value.get_string().get(out); error) {
      return "is a JSON envelope whose \"" + std::string(name) + "\" is not a string";
    }
    return {};
  }

  std::string read_json(std::string_view content, Envelope& out) {
    padded.assign(content);
    padded.resize(content.size() + simdjson::SIMDJSON_PADDING);
    od::document doc;
    if (const auto error = parser.iterate(padded.data(), content.size(), padded.size()).get(doc);
        error) {
      return json_error("document", error);
    }
    od::object object;
    if (const auto error = doc.get_object().get(object); error) {
      return json_error("the envelope must be an object", error);
    }
    unsigned seen = 0;
    for (auto item : object) {
      od::field field;
      if (const auto error = std::move(item).get(field); error) return json_error("field", error);
      std::string_view key;
      if (const auto error = field.unescaped_key().get(key); error) {
        return json_error("key", error);
      }
      const Field f = field_of(key);
      if (f == 0) {
        continue;  // unknown fields are skipped: newer producers may add some
      }
      if ((seen & f) != 0) return "is a JSON envelope with \"" + std::string(key) + "\" twice";
      seen |= f;
      od::value& value = field.value();
      bool is_null = false;
      if (const auto error = value.is_null().get(is_null); error) return json_error(key, error);
      if (is_null) continue;  // as if absent
      std::string_view text;
      switch (f) {
        case kId:
          if (auto e = string_of(value, key, out.id); !e.empty()) return e;
          break;
        case kAggregateType:
          if (auto e = string_of(value, key, out.aggregate_type); !e.empty()) return e;
          break;
        case kAggregateId:
          if (auto e = string_of(value, key, text); !e.empty()) return e;
          out.aggregate_id = text;
          break;
        case kType:
          if (auto e = string_of(value, key, text); !e.empty()) return e;
          out.type = text;
          break;
        case kPayload: {
          od::json_type type;
          if (const auto error = value.type().get(type); error) return json_error(key, error);
          simdjson::error_code error = simdjson::SUCCESS;
          if (type == od::json_type::object) {
            od::object o;
            error = value.get_object().get(o);
            if (!error) error = o.raw_json().get(text);
          } else if (type == od::json_type::array) {
            od::array a;
            error = value.get_array().get(a);
            if (!error) error = a.raw_json().get(text);
          } else {
            // A scalar: its token as written (a string stays quoted, as a jsonb column prints).
            text = trim_right(value.raw_json_token());
            if (type == od::json_type::string) {
              std::string_view unused;
              error = value.get_string().get(unused);  // validates the string
            }
          }
          if (error) return json_error(key, error);
          out.payload = text;
          break;
        }
        case kHeaders: {
          od::object o;
          if (value.get_object().get(o)) {
            return "is a JSON envelope whose \"headers\" is not an object";
          }
          for (auto h : o) {
            od::field header;
            if (const auto error = std::move(h).get(header); error) {
              return json_error("headers", error);
            }
            std::string_view name, header_value;
            if (const auto error = header.unescaped_key().get(name); error) {
              return json_error("headers", error);
            }
            if (header.value().get_string().get(header_value)) {
              return "is a JSON envelope whose header \"" + std::string(name) +
                     "\" is not a string";
            }
            headers.push_back({name, header_value});
          }
          break;
        }
        default:
          break;
      }
    }
    // Past the object's '}', only the end of the input may follow.
    const char* after = nullptr;
    if (doc.current_location().get(after) != simdjson::OUT_OF_BOUNDS) {
      return "is a JSON envelope with more after its object";
    }
    out.headers = headers;
    return check_required(out, "a JSON envelope");
  }

  std::string read_protobuf(std::string_view content, Envelope& out) {
    if (!event.ParseFromArray(content.data(), static_cast<int>(content.size()))) {
      return "is not a valid protobuf outbox.v1.Event (nor JSON, which would start with '{')";
    }
    out.id = event.id();
    out.aggregate_type = event.aggregate_type();
    if (event.has_aggregate_id()) out.aggregate_id = event.aggregate_id();
    if (event.has_type()) out.type = event.type();
    if (event.has_payload()) out.payload = event.payload();
    for (const auto& [name, value] : event.headers()) headers.push_back({name, value});
    // A protobuf map has no order: by name, so that the same event gives the same record.
    std::sort(headers.begin(), headers.end(),
              [](const EnvelopeHeader& a, const EnvelopeHeader& b) { return a.name < b.name; });
    out.headers = headers;
    return check_required(out, "an outbox.v1.Event");
  }
};

EnvelopeReader::EnvelopeReader() : impl_(std::make_unique<Impl>()) {}
EnvelopeReader::~EnvelopeReader() = default;
EnvelopeReader::EnvelopeReader(EnvelopeReader&&) noexcept = default;
EnvelopeReader& EnvelopeReader::operator=(EnvelopeReader&&) noexcept = default;

std::string EnvelopeReader::read(std::string_view content, MessageFormat format, Envelope& out) {
  out = Envelope{};
  impl_->headers.clear();
  const bool json = format == MessageFormat::kJson ||
                    (format == MessageFormat::kAuto && !content.empty() && content[0] == '{');
  return json ? impl_->read_json(content, out) : impl_->read_protobuf(content, out);
}

}  // namespace outbox::mapping
