// Paths of the checkout and the build that a test needs (its logs folder, a script, a test data
// folder), given at compile time relative to the directory of the test's executable and made
// absolute at run time (cmake/OutboxTestPaths.cmake writes the macros). The objects then hold
// no absolute path, so that a fresh clone in another folder is a ccache hit for every test
// source (CCACHE_BASEDIR makes the include paths relative; a -D with an absolute path would
// not be). Forced into each such test's translation units with -include.
#pragma once

#include <unistd.h>

#include <climits>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace outbox_test {

// `relative` (to the running executable's directory) as an absolute, normal path.
inline std::string build_path(const char* relative) {
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) throw std::runtime_error("readlink /proc/self/exe failed");
  exe[n] = '\0';
  return (std::filesystem::path(exe).parent_path() / relative).lexically_normal().string();
}

}  // namespace outbox_test
