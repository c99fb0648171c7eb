#include "sqs_batching.hpp"

#include <algorithm>
#include <cctype>

#include "json_protocol.hpp"
#include "outbox/aws/sigv4.hpp"
#include "outbox/common/log_text.hpp"

namespace outbox::aws {

namespace {

// The code point of the well-formed UTF-8 sequence at text[i] and its length; length 0 when there
// is none (overlong, surrogate, past U+10FFFF, cut short).
std::pair<std::uint32_t, std::size_t> decode_utf8(std::string_view text, std::size_t i) {
  std::uint32_t cp = 0;
  const std::size_t n = common::utf8_sequence(text, i, cp);
  return {cp, n};
}

bool xml_char(std::uint32_t cp) {
  return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
         (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
}

bool starts_with_ci(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

SqsMessageAttribute attribute(std::string_view name, std::string_view value) {
  SqsMessageAttribute a;
  a.name = std::string(name);
  a.data_type = sqs_text(value) ? "String" : "Binary";
  a.value = std::string(value);
  return a;
}

}  // namespace

bool utf8_text(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto [cp, n] = decode_utf8(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

bool sqs_text(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto [cp, n] = decode_utf8(text, i);
    if (n == 0 || !xml_char(cp)) return false;
    i += n;
  }
  return true;
}

bool sqs_id(std::string_view text) {
  if (text.empty() || text.size() > 128) return false;
  return std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x21 && c <= 0x7E; });
}

bool sqs_attribute_name(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  if (name.front() == '.' || name.back() == '.') return false;
  if (name.find("..") != std::string_view::npos) return false;
  if (starts_with_ci(name, "aws.") || starts_with_ci(name, "amazon.")) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

std::string sqs_id_for(std::string_view text) {
  if (sqs_id(text)) return std::string(text);
  return "sha256:" + payload_hash(text);
}

MappedMessage map_record(const sink::Record& record, bool fifo, std::size_t max_message_size) {
  MappedMessage out;
  SqsSendEntry& e = out.entry;
  std::optional<std::string_view> body_encoding;
  if (!record.value) {
    e.body = "null";
    body_encoding = "null";
  } else if (record.value->empty()) {
    e.body = "null";
    body_encoding = "empty";
  } else if (sqs_text(*record.value)) {
    e.body = std::string(*record.value);
  } else {
    e.body = base64(*record.value);
    body_encoding = "base64";
  }

  // Attributes by precedence; a header with no value or an empty one is left out.
  std::string_view id;
  std::vector<std::pair<std::string_view, std::string_view>> first;   // id, type, key, body
  std::vector<std::pair<std::string_view, std::string_view>> outbox;  // outbox.*
  std::vector<std::pair<std::string_view, std::string_view>> others;
  std::vector<std::pair<std::string_view, std::string_view>> packed;  // names SQS refuses
  std::optional<std::string_view> type;
  for (const sink::Header& h : record.headers) {
    if (h.name == "id" && h.value) {
      id = *h.value;
    } else if (h.name == "type" && h.value) {
      type = *h.value;
    }
  }
  if (!id.empty()) first.emplace_back("id", id);
  if (type && !type->empty()) first.emplace_back("type", *type);
  if (record.key && !record.key->empty()) first.emplace_back(kKeyAttribute, *record.key);
  if (!record.topic.empty()) first.emplace_back(kTopicAttribute, record.topic);
  if (body_encoding) first.emplace_back(kBodyAttribute, *body_encoding);
  for (const sink::Header& h : record.headers) {
    if (h.name == "id" || h.name == "type" || !h.value || h.value->empty()) continue;
    const bool reserved = h.name == kKeyAttribute || h.name == kTopicAttribute ||
                          h.name == kBodyAttribute || h.name == kHeadersAttribute;
    if (reserved || !sqs_attribute_name(h.name)) {
      packed.emplace_back(h.name, *h.value);
    } else if (h.name.starts_with("outbox.")) {
      outbox.emplace_back(h.name, *h.value);
    } else {
      others.emplace_back(h.name, *h.value);
    }
  }
  std::vector<std::pair<std::string_view, std::string_view>> all = std::move(first);
  all.insert(all.end(), outbox.begin(), outbox.end());
  all.insert(all.end(), others.begin(), others.end());
  std::size_t direct = all.size();
  if (!packed.empty() || all.size() > kSqsMaxMessageAttributes) {
    direct = std::min(all.size(), kSqsMaxMessageAttributes - 1);
  }
  for (std::size_t i = 0; i < direct; ++i)
    e.attributes.push_back(attribute(all[i].first, all[i].second));
  if (direct < all.size() || !packed.empty()) {
    std::string json = "{";
    bool comma = false;
    auto add = [&](std::string_view name, std::string_view value) {
      if (comma) json += ',';
      comma = true;
      append_json_string(json, name);
      json += ':';
      append_json_string(json, value);
    };
    for (std::size_t i = direct; i < all.size(); ++i) {
      if (!utf8_text(all[i].second)) {
        out.error = "InvalidHeader: header '" + std::string(all[i].first.substr(0, 256)) +
                    "' is past SQS's 10 message attributes and not UTF-8 text, so it cannot go "
                    "in the JSON of attribute outbox.headers";
        return out;
      }
      add(all[i].first, all[i].second);
    }
    for (const auto& [name, value] : packed) {
      if (!utf8_text(name) || !utf8_text(value)) {
        out.error =
            "InvalidHeader: a header whose name SQS refuses as an attribute name is not "
            "UTF-8 text, so it cannot go in the JSON of attribute outbox.headers";
        return out;
      }
      add(name, value);
    }
    json += '}';
    e.attributes.push_back(attribute(kHeadersAttribute, json));
  }

  if (fifo) {
    e.group_id = sqs_id_for(record.key ? *record.key : record.topic);
    if (!id.empty()) {
      e.deduplication_id = sqs_id_for(id);
    } else {
      std::string all_of = std::string(record.topic) + '\0' + std::string(record.key.value_or("")) +
                           '\0' + std::string(record.value.value_or(""));
      e.deduplication_id = "sha256:" + payload_hash(all_of);
    }
  }
  const std::size_t size = message_size(e);
  const std::size_t limit =
      std::min(max_message_size == 0 ? kSqsMaxMessageBytes : max_message_size, kSqsMaxMessageBytes);
  if (size > limit) {
    out.error = "MessageTooLong: the SQS message is " + std::to_string(size) + " bytes (body" +
                (body_encoding == std::optional<std::string_view>("base64") ? " in base64" : "") +
                " and attributes), the queue takes at most " + std::to_string(limit);
    out.size_error = true;
  }
  return out;
}

// ---- GroupScheduler ---------------------------------------------------------------------------

void GroupScheduler::add(Seq seq, const std::string& group, std::size_t bytes) {
  // No group (a standard queue): every entry is a group of its own.
  std::string key = group.empty() ? std::string(1, '\x01') + std::to_string(seq) : group;
  Group& g = groups_[key];
  g.entries.push_back(seq);
  const bool first = g.entries.size() == 1 && !g.busy;
  entries_.emplace(seq, Entry{key, bytes});
  if (first) ready_.push_back(std::move(key));
}

void GroupScheduler::make_ready(const std::string& group) {
  auto it = groups_.find(group);
  if (it == groups_.end()) return;
  if (it->second.entries.empty()) {
    groups_.erase(it);
    return;
  }
  ready_.push_back(group);
}

std::vector<GroupScheduler::Seq> GroupScheduler::next_batch(std::size_t max_entries,
                                                            std::size_t max_bytes,
                                                            Clock::time_point now) {
  // Groups whose retry is due go first: they waited longest.
  std::vector<std::string> due;
  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    due.push_back(std::move(delayed_.begin()->second));
    delayed_.erase(delayed_.begin());
  }
  for (auto it = due.rbegin(); it != due.rend(); ++it) {
    auto g = groups_.find(*it);
    if (g == groups_.end()) continue;
    g->second.busy = false;
    ready_.push_front(*it);
  }
  std::vector<Seq> batch;
  std::size_t bytes = 0;
  std::vector<std::string> skipped;  // did not fit: first next time
  while (batch.size() < max_entries && !ready_.empty() && skipped.size() < 16) {
    std::string key = std::move(ready_.front());
    ready_.pop_front();
    auto g = groups_.find(key);
    if (g == groups_.end() || g->second.busy || g->second.entries.empty()) continue;
    const Seq seq = g->second.entries.front();
    const std::size_t size = entries_.at(seq).bytes;
    if (!batch.empty() && bytes + size > max_bytes) {
      skipped.push_back(std::move(key));
      continue;
    }
    g->second.busy = true;
    bytes += size;
    batch.push_back(seq);
  }
  for (auto it = skipped.rbegin(); it != skipped.rend(); ++it) ready_.push_front(std::move(*it));
  in_flight_ += batch.size();
  return batch;
}

void GroupScheduler::done(Seq seq) {
  auto it = entries_.find(seq);
  if (it == entries_.end()) return;
  const std::string key = std::move(it->second.group);
  entries_.erase(it);
  if (in_flight_ > 0) --in_flight_;
  auto g = groups_.find(key);
  if (g == groups_.end()) return;
  auto& q = g->second.entries;
  if (!q.empty() && q.front() == seq) {
    q.pop_front();
  } else {
    q.erase(std::remove(q.begin(), q.end(), seq), q.end());
  }
  g->second.busy = false;
  make_ready(key);
}

void GroupScheduler::retry(Seq seq, Clock::time_point at) {
  auto it = entries_.find(seq);
  if (it == entries_.end()) return;
  if (in_flight_ > 0) --in_flight_;
  // Its group stays busy until then: no later entry of it passes.
  delayed_.emplace(at, it->second.group);
}

std::optional<GroupScheduler::Clock::time_point> GroupScheduler::next_retry() const {
  if (delayed_.empty()) return std::nullopt;
  return delayed_.begin()->first;
}

void GroupScheduler::clear() {
  entries_.clear();
  groups_.clear();
  ready_.clear();
  delayed_.clear();
  in_flight_ = 0;
}

}  // namespace outbox::aws
