// Golden pgoutput messages captured from a real PostgreSQL 15 server by scripts/capture-golden.sh.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace outbox::pgoutput::testing {

using Bytes = std::vector<std::byte>;

// Bytes of tests/data/pgoutput/<name>.hex (e.g. "03_insert"); fails the test if missing.
Bytes golden(const std::string& name);
// Every golden file name (without ".hex"), in stream order.
std::vector<std::string> golden_names();
Bytes from_hex(const std::string& hex);

}  // namespace outbox::pgoutput::testing
