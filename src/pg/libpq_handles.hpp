// RAII holders for libpq's C handles, private to the pg module (STYLE.md 3).
#pragma once

#include <libpq-fe.h>

#include <string>

#include "outbox/common/c_handle.hpp"

namespace outbox::pg {

using common::CHandle;

using ConnHandle = CHandle<PGconn, &PQfinish>;
using ResultHandle = CHandle<PGresult, &PQclear>;
using BufferHandle = CHandle<char, &PQfreemem>;

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
