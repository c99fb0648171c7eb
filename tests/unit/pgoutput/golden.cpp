#include "golden.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace outbox::pgoutput::testing {
namespace {

const std::filesystem::path kDir = std::filesystem::path(OUTBOX_TEST_DATA_DIR) / "pgoutput";

int nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  throw std::invalid_argument(std::string("not a hex digit: ") + c);
}

}  // namespace

Bytes from_hex(const std::string& hex) {
  std::string digits;
  std::copy_if(hex.begin(), hex.end(), std::back_inserter(digits),
               [](char c) { return c != '\n' && c != '\r' && c != ' '; });
  if (digits.size() % 2 != 0) throw std::invalid_argument("odd number of hex digits");
  Bytes out;
  for (std::size_t i = 0; i < digits.size(); i += 2) {
    out.push_back(static_cast<std::byte>(nibble(digits[i]) * 16 + nibble(digits[i + 1])));
  }
  return out;
}

Bytes golden(const std::string& name) {
  std::ifstream in(kDir / (name + ".hex"));
  if (!in) throw std::runtime_error("missing golden file " + (kDir / (name + ".hex")).string());
  return from_hex(std::string(std::istreambuf_iterator<char>(in), {}));
}

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    if (entry.path().extension() == ".hex") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace outbox::pgoutput::testing
