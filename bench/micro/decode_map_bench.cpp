// Micro-benchmark of the relay's per-event hot path: one CopyData frame ('w' XLogData carrying a
// pgoutput Insert of an outbox row) -> decode_copy_message -> decode_into -> Mapper::map_insert.
// Reports ns/event (Google Benchmark's time) and allocations/event (global operator new counted).
// Run: build-bench/bench/bench_decode_map [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <variant>
#include <vector>

#include "outbox/mapping/mapper.hpp"
#include "outbox/pgoutput/decoder.hpp"
#include "outbox/pgoutput/wire.hpp"

namespace {
std::atomic<std::uint64_t> g_allocs{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {
namespace pgoutput = outbox::pgoutput;
namespace ob = outbox::mapping;

struct Buf {
  std::vector<std::byte> b;
  void u8(std::uint8_t v) { b.push_back(static_cast<std::byte>(v)); }
  void be(std::uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) u8(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void cstr(const std::string& s) {
    for (char c : s) u8(static_cast<std::uint8_t>(c));
    u8(0);
  }
  void text(const std::string& s) {
    u8('t');
    be(s.size(), 4);
    for (char c : s) u8(static_cast<std::uint8_t>(c));
  }
};

constexpr std::uint32_t kRelid = 16385;

std::vector<std::byte> relation_message(std::uint32_t payload_oid = 3802) {
  Buf m;
  m.u8('R');
  m.be(kRelid, 4);
  m.cstr("public");
  m.cstr("outbox");
  m.u8('d');
  const char* names[] = {"id", "aggregatetype", "aggregateid", "type", "payload"};
  const std::uint32_t oids[] = {2950, 25, 25, 25, payload_oid};
  m.be(5, 2);
  for (int i = 0; i < 5; ++i) {
    m.u8(i == 0 ? 1 : 0);
    m.cstr(names[i]);
    m.be(oids[i], 4);
    m.be(0xffffffffu, 4);
  }
  return m.b;
}

// The frame as the walsender sends it: 'w', walStart, walEnd, sendTime, then the Insert.
std::vector<std::byte> insert_frame(std::size_t payload_bytes, int shape = 0) {
  Buf m;
  m.u8('w');
  m.be(0x16B3748, 8);
  m.be(0x16B3748, 8);
  m.be(0x2B4C2E6F1A3C0ULL, 8);
  m.u8('I');
  m.be(kRelid, 4);
  m.u8('N');
  m.be(5, 2);
  m.text("8e0f5a3c-3a1d-4f7e-9b1b-2f1f6c3e9d10");
  m.text("order");
  m.text("agg-417");
  m.text("OrderCreated");
  std::string payload;
  if (shape == 0) {
    payload = "{\"data\": \"";
    while (payload.size() + 2 < payload_bytes) payload += "0123456789abcdef"[payload.size() % 16];
    payload += "\"}";
  } else {
    // Binary payload bytes: as bytea's hex text output (shape 1), or as they are, which is what
    // pgoutput's binary mode would send (shape 2).
    std::string bytes(payload_bytes, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + 7);
    if (shape == 2) {
      payload = bytes;
    } else {
      payload = "\\x";
      for (const char c : bytes) {
        payload += "0123456789abcdef"[static_cast<unsigned char>(c) >> 4];
        payload += "0123456789abcdef"[static_cast<unsigned char>(c) & 15];
      }
    }
  }
  m.text(payload);
  return m.b;
}

void run_decode_map(benchmark::State& state, int shape, ob::Format format = ob::Format::kDebezium) {
  // Shape 1: a bytea payload column (hex decoded by the mapper); 2: its bytes as they are.
  const auto rel = relation_message(shape == 1 ? 17 : shape == 2 ? 25 : 3802);
  const auto frame = insert_frame(static_cast<std::size_t>(state.range(0)), shape);
  ob::MapperConfig config;
  config.format = format;
  ob::Mapper mapper{config};
  pgoutput::Message msg;
  pgoutput::DecodeError err;
  if (pgoutput::decode_into(rel, msg, err) != nullptr) {
    state.SkipWithError("relation does not decode");
    return;
  }
  mapper.on_relation(std::get<pgoutput::Relation>(msg));
  auto once = [&] {
    auto cr = pgoutput::decode_copy_message(frame);
    auto& x = std::get<pgoutput::XLogData>(std::get<pgoutput::CopyMessage>(cr));
    if (pgoutput::decode_into(x.payload, msg, err) != nullptr) std::abort();
    auto mapped = mapper.map_insert(std::get<pgoutput::Insert>(msg), 1'796'104'523'123'456);
    auto& ev = std::get<ob::Event>(mapped);
    benchmark::DoNotOptimize(ev.topic.data());
    benchmark::DoNotOptimize(ev.value);
  };
  once();  // warm-up: vectors reach their size, the topic scratch string its capacity
  const std::uint64_t a0 = g_allocs.load();
  for (auto _ : state) once();
  const std::uint64_t allocs = g_allocs.load() - a0;
  state.counters["allocs_per_event"] =
      benchmark::Counter(static_cast<double>(allocs) / static_cast<double>(state.iterations()));
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(frame.size()));
}
void BM_DecodeMap(benchmark::State& state) { run_decode_map(state, 0); }
BENCHMARK(BM_DecodeMap)->Arg(200)->Arg(4096);

// --format cloudevents: the ce_* headers too (the source rendered, the time formatted).
void BM_DecodeMapCloudEvents(benchmark::State& state) {
  run_decode_map(state, 0, ob::Format::kCloudEvents);
}
BENCHMARK(BM_DecodeMapCloudEvents)->Arg(200)->Arg(4096);

// A bytea payload of N bytes: pgoutput's text mode sends 2N+2 characters, the mapper decodes them.
void BM_DecodeMapByteaHex(benchmark::State& state) { run_decode_map(state, 1); }
BENCHMARK(BM_DecodeMapByteaHex)->Arg(200)->Arg(4096);

// The same N bytes as pgoutput's binary mode would hand them over: no decoding.
void BM_DecodeMapByteaRaw(benchmark::State& state) { run_decode_map(state, 2); }
BENCHMARK(BM_DecodeMapByteaRaw)->Arg(200)->Arg(4096);

// --messages: the same event as a transactional logical message with a JSON envelope, the way
// outbox.emit() sends it (payload N bytes): decode the 'M' message, read the envelope, map.
void BM_DecodeMapMessageJson(benchmark::State& state) {
  std::string payload = "{\"data\": \"";
  while (payload.size() + 2 < static_cast<std::size_t>(state.range(0))) payload += 'x';
  payload += "\"}";
  const std::string content =
      "{\"id\": \"8e0f5a3c-3a1d-4f7e-9b1b-2f1f6c3e9d10\", \"type\": \"OrderCreated\", "
      "\"headers\": {}, \"payload\": " +
      payload + ", \"aggregateid\": \"agg-417\", \"aggregatetype\": \"order\"}";
  Buf m;
  m.u8('w');
  m.be(0x16B3748, 8);
  m.be(0x16B3748, 8);
  m.be(0x2B4C2E6F1A3C0ULL, 8);
  m.u8('M');
  m.u8(1);
  m.be(0x16B3748, 8);
  m.cstr("outbox");
  m.be(content.size(), 4);
  for (char c : content) m.u8(static_cast<std::uint8_t>(c));
  const std::vector<std::byte> frame = m.b;
  ob::MapperConfig config;
  config.message_prefix = "outbox";
  ob::Mapper mapper{config};
  pgoutput::Message msg;
  pgoutput::DecodeError err;
  auto once = [&] {
    auto cr = pgoutput::decode_copy_message(frame);
    auto& x = std::get<pgoutput::XLogData>(std::get<pgoutput::CopyMessage>(cr));
    if (pgoutput::decode_into(x.payload, msg, err) != nullptr) std::abort();
    auto mapped = mapper.map_message(std::get<pgoutput::LogicalMessage>(msg));
    auto& ev = std::get<ob::Event>(mapped);
    benchmark::DoNotOptimize(ev.topic.data());
    benchmark::DoNotOptimize(ev.value);
  };
  once();
  const std::uint64_t a0 = g_allocs.load();
  for (auto _ : state) once();
  state.counters["allocs_per_event"] = benchmark::Counter(
      static_cast<double>(g_allocs.load() - a0) / static_cast<double>(state.iterations()));
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(frame.size()));
}
BENCHMARK(BM_DecodeMapMessageJson)->Arg(200)->Arg(4096);

}  // namespace

BENCHMARK_MAIN();
