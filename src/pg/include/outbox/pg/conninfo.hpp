// The connection string as libpq will read it, checked once at start, and the secrets it holds
// kept out of every message of the pg module.
//
// libpq quotes the offending token when it cannot parse a conninfo or URI (a password with a
// stray '%', an unquoted space), and a URI with an unencoded '@' in its password parses into a
// host name holding the rest of the password, which the failed connection then names. So a
// conninfo is checked with PQconninfoParse before any connection, refused with a message of
// our own that never shows its text; and the password, sslpassword and the URI's raw password of
// every conninfo checked are remembered and replaced by "***" in every pg::Error (redact()).
// Thread-safe: the remembered secrets are guarded by a mutex.
#pragma once

#include <string>

namespace outbox::pg {

// Empty when libpq can read `conninfo` (key=value pairs, a postgresql:// URI, or a bare
// database name). Else one line naming the problem (e.g. "a '%' not followed by two hex digits
// (write a literal % as %25)") that never holds any part of the text. Either way the secrets
// it holds are remembered for redact().
std::string check_conninfo(const std::string& conninfo);

// `text` with every secret of the conninfos checked so far replaced by "***".
std::string redact(std::string text);

}  // namespace outbox::pg
