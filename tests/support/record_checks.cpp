#include "outbox_test/record_checks.hpp"

#include <algorithm>
#include <sstream>
#include <tuple>

namespace outbox_test {

void Problems::add(const std::string& text) {
  if (texts_.size() < 20) texts_.push_back(text);
  ++count_;
}

std::string Problems::describe() const {
  std::string out = std::to_string(count_) + " problem(s), first ones:\n";
  for (const auto& text : texts_) out += "  " + text + "\n";
  return out;
}

std::string describe(const Record& record) {
  std::ostringstream out;
  out << record.topic << "/" << record.partition << "@" << record.offset
      << " key=" << record.key.value_or("(null)") << " value=" << record.value.substr(0, 120)
      << (record.value.size() > 120 ? "..." : "");
  for (const auto& [name, value] : record.headers) out << " " << name << "=" << value;
  return out.str();
}

std::vector<const Record*> in_kafka_order(const std::vector<Record>& records) {
  std::vector<const Record*> sorted;
  sorted.reserve(records.size());
  for (const auto& record : records) sorted.push_back(&record);
  std::sort(sorted.begin(), sorted.end(), [](const Record* a, const Record* b) {
    return std::tie(a->topic, a->partition, a->offset) <
           std::tie(b->topic, b->partition, b->offset);
  });
  return sorted;
}

bool DistinctIds::operator()(const std::vector<Record>& records) {
  for (; seen_records_ < records.size(); ++seen_records_) {
    auto it = records[seen_records_].headers.find("id");
    if (it != records[seen_records_].headers.end()) ids_.insert(it->second);
  }
  return ids_.size() >= target_;
}

}  // namespace outbox_test
