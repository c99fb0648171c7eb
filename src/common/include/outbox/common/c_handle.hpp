// The one RAII holder for C library handles (STYLE.md 3): a std::unique_ptr whose deleter calls
// the library's free function. Generic: the deleters (PQfinish, rd_kafka_destroy, ...) stay in
// the module that owns the library, so no other module sees a C handle type.
#pragma once

#include <memory>

namespace outbox::common {

// Calls Free(p) for a non-null p. Free may take T* or a pointer T* converts to (PQfreemem's void*).
template <auto Free>
struct CDeleter {
  template <typename T>
  void operator()(T* p) const noexcept {
    if (p != nullptr) Free(p);
  }
};

// CHandle<PGconn, PQfinish>, CHandle<rd_kafka_t, destroy_producer>, ...
template <typename T, auto Free>
using CHandle = std::unique_ptr<T, CDeleter<Free>>;

}  // namespace outbox::common
