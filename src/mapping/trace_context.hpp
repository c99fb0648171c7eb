// Private to src/mapping: the W3C Trace Context's rules for the traceparent column
// (--column-traceparent). Changes with that recommendation only.
#pragma once

#include <string_view>

namespace outbox::mapping {

// W3C Trace Context's traceparent: "00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>",
// lower-case hex, neither id all zeros, version ff forbidden; a later version may append
// "-..." after the 55 characters of version 00.
bool is_valid_traceparent(std::string_view text);

}  // namespace outbox::mapping
