// For the flag tests of unit_app: the one-line UsageError a command line gets.
#pragma once

#include <string>
#include <vector>

#include "outbox/app/options.hpp"

namespace outbox::app {

// What parse_command_line says of `args` (argv without the program name; run's flags when it
// starts with a flag), or "no error" when it parses.
inline std::string error_of(const std::vector<std::string>& args, const Environment& env = {}) {
  try {
    parse_command_line(args, env);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace outbox::app
