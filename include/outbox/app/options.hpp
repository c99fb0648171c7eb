// Command-line flags of `outbox-relay`. Parsing is pure: no I/O besides what the caller prints.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "outbox/relay/relay.hpp"

namespace outbox::app {

// A flag or value the user got wrong; what() is one line naming the flag.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  relay::RelayConfig relay;
  std::string log_level = "info";
  bool help = false;
  bool version = false;
};

// Throws UsageError.
Options parse_options(const std::vector<std::string>& args);

std::string usage();

}  // namespace outbox::app
