// A relation named with its schema, and its one text form: "public.outbox", as messages, logs and
// --table print it. Unquoted: SQL quoting of it is pg's (pg::quote_ident and the sessions' own).
// Plain data; thread-safe as a value.
#pragma once

#include <string>

namespace outbox::common {

struct QualifiedName {
  std::string schema;
  std::string name;

  // "schema.name"
  std::string text() const { return schema + "." + name; }

  friend bool operator==(const QualifiedName&, const QualifiedName&) = default;
};

}  // namespace outbox::common
