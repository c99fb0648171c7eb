#include "allocation_counter.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define OUTBOX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OUTBOX_TEST_ASAN 1
#endif
#endif

namespace {
std::atomic<std::size_t> g_allocations{0};
}  // namespace

namespace outbox::test {

#ifdef OUTBOX_TEST_ASAN
bool counting_allocations() { return false; }
#else
bool counting_allocations() { return true; }
#endif

std::size_t allocation_count() { return g_allocations.load(std::memory_order_relaxed); }

}  // namespace outbox::test

#ifndef OUTBOX_TEST_ASAN
// Every non-aligned form is replaced, so that each allocation is paired with a matching release
// whichever form a library (simdjson uses nothrow new) calls.
namespace {
void* counted_allocate(std::size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
}  // namespace

void* operator new(std::size_t size) {
  if (void* p = counted_allocate(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  if (void* p = counted_allocate(size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return counted_allocate(size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return counted_allocate(size);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#endif
