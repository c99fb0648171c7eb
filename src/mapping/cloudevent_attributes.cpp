#include "cloudevent_attributes.hpp"

#include "column_values.hpp"
#include "timestamps.hpp"

namespace outbox::mapping {

CloudEventAttributes::CloudEventAttributes(const MapperConfig& config)
    : column_id_(config.column_id),
      column_type_(config.column_type),
      column_timestamp_(config.column_timestamp),
      content_type_(config.content_type),
      source_(config.ce_source.empty() ? "/outbox/${" + config.column_aggregatetype + "}"
                                       : config.ce_source) {
  source_values_.resize(source_.columns().size());
}

std::pair<std::string_view, std::string> CloudEventAttributes::append(
    const Event& event, const pgoutput::TupleData& tuple, const Columns& columns,
    std::int64_t time_us, bool time_from_column, std::span<ExtraHeader> headers,
    std::size_t& header) {
  if (event.id.empty()) {
    return {column_id_, "is empty, but a CloudEvent needs an id (ce_id)"};
  }
  if (!event.type) {
    return {column_type_, !columns.has_type
                              ? "is missing from the table, but a CloudEvent needs a type "
                                "(ce_type)"
                              : "is NULL, but a CloudEvent needs a type (ce_type)"};
  }
  if (event.type->empty()) {
    return {column_type_, "is empty, but a CloudEvent needs a type (ce_type)"};
  }
  for (std::size_t i = 0; i < columns.source.size(); ++i) {
    const auto reason = read_required(tuple, columns.source[i], source_values_[i]);
    if (!reason.empty()) {
      return {source_.columns()[i], std::string(reason) +
                                        ", but the CloudEvents source (ce_source "
                                        "from template \"" +
                                        source_.text() + "\") needs it"};
    }
  }
  source_.render(source_values_, source_scratch_);
  if (source_scratch_.empty()) {
    return {{},
            "renders an empty ce_source from template \"" + source_.text() +
                "\", but a CloudEvent needs a source"};
  }
  const std::size_t time_size = format_rfc3339(time_us, time_text_);
  if (time_size == 0) {
    constexpr std::string_view kOutside =
        "outside the years 0001 to 9999, which ce_time (RFC 3339) cannot carry";
    if (time_from_column) return {column_timestamp_, "is " + std::string(kOutside)};
    return {{}, "the commit time is " + std::string(kOutside)};
  }
  headers[header++] = {"ce_specversion", "1.0"};
  headers[header++] = {"ce_id", event.id};
  headers[header++] = {"ce_source", source_scratch_};
  headers[header++] = {"ce_type", event.type};
  headers[header++] = {"ce_time", std::string_view(time_text_.data(), time_size)};
  if (event.key) headers[header++] = {"ce_subject", event.key};
  if (event.value) {
    std::string_view content_type = content_type_;
    if (content_type.empty()) {
      content_type = columns.bytea_payload ? "application/octet-stream" : "application/json";
    }
    headers[header++] = {"content-type", content_type};
  }
  return {};
}

}  // namespace outbox::mapping
