// Counts heap allocations made through the global operator new in the unit_mapping binary, so tests
// can assert that the hot path allocates nothing once warm. The replacement operators live in
// allocation_counter.cpp, a translation unit of their own so that they are never inlined.
// Under AddressSanitizer they are left out (ASan's own operators check new/delete pairing, which
// matters more there), and counting_allocations() is false.
#pragma once

#include <cstddef>

namespace outbox::test {

bool counting_allocations();
std::size_t allocation_count();

}  // namespace outbox::test
