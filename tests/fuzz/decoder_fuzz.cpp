// libFuzzer target for the pgoutput decoder and the CopyBoth framing. Seed corpus: corpus/ (the
// golden messages of tests/data/pgoutput as raw bytes). Besides "no crash, no sanitizer report",
// it checks that decode and decode_into agree and that every view of a result lies in the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <variant>

#include "outbox/pgoutput/decoder.hpp"
#include "outbox/pgoutput/wire.hpp"

namespace {

using namespace outbox::pgoutput;

struct ViewCheck {
  std::span<const std::byte> input;

  void in_input(std::string_view v) const {
    if (v.empty()) return;
    const auto* begin = reinterpret_cast<const std::byte*>(v.data());
    if (begin < input.data() || begin + v.size() > input.data() + input.size()) std::abort();
  }
  void tuple(const TupleData& t) const {
    for (const auto& value : t) {
      if (value.kind != ValueKind::kText && value.kind != ValueKind::kBinary &&
          !value.data.empty()) {
        std::abort();
      }
      in_input(value.data);
    }
  }
  void operator()(const Begin&) const {}
  void operator()(const Commit&) const {}
  void operator()(const Origin& m) const { in_input(m.name); }
  void operator()(const Relation& m) const {
    in_input(m.nspname);
    in_input(m.relname);
    for (const auto& c : m.columns) in_input(c.name);
  }
  void operator()(const Type& m) const {
    in_input(m.nspname);
    in_input(m.name);
  }
  void operator()(const Insert& m) const { tuple(m.new_tuple); }
  void operator()(const Update& m) const {
    tuple(m.old_tuple);
    tuple(m.new_tuple);
  }
  void operator()(const Delete& m) const { tuple(m.old_tuple); }
  void operator()(const Truncate&) const {}
  void operator()(const LogicalMessage& m) const {
    in_input(m.prefix);
    in_input(m.content);
  }
};

// Reused across inputs, as the replication loop reuses it across messages.
Message g_reused;

void check_pgoutput(std::span<const std::byte> bytes) {
  const auto fresh = decode(bytes);
  DecodeError error;
  const DecodeError* failed = decode_into(bytes, g_reused, error);
  if (const auto* message = std::get_if<Message>(&fresh)) {
    if (failed != nullptr || message->index() != g_reused.index()) std::abort();
    std::visit(ViewCheck{bytes}, *message);
    std::visit(ViewCheck{bytes}, g_reused);
  } else {
    const auto& e = std::get<DecodeError>(fresh);
    if (failed == nullptr || e.offset > bytes.size() || e.reason.empty()) std::abort();
    if (e.offset != error.offset || e.reason != error.reason) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  check_pgoutput(bytes);
  const auto frame = decode_copy_message(bytes);
  if (const auto* copy = std::get_if<CopyMessage>(&frame)) {
    if (const auto* x = std::get_if<XLogData>(copy)) check_pgoutput(x->payload);
  }
  return 0;
}
