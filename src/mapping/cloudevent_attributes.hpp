// Private to src/mapping: --format cloudevents, the Kafka protocol binding of CloudEvents 1.0 in
// binary content mode. The attributes a row gives (ce_specversion, ce_id, ce_source from its own
// template, ce_type, ce_time, ce_subject, content-type), the rows that cannot give them refused
// with the column named. Changes with the CloudEvents spec and its flags only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/mapping/mapper.hpp"
#include "outbox/mapping/topic_template.hpp"
#include "outbox/pgoutput/messages.hpp"

namespace outbox::mapping {

class CloudEventAttributes {
 public:
  // ce_specversion, ce_id, ce_source, ce_type, ce_time, ce_subject, content-type.
  static constexpr std::size_t kMaxHeaders = 7;

  // Throws std::invalid_argument on an invalid --ce-source template.
  explicit CloudEventAttributes(const MapperConfig& config);

  // The columns the ce_source template references, in order (may repeat).
  const std::vector<std::string>& source_columns() const { return source_.columns(); }

  // What the row's relation gives: the index of each source_columns() entry (-1 when absent),
  // whether the type column exists, whether the payload is bytea.
  struct Columns {
    std::span<const int> source;
    bool has_type = false;
    bool bytea_payload = false;
  };

  // Writes the attributes of `event` (its id, type, key and value already mapped) into
  // `headers` from `header` on, which it advances; `time_us` is ce_time, read from the timestamp
  // column when `time_from_column`. Returns the offending column and why, or an empty reason.
  // The views written stay valid until the next call.
  std::pair<std::string_view, std::string> append(const Event& event,
                                                  const pgoutput::TupleData& tuple,
                                                  const Columns& columns, std::int64_t time_us,
                                                  bool time_from_column,
                                                  std::span<ExtraHeader> headers,
                                                  std::size_t& header);

 private:
  std::string column_id_;
  std::string column_type_;
  std::string column_timestamp_;
  std::string content_type_;
  TopicTemplate source_;
  std::vector<std::string_view> source_values_;
  std::string source_scratch_;
  std::array<char, 32> time_text_{};
};

}  // namespace outbox::mapping
