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
#include <vector>

namespace outbox::pg {

// Empty when libpq can read `conninfo` (key=value pairs, a postgresql:// URI, or a bare
// database name). Else one line naming the problem (e.g. "a '%' not followed by two hex digits
// (write a literal % as %25)") that never holds any part of the text. Either way the secrets
// it holds are remembered for redact().
std::string check_conninfo(const std::string& conninfo);

// A conninfo naming several hosts (host=a,b port=1,2): one conninfo per host, each with that
// host's host, hostaddr and port and every other setting as given (target_session_attrs
// dropped: one host is what it is). Empty for a single host or a conninfo libpq cannot read.
// For inspecting each server of a multi-host --pg (status, the standby's copy of the slot).
std::vector<std::string> per_host_conninfos(const std::string& conninfo);

// `conninfo` with its host, hostaddr and port replaced by the one server given (empty: left
// out); every other setting as given. "" when libpq cannot read `conninfo`.
std::string pin_conninfo(const std::string& conninfo, const std::string& host,
                         const std::string& hostaddr, const std::string& port);

// `text` with every secret of the conninfos checked so far replaced by "***".
std::string redact(std::string text);

}  // namespace outbox::pg
