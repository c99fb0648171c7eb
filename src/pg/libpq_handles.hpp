// RAII holders for libpq's C handles, private to the pg module (STYLE.md 3).
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <string>

namespace outbox::pg {

template <auto Free>
struct CDeleter {
  template <typename T>
  void operator()(T* p) const {
    if (p != nullptr) Free(p);
  }
};

using ConnHandle = std::unique_ptr<PGconn, CDeleter<&PQfinish>>;
using ResultHandle = std::unique_ptr<PGresult, CDeleter<&PQclear>>;
using BufferHandle = std::unique_ptr<char, CDeleter<&PQfreemem>>;

// libpq's messages end with a newline and may continue on indented lines: make them one line.
inline std::string one_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (std::size_t p; (p = s.find("\n\t")) != std::string::npos;) s.replace(p, 2, " ");
  for (auto& c : s) {
    if (c == '\n') c = ' ';
  }
  return s;
}

}  // namespace outbox::pg
